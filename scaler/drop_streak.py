"""Internal: a peer that keeps losing its connection to the scheduler for the same frame stops, and says why.

A scheduler closes the connection of a peer that sends a frame over its --max-frame-bytes (ZeroMQ does, before the
frame is read). Our peers split and refuse frames under the limit the scheduler announces (HelloReply.maxFrameBytes),
but an older scheduler announces none; a peer that then registers again and sends the same frame again would loop
forever. So: a connection that closes soon after its peer registered, having carried a large frame, counts toward a
streak; DROPS_BEFORE_STOPPING of them in a row, and the peer stops with a reason that names the frame. A scheduler
that restarts, or a network that drops a connection now and then, breaks the streak: the peer stays registered a
while, or sent nothing large. Sans-IO: the caller passes the time and the sizes.
"""

from __future__ import annotations

from typing import Optional

from scaler.config import MIN_FRAME_BYTES

DROPS_BEFORE_STOPPING = 3
SOON_SECONDS = 10.0  # a drop this soon after registering counts toward the streak


class DropStreak:
    __slots__ = ("_registered_at", "_largest", "_streak")

    def __init__(self) -> None:
        self._registered_at: Optional[float] = None
        self._largest = 0  # the largest frame sent since registering
        self._streak = 0

    def registered(self, now: float) -> None:
        self._registered_at = now
        self._largest = 0

    def sent(self, frame_bytes: int) -> None:
        if frame_bytes > self._largest:
            self._largest = frame_bytes

    def dropped(self, now: float, address: str) -> Optional[str]:
        """The connection closed: the reason to stop, or None to register again."""
        registered_at, largest = self._registered_at, self._largest
        self._registered_at = None
        self._largest = 0
        if registered_at is not None and now - registered_at < SOON_SECONDS and largest >= MIN_FRAME_BYTES:
            self._streak += 1
        else:
            self._streak = 0
        if self._streak < DROPS_BEFORE_STOPPING:
            return None
        return (
            f"the scheduler at {address} closed the connection {self._streak} times in a row, each within"
            f" {SOON_SECONDS:g}s of registering and after a frame of up to {largest} bytes from here: it refuses"
            " frames that large (scaler_scheduler --max-frame-bytes; a scheduler of an older version does not announce"
            " its limit). Stopping rather than sending it again"
        )
