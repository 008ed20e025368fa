"""Tasks a worker holds but is not running: FIFO among those whose objects have all arrived."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple


class QueuedTask:
    __slots__ = ("task_id", "task", "needs", "missing", "expected_seconds")

    def __init__(self, task_id: bytes, task: Any, needs: Tuple[bytes, ...], missing: Set[bytes]) -> None:
        self.task_id = task_id
        self.task = task
        self.needs = needs  # every object id the task uses (function, serializer, arguments), pinned in the cache
        self.missing = missing  # those not fetched yet
        self.expected_seconds = 0.0  # its run time as guessed when it was handed to a processor


class TaskQueue:
    def __init__(self) -> None:
        # The order tasks became runnable. An OrderedDict, not a dict: taking from the front of a plain dict leaves
        # dead slots that every later next(iter()) skips, which made a long queue quadratic.
        self._ready: OrderedDict[bytes, QueuedTask] = OrderedDict()
        self._waiting: Dict[bytes, QueuedTask] = {}
        # object id -> ids of the waiting tasks that miss it, a dict used as an ordered set: tasks freed by the same
        # object become ready in the order they arrived
        self._waiters: Dict[bytes, Dict[bytes, None]] = {}

    def __len__(self) -> int:
        return len(self._ready) + len(self._waiting)

    def __contains__(self, task_id: bytes) -> bool:
        return task_id in self._ready or task_id in self._waiting

    def __iter__(self) -> Iterator[QueuedTask]:
        yield from self._ready.values()
        yield from self._waiting.values()

    def add(self, queued: QueuedTask) -> None:
        if not queued.missing:
            self._ready[queued.task_id] = queued
            return
        self._waiting[queued.task_id] = queued
        for object_id in queued.missing:
            self._waiters.setdefault(object_id, {})[queued.task_id] = None

    def put_back(self, tasks: List[QueuedTask]) -> None:
        """Return tasks handed to a processor that never started them to the head of the line, in order."""
        for queued in reversed(tasks):
            self._ready[queued.task_id] = queued
            self._ready.move_to_end(queued.task_id, last=False)

    def first_ready(self) -> Optional[QueuedTask]:
        return next(iter(self._ready.values()), None)

    def pop_ready(self) -> QueuedTask:
        return self._ready.popitem(last=False)[1]

    def object_arrived(self, object_id: bytes) -> None:
        for task_id in self._waiters.pop(object_id, ()):
            queued = self._waiting[task_id]
            queued.missing.discard(object_id)
            if not queued.missing:
                del self._waiting[task_id]
                self._ready[task_id] = queued

    def object_unavailable(self, object_id: bytes) -> List[QueuedTask]:
        """Remove and return the tasks that wait for an object the scheduler does not have."""
        return [queued for task_id in list(self._waiters.get(object_id, ())) if (queued := self.remove(task_id))]

    def remove(self, task_id: bytes) -> Optional[QueuedTask]:
        queued = self._ready.pop(task_id, None)
        if queued is not None:
            return queued
        queued = self._waiting.pop(task_id, None)
        if queued is not None:
            for object_id in queued.missing:
                waiters = self._waiters[object_id]
                del waiters[task_id]
                if not waiters:
                    del self._waiters[object_id]
        return queued

    def take_newest(self, count: int) -> List[QueuedTask]:
        """Remove up to `count` tasks, the last to arrive first: they would have waited longest here."""
        newest = [*reversed(self._waiting), *reversed(self._ready)][:count]
        return [queued for task_id in newest if (queued := self.remove(task_id))]
