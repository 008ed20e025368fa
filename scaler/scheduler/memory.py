"""Internal: what the scheduler learns about functions' memory, for placing their tasks (docs/guide/memory.md).

A worker with a memory limit offers it as the resource MEMORY, beside the resources it announces: a task that went past
a worker's limit runs again with the requirement "MEMORY above that limit", which only larger workers (and workers
without a limit) meet; the placement and balancing of requirements do the rest, at no cost to tasks without one.

The peaks are kept per function under a key that is the same for every client and after a reconnect: a hash of the
function's serialized bytes (a function's object id is salted per connection). Only failures past a limit are learned,
so the table stays empty, and placement untouched, on clusters that never hit one. Standard library only: the
scheduler runs on PyPy.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from typing import Deque, Iterable, Optional

from scaler.scheduler.resources import MEMORY, Resources

RECENT_PEAKS = 8  # peaks kept per function: the largest of them is what the function is expected to need
MAX_FUNCTIONS = 10_000  # functions remembered, the least recently learned forgotten first: bounded memory


def function_key(chunks: Iterable[bytes]) -> bytes:
    """The key of a function, from its serialized bytes (the chunks of its object)."""
    digest = hashlib.blake2b(digest_size=16)
    for chunk in chunks:
        digest.update(chunk)
    return digest.digest()


def with_memory(requirement: Resources, needed: float) -> Resources:
    """`requirement` with MEMORY at least `needed` (any MEMORY it had replaced)."""
    return tuple(sorted([*(pair for pair in requirement if pair[0] != MEMORY), (MEMORY, float(needed))]))


class MemoryPeaks:
    """Recent peaks of functions that went past a worker's limit, by function key; bounded."""

    def __init__(self, max_functions: int = MAX_FUNCTIONS) -> None:
        # by function key, the least recently learned first; empty (a plain dict test, per task) until a failure
        self.peaks: OrderedDict[bytes, Deque[int]] = OrderedDict()
        self._max_functions = max_functions

    def __len__(self) -> int:
        return len(self.peaks)

    def learn(self, key: bytes, peak: int) -> None:
        peaks = self.peaks.pop(key, None)
        if peaks is None:
            peaks = deque(maxlen=RECENT_PEAKS)
            if len(self.peaks) >= self._max_functions:
                self.peaks.popitem(last=False)
        peaks.append(peak)
        self.peaks[key] = peaks

    def expected(self, key: bytes) -> Optional[int]:
        """What the function is expected to need: the largest of its recent peaks; None if nothing was learned."""
        peaks = self.peaks.get(key)
        return max(peaks) if peaks else None
