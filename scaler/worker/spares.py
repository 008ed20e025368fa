"""Internal: a task process's spare shared memory files: those of freed results it wrote, handed back by its agent, to
write its next large results into.

Writing a result into a new memfd costs the kernel a page allocation, a zeroing and a page-cache insertion per 4 KiB
page, and freeing it as much again: about 4 ms per 8 MiB here, where writing over the pages of a file that has them
costs 0.8 ms. So the agent, as it frees a result that no process but its writer was handed and that it never mapped
or served (SharedBytes.lent), gives the file back to its writer (the pages stay charged where they were), which
keeps a few and writes its next results over them, until it is idle (processor.py closes them then).

A file is written again only once nothing in this process maps it: its reader's mappings are private, copy on write,
and a page this process did not write shows the file's current bytes, so an array a task kept from an earlier input
would change under it. Every mapping of a shared input made here is noted, weakly, under its object id; a spare waits
until the last of those mappings is gone (a mapping kept for the next reader goes as the agent says the object is
forgotten; one a task kept, with what it kept).
"""

from __future__ import annotations

import weakref
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from scaler.io.shared_bytes import SharedBytes

# At most this many spare files, and bytes, kept ready: the rest are closed (their memory goes back)
SPARE_COUNT = 16
SPARE_BYTES = 128 * 1024 * 1024
# Spares waiting for readers to let go, at most: the oldest are closed beyond it
_WAITING_COUNT = 64
# Object ids noted before the notes of those whose mappings are all gone are dropped (then twice as many as remain)
_PRUNE_ABOVE = 1024


class SpareFiles:
    def __init__(self, say_bytes: Optional[Callable[[int], None]] = None) -> None:
        """`say_bytes`: told the bytes of the spares ready whenever they change (the agent counts them as this
        process's memory: no mapping shows them in its RSS)."""
        # object id -> the mappings of it made here, by identity (one kept for the next task is noted again by each)
        self._mappings: Dict[bytes, Dict[int, weakref.ref]] = {}
        self._prune_above = _PRUNE_ABOVE
        self._waiting: List[Tuple[bytes, SharedBytes]] = []
        self._ready: List[SharedBytes] = []
        self._ready_bytes = 0
        self._say_bytes = say_bytes

    def mapped(self, object_id: bytes, view: memoryview) -> None:
        """A mapping of the shared input `object_id` was made: view.obj, the mapping (SharedBytes.private_view), which
        lives as long as anything made from it, and is unmapped as it goes."""
        if not view.nbytes:  # an empty payload's: no mapping
            return
        mappings = self._mappings.get(object_id)
        if mappings is None:
            mappings = self._mappings[object_id] = {}
            if len(self._mappings) > self._prune_above:  # objects long forgotten whose mappings are gone
                self._mappings = {key: refs for key, refs in self._mappings.items() if _live(refs) or key == object_id}
                self._prune_above = max(_PRUNE_ABOVE, 2 * len(self._mappings))
        elif len(mappings) >= _PRUNE_ABOVE:  # one object mapped anew by task after task: the notes of those gone go
            _live(mappings)
        mapping = view.obj
        mappings[id(mapping)] = weakref.ref(mapping)  # a mapping gone may have left its id to this one: replaced

    def forgotten(self, object_ids: Iterable[bytes]) -> None:
        """The agent evicted these objects, and what this process kept of them (mappings among it) is dropped."""
        mappings = self._mappings
        for object_id in object_ids:
            refs = mappings.get(object_id)
            if refs is not None and not _live(refs):
                del mappings[object_id]
        if self._waiting:
            self.settle()

    def offer(self, spares: Sequence[Tuple[bytes, SharedBytes]]) -> None:
        """Files of freed results, by the result's object id. Their descriptors are this object's from now on (the
        order that brought them may outlive them: they close as they are dropped here)."""
        self._waiting.extend((object_id, SharedBytes(spare.take_fd(), spare.size)) for object_id, spare in spares)
        del self._waiting[:-_WAITING_COUNT]
        self.settle()

    def settle(self) -> None:
        """Make ready the waiting spares nothing here maps any more."""
        mappings = self._mappings
        waiting = []
        for object_id, shared in self._waiting:
            refs = mappings.get(object_id)
            if refs and _live(refs):  # a live mapping of it
                waiting.append((object_id, shared))
            elif len(self._ready) < SPARE_COUNT and self._ready_bytes + shared.size <= SPARE_BYTES:
                self._ready.append(shared)
                self._ready_bytes += shared.size
            # else: dropped, which closes it
        self._waiting = waiting
        self._said()

    def take(self) -> Optional[SharedBytes]:
        """A spare to write a result into (the most recently freed: its pages are the likeliest in the caches), or
        None."""
        if not self._ready and self._waiting:
            self.settle()
        if not self._ready:
            return None
        shared = self._ready.pop()
        self._ready_bytes -= shared.size
        self._said()
        return shared

    def release(self) -> None:
        """Close every spare (the process is idle: their memory goes back)."""
        self._ready.clear()
        self._waiting.clear()
        self._ready_bytes = 0
        self._said()

    def ready_bytes(self) -> int:
        return self._ready_bytes

    def _said(self) -> None:
        if self._say_bytes is not None:
            self._say_bytes(self._ready_bytes)


def _live(refs: Dict[int, weakref.ref]) -> bool:
    """Whether any of these mappings lives; the notes of those gone are dropped."""
    for key in [key for key, ref in refs.items() if ref() is None]:
        del refs[key]
    return bool(refs)
