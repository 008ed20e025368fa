"""Tasks a worker holds but is not running: those whose objects have all arrived run first in, first out, except that
tasks submitted from tasks go first, newest first.

Why newest first: a parent waits on its children on a parked processor (see core.py). Depth-first order finishes a
subtree before opening the next, so parked processors stay near the nesting depth; first in, first out would open
the whole tree breadth-first, parking one processor per node of its widest level."""

from __future__ import annotations

from collections import deque
from typing import Deque, Dict, Iterator, List, Optional

from scaler.worker.state import WorkerTask


class TaskQueue:
    """Removal is lazy: a canceled or balanced task's entry stays in its line, marked (`task.queued` False), and is
    skipped when it comes up, so that taking the next task is a deque operation, not a dict or OrderedDict one."""

    def __init__(self) -> None:
        self._ready: Deque[WorkerTask] = deque()  # runnable, in the order they became so
        self._nested: List[WorkerTask] = []  # runnable, with a parent task: a stack, its end the head of the line
        self._waiting: Dict[bytes, WorkerTask] = {}
        # object id -> ids of the waiting tasks that miss it, a dict used as an ordered set: tasks freed by the same
        # object become ready in the order they arrived
        self._waiters: Dict[bytes, Dict[bytes, None]] = {}
        self._runnable = 0  # live entries of _ready and _nested

    def __len__(self) -> int:
        return self._runnable + len(self._waiting)

    def __iter__(self) -> Iterator[WorkerTask]:
        """Every task queued, in the order they would run (waiting ones last)."""
        yield from (task for task in reversed(self._nested) if task.queued)
        yield from (task for task in self._ready if task.queued)
        yield from self._waiting.values()

    def _make_ready(self, task: WorkerTask) -> None:
        task.queued = True
        self._runnable += 1
        if task.task.parent_task_id:
            self._nested.append(task)
        else:
            self._ready.append(task)

    def add(self, task: WorkerTask) -> None:
        if not task.missing:
            self._make_ready(task)
            return
        self._waiting[task.task_id] = task
        for object_id in task.missing:
            self._waiters.setdefault(object_id, {})[task.task_id] = None

    def put_back(self, tasks: List[WorkerTask]) -> None:
        """Return tasks handed to a processor that never started them to the head of the line, in order."""
        for task in reversed(tasks):
            task.queued = True
            self._runnable += 1
            if task.task.parent_task_id:
                self._nested.append(task)  # its end is the head of the line
            else:
                self._ready.appendleft(task)

    def first_ready(self) -> Optional[WorkerTask]:
        nested = self._nested
        while nested:
            task = nested[-1]
            if task.queued:
                return task
            nested.pop()
        ready = self._ready
        while ready:
            task = ready[0]
            if task.queued:
                return task
            ready.popleft()
        return None

    def pop_ready(self) -> WorkerTask:
        """Take the task that first_ready() has just returned."""
        task = self._nested.pop() if self._nested else self._ready.popleft()
        task.queued = False
        self._runnable -= 1
        return task

    def object_arrived(self, object_id: bytes) -> List[WorkerTask]:
        """The tasks that now have every object they need, made ready."""
        ready = []
        for task_id in self._waiters.pop(object_id, ()):
            task = self._waiting[task_id]
            task.missing.discard(object_id)
            if not task.missing:
                del self._waiting[task_id]
                self._make_ready(task)
                ready.append(task)
        return ready

    def object_unavailable(self, object_id: bytes) -> List[WorkerTask]:
        """Remove and return the tasks that wait for an object the scheduler does not have."""
        tasks = [self._waiting[task_id] for task_id in self._waiters.get(object_id, ())]
        for task in tasks:
            self.remove(task)
        return tasks

    def remove(self, task: WorkerTask) -> bool:
        """Take a task out of the queue; False if it is not queued."""
        if task.queued:
            task.queued = False
            self._runnable -= 1
            return True
        if self._waiting.pop(task.task_id, None) is None:
            return False
        for object_id in task.missing:
            waiters = self._waiters[object_id]
            del waiters[task.task_id]
            if not waiters:
                del self._waiters[object_id]
        return True

    def take_newest(self, count: int) -> List[WorkerTask]:
        """Remove up to `count` tasks, those that would run last first: they would have waited longest here."""
        taken: List[WorkerTask] = []
        for task in list(reversed(self._waiting.values()))[:count]:
            self.remove(task)
            taken.append(task)
        ready = self._ready
        while ready and len(taken) < count:
            task = ready.pop()
            if task.queued:
                self.remove(task)
                taken.append(task)
        for task in self._nested:
            if len(taken) >= count:
                break
            if task.queued:
                self.remove(task)
                taken.append(task)
        return taken
