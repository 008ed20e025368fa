"""Internal: rate limits for warnings that peers cause, so that no peer, and no crowd of peers, can flood a log.

`RateLimiter` is sans-IO: the caller passes `now` (any monotonic clock, in seconds), so the scheduler's and the
worker's cores stay clock-free. Within each interval it allows the first `per_key` events of each key (a peer, or a
kind of event) and `overall` events in all; the rest are counted, and `summary` sums them up once the interval has
ended. `LimitedLog` puts one in front of a logger. Standard library only: the scheduler imports this on PyPy.
"""

from __future__ import annotations

import logging
from typing import Dict, Hashable, Optional

from scaler.config import (
    DEFAULT_PEER_WARNINGS_INTERVAL_SECONDS,
    DEFAULT_PEER_WARNINGS_PER_INTERVAL,
    DEFAULT_PEER_WARNINGS_PER_PEER,
)

_MAX_KEYS = 1024  # keys counted one by one in an interval; beyond, events count only in the total (bounded memory)
_KEYS_NAMED = 3  # the keys with the most suppressed events that a summary names


class RateLimiter:
    __slots__ = ("per_key", "overall", "interval_seconds", "_ends", "_allowed", "_by_key", "_suppressed", "_other")

    def __init__(
        self,
        per_key: int = DEFAULT_PEER_WARNINGS_PER_PEER,
        overall: int = DEFAULT_PEER_WARNINGS_PER_INTERVAL,
        interval_seconds: float = DEFAULT_PEER_WARNINGS_INTERVAL_SECONDS,
    ) -> None:
        if per_key < 1 or overall < 1 or not interval_seconds > 0:
            raise ValueError("per_key and overall must be >= 1 and interval_seconds > 0")
        self.per_key = per_key
        self.overall = overall
        self.interval_seconds = interval_seconds
        self._ends = float("-inf")  # the current interval ends then; it starts with the first event after the last
        self._allowed = 0
        self._by_key: Dict[Hashable, list] = {}  # key -> [allowed, suppressed] in the current interval
        self._suppressed = 0
        self._other = 0  # suppressed events of keys beyond _MAX_KEYS

    def allow(self, key: Hashable, now: float) -> bool:
        """Whether to report this event of `key`; False means it was counted for the next summary.

        An interval with suppressed events stays open until `summary` sums it up, so that none goes unreported."""
        if now >= self._ends and not self._suppressed:
            self._ends = now + self.interval_seconds
            self._allowed = 0
            self._by_key.clear()
        counts = self._by_key.get(key)
        if counts is None:
            if len(self._by_key) >= _MAX_KEYS:
                self._suppressed += 1
                self._other += 1
                return False
            counts = self._by_key[key] = [0, 0]
        if counts[0] < self.per_key and self._allowed < self.overall:
            counts[0] += 1
            self._allowed += 1
            return True
        counts[1] += 1
        self._suppressed += 1
        return False

    def summary(self, now: float, force: bool = False, what: str = "warning(s)") -> Optional[str]:
        """Once the interval has ended (at once with `force`), what it suppressed, e.g. "suppressed 495 warning(s) in
        10.0 s (X|host|1: 490, others: 5)" (None if nothing was), and a new interval starts with the next event."""
        if not self._suppressed or (now < self._ends and not force):
            return None
        suppressed = self._suppressed
        worst = sorted(
            ((counts[1], key) for key, counts in self._by_key.items() if counts[1]), key=lambda item: -item[0]
        )
        named = [f"{describe(key)}: {count}" for count, key in worst[:_KEYS_NAMED]]
        rest = suppressed - sum(count for count, _ in worst[:_KEYS_NAMED])
        if rest:
            named.append(f"others: {rest}")
        seconds = max(0.0, min(self.interval_seconds, now - (self._ends - self.interval_seconds)))
        self._ends = float("-inf")
        self._allowed = 0
        self._by_key.clear()
        self._suppressed = 0
        self._other = 0
        return f"suppressed {suppressed} {what} in {seconds:.1f} s ({', '.join(named)})"


def describe(key: Hashable) -> str:
    """A key as log lines show it: printable ASCII as it is, anything else escaped (a peer's identity is whatever
    bytes it chose, line feeds included), cut at 64 characters."""
    if isinstance(key, bytes):
        text = repr(key)[2:-1]
    else:
        text = str(key)
        if not (text.isascii() and text.isprintable()):
            text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= 64 else text[:61] + "..."


class LimitedLog:
    """Log lines of one level through a RateLimiter: `log(key, now, message, *args)` logs or counts; `flush(now)` (from
    a timer, and with force=True on the way out) logs the summary of an interval that ended, at the same level."""

    __slots__ = ("logger", "limiter", "prefix", "level", "what")

    def __init__(
        self,
        logger: logging.Logger,
        limiter: Optional[RateLimiter] = None,
        prefix: str = "",
        level: int = logging.WARNING,
        what: str = "warning(s)",
    ) -> None:
        """`prefix` starts the summary line ("Worker[0]: "), as it starts the lines; `what` names them in it."""
        self.logger = logger
        self.limiter = limiter if limiter is not None else RateLimiter()
        self.prefix = prefix
        self.level = level
        self.what = what

    def log(self, key: Hashable, now: float, message: str, *args: object) -> None:
        self.flush(now)
        if self.limiter.allow(key, now):
            self.logger.log(self.level, message, *args, stacklevel=2)  # the record names the caller

    def flush(self, now: float, force: bool = False) -> None:
        text = self.limiter.summary(now, force, self.what)
        if text is not None:
            self.logger.log(self.level, "%s%s", self.prefix, text)
