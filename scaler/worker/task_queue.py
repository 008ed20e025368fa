"""Tasks a worker holds but is not running: those whose objects have all arrived run first in, first out, except that
tasks submitted from tasks go first, newest first.

Why newest first: a parent waits on its children on a parked processor (see core.py). Depth-first order finishes a
subtree before opening the next, so parked processors stay near the nesting depth; first in, first out would open
the whole tree breadth-first, parking one processor per node of its widest level."""

from __future__ import annotations

from collections import OrderedDict
from typing import Dict, Iterator, List, Optional

from scaler.worker.state import WorkerTask


class TaskQueue:
    def __init__(self) -> None:
        # The order tasks became runnable. An OrderedDict, not a dict: taking from the front of a plain dict leaves
        # dead slots that every later next(iter()) skips, which made a long queue quadratic.
        self._ready: OrderedDict[bytes, WorkerTask] = OrderedDict()
        self._nested: OrderedDict[bytes, WorkerTask] = OrderedDict()  # ready, with a parent task: taken from the end
        self._waiting: Dict[bytes, WorkerTask] = {}
        # object id -> ids of the waiting tasks that miss it, a dict used as an ordered set: tasks freed by the same
        # object become ready in the order they arrived
        self._waiters: Dict[bytes, Dict[bytes, None]] = {}

    def __len__(self) -> int:
        return len(self._ready) + len(self._nested) + len(self._waiting)

    def __contains__(self, task_id: bytes) -> bool:
        return task_id in self._ready or task_id in self._nested or task_id in self._waiting

    def __iter__(self) -> Iterator[WorkerTask]:
        yield from reversed(self._nested.values())
        yield from self._ready.values()
        yield from self._waiting.values()

    def _make_ready(self, queued: WorkerTask) -> None:
        if queued.task.parent_task_id:
            self._nested[queued.task_id] = queued
        else:
            self._ready[queued.task_id] = queued

    def add(self, queued: WorkerTask) -> None:
        if not queued.missing:
            self._make_ready(queued)
            return
        self._waiting[queued.task_id] = queued
        for object_id in queued.missing:
            self._waiters.setdefault(object_id, {})[queued.task_id] = None

    def put_back(self, tasks: List[WorkerTask]) -> None:
        """Return tasks handed to a processor that never started them to the head of the line, in order."""
        for queued in reversed(tasks):
            if queued.task.parent_task_id:
                self._nested[queued.task_id] = queued  # its end is the head of the line
            else:
                self._ready[queued.task_id] = queued
                self._ready.move_to_end(queued.task_id, last=False)

    def first_ready(self) -> Optional[WorkerTask]:
        if self._nested:
            return next(reversed(self._nested.values()))
        return next(iter(self._ready.values()), None)

    def pop_ready(self) -> WorkerTask:
        if self._nested:
            return self._nested.popitem(last=True)[1]
        return self._ready.popitem(last=False)[1]

    def object_arrived(self, object_id: bytes) -> List[WorkerTask]:
        """The tasks that now have every object they need, made ready."""
        ready = []
        for task_id in self._waiters.pop(object_id, ()):
            queued = self._waiting[task_id]
            queued.missing.discard(object_id)
            if not queued.missing:
                del self._waiting[task_id]
                self._make_ready(queued)
                ready.append(queued)
        return ready

    def object_unavailable(self, object_id: bytes) -> List[WorkerTask]:
        """Remove and return the tasks that wait for an object the scheduler does not have."""
        return [queued for task_id in list(self._waiters.get(object_id, ())) if (queued := self.remove(task_id))]

    def remove(self, task_id: bytes) -> Optional[WorkerTask]:
        queued = self._ready.pop(task_id, None) or self._nested.pop(task_id, None)
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

    def take_newest(self, count: int) -> List[WorkerTask]:
        """Remove up to `count` tasks, the last to arrive first: they would have waited longest here."""
        newest = [*reversed(self._waiting), *reversed(self._ready), *self._nested][:count]
        return [queued for task_id in newest if (queued := self.remove(task_id))]
