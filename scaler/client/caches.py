"""Internal: the client's small caches keyed by function (ids, signatures, names, submit sites, task labels): bounded,
oldest out first, and shared by the user's threads without a lock."""

from __future__ import annotations

from typing import Any, Dict


def put_bounded(cache: Dict[Any, Any], key: Any, value: Any, size: int) -> None:
    """cache[key] = value, first dropping the oldest entry if `size` are there. Each dict step is atomic under the GIL;
    when two threads make room at once, the one that finds the oldest gone (or the dict changing) leaves it at that."""
    if len(cache) >= size:
        try:
            del cache[next(iter(cache))]
        except (KeyError, RuntimeError, StopIteration):
            pass  # another thread made room meanwhile
    cache[key] = value
