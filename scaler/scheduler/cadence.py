"""Internal: how often peers heartbeat and how long a silent one is given, as the cluster grows: sans-IO, no clock.

Every heartbeat costs the scheduler a read, a decode and an echo (about 50 us under PyPy, nearly all of it in ZeroMQ
and the event loop), so at a fixed interval idle peers cost in proportion to their number: 4,096 workers at 1 s took
15-17% of a core. The
scheduler therefore takes at most `heartbeats_per_second` from all its peers together: past that, the interval and
both peer timeouts are multiplied by a power of two (the *scale*), so a peer may stay silent for as many of its
intervals as configured. The scale doubles as soon as the peers would exceed the budget, and halves only once they
would stay under three quarters of it at half the interval, so a peer joining and leaving at the threshold does not
make it flap.

Peers learn the cadence from HelloReply and from every HeartbeatEcho, and say in each heartbeat which interval they
use (`intervalMs`). A peer's `PeerClock` bounds the interval it may be using: raised at once when the scheduler names a
longer one (the peer may switch as soon as the echo arrives), lowered only when the peer says it switched (its
heartbeats in flight still follow the old one). A peer that states no interval is an older one: it keeps the cadence
of its HelloReply, and so does the scheduler for it.
"""

from __future__ import annotations

_UINT32_MAX = 2**32 - 1
# The interval stretches up to a minute (beyond it, more peers send more than the budget): a worker exits after its
# death timeout (300 s by default) without a word from the scheduler, so an echo must come well within it.
MAX_STRETCHED_INTERVAL_SECONDS = 60.0


class PeerClock:
    """A peer's side of the cadence: the longest interval it may be using, and the silence it is allowed."""

    __slots__ = ("allowed_ms", "timeout")

    def __init__(self, allowed_ms: int, timeout: float) -> None:
        self.allowed_ms = allowed_ms
        self.timeout = timeout  # seconds: past this much silence the peer is gone


class Cadence:
    __slots__ = (
        "base_ms",
        "worker_timeout",
        "client_timeout",
        "budget",
        "scale",
        "max_scale",
        "interval_ms",
        "worker_told_ms",
        "client_told_ms",
        "_grow_above",
        "_shrink_at",
    )

    def __init__(
        self, interval_seconds: float, worker_timeout_seconds: float, client_timeout_seconds: float, budget: int
    ) -> None:
        self.base_ms = max(1, round(interval_seconds * 1000))
        self.worker_timeout = worker_timeout_seconds  # as configured: at scale 1
        self.client_timeout = client_timeout_seconds
        self.budget = budget  # heartbeats a second from all peers together
        self.scale = 1
        self.max_scale = 1  # the largest power of two keeping the interval within the stretch limit (or 1)
        while self.base_ms * self.max_scale * 2 <= MAX_STRETCHED_INTERVAL_SECONDS * 1000:
            self.max_scale *= 2
        self._set_scale(1)

    def fit(self, peers: int) -> bool:
        """Choose the scale for `peers` connected peers; True when it changed. O(1) while it does not."""
        if self._shrink_at < peers <= self._grow_above:
            return False
        scale = self.scale
        while scale < self.max_scale and peers * 1000 > self.budget * self.base_ms * scale:
            scale *= 2
        while scale > 1 and peers * 1000 * 8 <= 3 * self.budget * self.base_ms * scale:
            scale //= 2
        if scale == self.scale:
            self._set_scale(scale)  # thresholds for the new count (the first call, or at the cap)
            return False
        self._set_scale(scale)
        return True

    def _set_scale(self, scale: int) -> None:
        self.scale = scale
        self.interval_ms = min(self.base_ms * scale, _UINT32_MAX)
        # on the wire: capped, as a huge timeout must not break the message (the scheduler keeps the real one)
        self.worker_told_ms = min(round(self.worker_timeout * scale * 1000), _UINT32_MAX)
        self.client_told_ms = min(round(self.client_timeout * scale * 1000), _UINT32_MAX)
        budget_ms = self.budget * self.base_ms
        # grow when peers * 1000 > budget_ms * scale; shrink when peers * 8000 <= 3 * budget_ms * scale
        self._grow_above = budget_ms * scale // 1000 if scale < self.max_scale else 1 << 62
        self._shrink_at = 3 * budget_ms * scale // 8000 if scale > 1 else -1

    def timeout_ms(self, worker: bool) -> int:
        """The peer timeout named now, for a worker or a client."""
        return self.worker_told_ms if worker else self.client_told_ms

    def clock(self, worker: bool) -> PeerClock:
        """A peer being told the cadence in its HelloReply."""
        return PeerClock(self.interval_ms, (self.worker_timeout if worker else self.client_timeout) * self.scale)

    def heartbeat(self, clock: PeerClock, stated_ms: int, worker: bool) -> None:
        """A peer's heartbeat said it uses `stated_ms` (0: an older peer, which keeps its HelloReply's cadence), and
        its echo is about to name the current one."""
        if not stated_ms:
            return
        allowed = clock.allowed_ms
        if stated_ms < allowed:  # it switched to a shorter one; never trust more than it was told
            allowed = stated_ms
        if allowed < self.interval_ms:  # the echo names a longer one, which it may use from its next heartbeat
            allowed = self.interval_ms
        if allowed != clock.allowed_ms:
            clock.allowed_ms = allowed
            timeout = self.worker_timeout if worker else self.client_timeout
            clock.timeout = timeout * max(1.0, allowed / self.base_ms)
