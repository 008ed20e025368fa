"""DropStreak, without sockets: which lost connections make a peer stop (scaler/drop_streak.py)."""

from __future__ import annotations

from scaler.config import MIN_FRAME_BYTES
from scaler.drop_streak import DROPS_BEFORE_STOPPING, SOON_SECONDS, DropStreak

ADDRESS = "tcp://scheduler:2345"


def drop_after(streak: DropStreak, now: float, frame_bytes: int, registered_for: float = 1.0) -> object:
    streak.registered(now)
    streak.sent(frame_bytes)
    return streak.dropped(now + registered_for, ADDRESS)


def test_drops_soon_after_a_large_frame_stop_the_peer_at_the_limit() -> None:
    streak = DropStreak()
    for round in range(DROPS_BEFORE_STOPPING - 1):
        assert drop_after(streak, 100.0 * round, 20_000_000) is None
    reason = drop_after(streak, 1000.0, 20_000_000)
    assert isinstance(reason, str) and ADDRESS in reason and "20000000 bytes" in reason
    assert "--max-frame-bytes" in reason


def test_small_frames_late_drops_and_drops_before_registering_break_the_streak() -> None:
    streak = DropStreak()
    for _ in range(10):
        assert drop_after(streak, 0.0, 20_000_000) is None
        assert drop_after(streak, 0.0, 20_000_000) is None
        assert drop_after(streak, 0.0, MIN_FRAME_BYTES - 1) is None  # nothing large: a restart, not a refused frame
    for _ in range(10):
        assert drop_after(streak, 0.0, 20_000_000) is None
        assert drop_after(streak, 0.0, 20_000_000) is None
        assert drop_after(streak, 0.0, 20_000_000, registered_for=SOON_SECONDS + 1) is None  # it stayed a while
    assert drop_after(streak, 0.0, 20_000_000) is None
    assert streak.dropped(5.0, ADDRESS) is None  # dropped again before registering: no frame of ours caused it
