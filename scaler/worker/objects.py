"""Internal: the worker's cache of functions, serializers and objects fetched from the scheduler, each fetched once.

No clock here: every call that records a use is told the time (see core.py)."""

from __future__ import annotations

import sys
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from scaler.io.shared_bytes import SharedBytes

# Past its quota of descriptors (ObjectCache.shared_quota), the cache keeps new payloads of at most this many bytes as
# bytes (a copy this small costs microseconds), not as shared memory files: what bounds how many results a worker
# holds is then its memory, not its open-files limit. Larger ones are few enough for the memory they take.
COMPACT_BYTES = 1024 * 1024

_NOTHING_MISSING: Set[bytes] = frozenset()  # type: ignore[assignment]  # shared by every task that misses nothing
_NOTHING_DROPPED: List[bytes] = []  # shared by every unpin that drops nothing: never added to


class _PartialObject:
    __slots__ = ("chunk_count", "chunks")

    def __init__(self, chunk_count: int) -> None:
        self.chunk_count = chunk_count
        self.chunks: Dict[int, bytes] = {}


class ObjectCache:
    """Payloads by object id. An object is pinned while a queued or running task needs it; an unpinned object unused
    for the retention time is evicted by `evict_unused`, so a long-lived worker does not keep every object forever."""

    def __init__(self, retention_seconds: float) -> None:
        self._retention_seconds = retention_seconds
        self._payloads: Dict[bytes, bytes] = {}
        self._last_used: Dict[bytes, float] = {}
        self._pins: Dict[bytes, int] = {}
        self._partial: Dict[bytes, _PartialObject] = {}
        self._doomed: Set[bytes] = set()  # deleted by the scheduler while a task here needed them: dropped after it
        self._held: Set[bytes] = set()  # results of tasks run here, kept for the cluster until the scheduler frees them
        self.shared_count = 0  # payloads that are SharedBytes: the descriptors the cache keeps open
        # how many it may keep before it keeps small payloads as bytes: the agent sets a share of its open-files limit
        # (its task processes' inputs, fetches in flight, sockets and libraries need descriptors too)
        self.shared_quota = sys.maxsize

    def check(self) -> None:
        """Its invariants (core.validate)."""
        assert self.shared_count == sum(type(payload) is SharedBytes for payload in self._payloads.values())
        assert self._held <= self._payloads.keys()

    def __contains__(self, object_id: bytes) -> bool:
        return object_id in self._payloads

    def __len__(self) -> int:
        return len(self._payloads)

    def get(self, object_id: bytes) -> bytes:
        # No use is recorded here: whoever reads an object has it pinned, and unpinning records the use.
        return self._payloads[object_id]

    def add_chunk(self, object_id: bytes, payload: bytes, chunk_index: int, chunk_count: int, now: float) -> bool:
        """Store one chunk; True once the object is complete."""
        if chunk_count <= 1:
            self._store(object_id, payload, now)
            return True
        if not 0 <= chunk_index < chunk_count:
            raise ValueError(f"chunk {chunk_index} of {chunk_count} for object {object_id.hex()}")
        partial = self._partial.get(object_id)
        if partial is None or partial.chunk_count != chunk_count:
            partial = self._partial[object_id] = _PartialObject(chunk_count)
        partial.chunks[chunk_index] = payload
        if len(partial.chunks) < chunk_count:
            return False
        del self._partial[object_id]
        self._store(object_id, b"".join(partial.chunks[index] for index in range(chunk_count)), now)
        return True

    def hold(self, object_id: bytes, payload: bytes, now: float) -> None:
        """A result of a task that ran here, held for whoever needs it until the scheduler deletes it (never evicted:
        nobody else has it). It replaces a copy of the same id the scheduler deleted that a task still pins: made
        again, the result is needed again, and the pin going does not drop it."""
        self._store(object_id, payload, now)
        self._held.add(object_id)
        self._doomed.discard(object_id)

    def held_payload(self, object_id: bytes) -> Optional[bytes]:
        """The bytes of a result held here, or None: only held results are served to other peers."""
        return self._payloads.get(object_id) if object_id in self._held else None

    def held_ids(self) -> List[bytes]:
        return list(self._held)

    def held_sizes(self) -> List[Tuple[bytes, int]]:
        """(object id, size) of every result held here."""
        return [(object_id, len(self._payloads[object_id])) for object_id in self._held]

    def held_bytes(self) -> int:
        return sum(len(self._payloads[object_id]) for object_id in self._held)

    def held_least_recently_used(self) -> List[bytes]:
        """The held results, the one used longest ago first (a worker spills them in this order)."""
        last_used = self._last_used
        return sorted(self._held, key=lambda object_id: last_used[object_id])

    def used(self, object_id: bytes, now: float) -> None:
        """A held result was read (served, or handed to a task): it is now the most recently used."""
        if object_id in self._last_used:
            self._last_used[object_id] = now

    def drop_held(self) -> List[bytes]:
        """Forget every held result (the scheduler that knew of them is gone); returns those dropped."""
        held, self._held = self._held, set()
        self._doomed -= held
        return self.delete(held)

    def discard_partial(self, object_id: bytes) -> None:
        self._partial.pop(object_id, None)

    def pins(self) -> Dict[bytes, int]:
        """Object id -> how many tasks held here need it."""
        return dict(self._pins)

    def pin(self, object_ids: Iterable[bytes]) -> Set[bytes]:
        """Pin each object for one more task; returns those not complete here yet (to fetch). One pass over the ids,
        and no new set when nothing is missing: this runs once per task."""
        pins = self._pins
        payloads = self._payloads
        missing = _NOTHING_MISSING  # never added to: replaced by a set of its own first
        for object_id in object_ids:
            pins[object_id] = pins.get(object_id, 0) + 1
            if object_id not in payloads:
                if not missing:
                    missing = set()
                missing.add(object_id)
        return missing

    def unpin(self, object_ids: Iterable[bytes], now: float) -> List[bytes]:
        """One task less needs each object; returns those deleted now (the scheduler had deleted them meanwhile)."""
        pins = self._pins
        dropped = _NOTHING_DROPPED  # never added to: replaced by a list of its own first
        for object_id in object_ids:
            count = pins[object_id] - 1
            if count:
                pins[object_id] = count
            else:
                del pins[object_id]
                if object_id in self._doomed:
                    self._doomed.discard(object_id)
                    dropped = dropped + self.delete([object_id])
                    continue
            if object_id in self._last_used:
                self._last_used[object_id] = now
        return dropped

    def evict_unused(self, now: float) -> List[bytes]:
        """Drop unpinned objects unused for the retention time; returns their ids."""
        oldest_kept = now - self._retention_seconds
        evicted = [
            object_id
            for object_id, last_used in self._last_used.items()
            if last_used < oldest_kept and object_id not in self._pins and object_id not in self._held
        ]
        return self.delete(evicted)

    def delete_for_scheduler(self, object_ids: Iterable[bytes]) -> List[bytes]:
        """The scheduler freed these objects: drop them now, or once no task here needs them; returns those dropped
        now."""
        pins = self._pins
        for object_id in object_ids:
            if object_id in pins and object_id in self._payloads:
                self._doomed.add(object_id)
        return self.delete(object_ids)

    def delete(self, object_ids: Iterable[bytes]) -> List[bytes]:
        """Drop the given objects unless a task still needs them; returns the ids dropped."""
        deleted = []
        for object_id in object_ids:
            if object_id in self._payloads and object_id not in self._pins:
                if type(self._payloads.pop(object_id)) is SharedBytes:
                    self.shared_count -= 1
                del self._last_used[object_id]
                self._held.discard(object_id)
                deleted.append(object_id)
        return deleted

    def _store(self, object_id: bytes, payload: Any, now: float) -> None:
        if type(self._payloads.get(object_id)) is SharedBytes:
            self.shared_count -= 1
        if type(payload) is SharedBytes:
            if self.shared_count >= self.shared_quota and len(payload) <= COMPACT_BYTES:
                payload = payload.to_bytes()  # its descriptor closes as the last reference to it goes
            else:
                self.shared_count += 1
        self._payloads[object_id] = payload
        self._last_used[object_id] = now
