"""Internal: which objects the scheduler holds for one connection, and when an argument object may be deleted.

The ledger also keeps each held object's ObjectPut items (the messages already built, so a reference each, not a
copy), for as long as the scheduler should hold it: a scheduler that restarts has lost them, and the connection
sends them all again (`all_puts`). So a client holds its functions, its serializer, the objects sent with
send_object until clear(), and the large arguments of its unanswered tasks.

Not thread safe by itself: the connection calls it with its lock held, in the same critical section that queues the
ObjectPut or ObjectDelete, so that puts and deletes reach the scheduler in the order decided here.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Set, Tuple

from scaler.client.objects import Outgoing

# (object id, its ObjectPut items, or None when the caller holds only the id and expects the scheduler to have it)
ObjectNeed = Tuple[bytes, Optional[List[Outgoing]]]


class ObjectLedger:
    def __init__(self) -> None:
        self._sent: Dict[bytes, List[Outgoing]] = {}  # the scheduler holds these: their ObjectPut items
        self._pinned: Set[bytes] = set()  # sent with send_object: kept until clear() or disconnect
        self._uses: Dict[bytes, int] = {}  # argument objects: unanswered tasks that need each

    def puts_for(self, needs: Iterable[ObjectNeed]) -> Optional[List[Outgoing]]:
        """The ObjectPuts of the needs the scheduler lacks, now counted as sent; None, with nothing counted, if one
        the scheduler lacks came without its puts."""
        sent = self._sent
        missing = [(object_id, puts) for object_id, puts in needs if object_id not in sent]
        if any(puts is None for _, puts in missing):
            return None
        outgoing: List[Outgoing] = []
        for object_id, puts in missing:
            if object_id not in sent:  # the same object may be needed twice in one call
                sent[object_id] = puts or []
                outgoing.extend(puts or ())
        return outgoing

    def holds_all(self, object_ids: Iterable[bytes]) -> bool:
        """Whether the scheduler holds each of these (counted as sent)."""
        sent = self._sent
        for object_id in object_ids:
            if object_id not in sent:
                return False
        return True

    def all_puts(self) -> List[Outgoing]:
        """The ObjectPut items of every object the scheduler should hold, for a scheduler that lost them."""
        return [put for puts in self._sent.values() for put in puts]

    def held_count(self) -> int:
        return len(self._sent)

    def pin(self, object_id: bytes) -> None:
        self._pinned.add(object_id)

    def is_pinned(self, object_id: bytes) -> bool:
        return object_id in self._pinned

    def hold(self, object_ids: Iterable[bytes]) -> None:
        uses = self._uses
        for object_id in object_ids:
            uses[object_id] = uses.get(object_id, 0) + 1

    def release(self, object_ids: Iterable[bytes]) -> List[bytes]:
        """A task that needed these was answered: the ids no task needs any more, to delete at the scheduler."""
        uses = self._uses
        deleted = []
        for object_id in object_ids:
            count = uses.get(object_id)
            if count is None:
                continue  # cleared meanwhile
            if count > 1:
                uses[object_id] = count - 1
                continue
            del uses[object_id]
            if object_id not in self._pinned and object_id in self._sent:
                del self._sent[object_id]
                deleted.append(object_id)
        return deleted

    def uses(self) -> Dict[bytes, int]:
        """Argument object -> how many unanswered tasks hold it (a copy, for checks)."""
        return dict(self._uses)

    def clear(self) -> List[bytes]:
        """Forget everything; the ids to delete at the scheduler."""
        object_ids = list(self._sent)
        self._sent.clear()
        self._pinned.clear()
        self._uses.clear()
        return object_ids
