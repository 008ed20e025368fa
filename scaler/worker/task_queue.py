"""Internal: tasks a worker holds but is not running: highest Task.priority first; within a priority, those whose
objects have all arrived run first in, first out, except that tasks submitted from tasks go first, newest first.

Why newest first: a parent waits on its children on a parked processor (see core.py). Depth-first order finishes a
subtree before opening the next, so parked processors stay near the nesting depth; first in, first out would open
the whole tree breadth-first, parking one processor per node of its widest level. (The scheduler also gives a nested
task at least its parent's priority plus one, so children go before new parents.)

Priorities cost nothing while every task has priority 0: those live in one line, an attribute of the queue; a line per
other priority is made when a task of that priority arrives, with a small heap of the priorities that have a line
(one push per line, not per task), dropped once it is found empty.
"""

from __future__ import annotations

import heapq
from collections import deque
from itertools import islice
from typing import Deque, Dict, Iterator, List, Optional

from scaler.worker.state import WorkerTask


class _Line:
    """The runnable tasks of one priority: plain ones first in, first out, nested ones a stack on top of them."""

    __slots__ = ("ready", "nested")

    def __init__(self) -> None:
        self.ready: Deque[WorkerTask] = deque()  # in the order they became runnable
        self.nested: List[WorkerTask] = []  # with a parent task: a stack, its end the head of the line

    def add(self, task: WorkerTask) -> None:
        if task.task.parent_task_id:
            self.nested.append(task)
        else:
            self.ready.append(task)

    def add_at_head(self, task: WorkerTask) -> None:
        if task.task.parent_task_id:
            self.nested.append(task)  # its end is the head of the line
        else:
            self.ready.appendleft(task)

    def first(self) -> Optional[WorkerTask]:
        """Its head, dropping the entries of tasks taken out meanwhile; None if it holds no live entry."""
        nested = self.nested
        while nested:
            task = nested[-1]
            if task.queued:
                return task
            nested.pop()
        ready = self.ready
        while ready:
            task = ready[0]
            if task.queued:
                return task
            ready.popleft()
        return None

    def pop(self) -> WorkerTask:
        """Take the task first() has just returned."""
        return self.nested.pop() if self.nested else self.ready.popleft()

    def __iter__(self) -> Iterator[WorkerTask]:
        """Its live entries, in the order they would run."""
        yield from (task for task in reversed(self.nested) if task.queued)
        yield from (task for task in self.ready if task.queued)

    def newest(self) -> Iterator[WorkerTask]:
        """Its live entries, those that would run last first."""
        yield from (task for task in reversed(self.ready) if task.queued)
        yield from (task for task in self.nested if task.queued)


class TaskQueue:
    """Removal is lazy: a canceled or balanced task's entry stays in its line, marked (`task.queued` False), and is
    skipped when it comes up, so that taking the next task is a deque operation, not a dict or OrderedDict one."""

    def __init__(self) -> None:
        self._zero = _Line()  # priority 0: every task, unless the client set priorities
        self._lines: Dict[int, _Line] = {}  # the lines of other priorities
        self._levels: List[int] = []  # a heap of the negated priorities of _lines, each once
        self._head: _Line = self._zero  # the line of the task first_ready() returned last
        self._waiting: Dict[bytes, WorkerTask] = {}
        # object id -> ids of the waiting tasks that miss it, a dict used as an ordered set: tasks freed by the same
        # object become ready in the order they arrived
        self._waiters: Dict[bytes, Dict[bytes, None]] = {}
        self._runnable = 0  # live entries of the lines

    def __len__(self) -> int:
        return self._runnable + len(self._waiting)

    def __iter__(self) -> Iterator[WorkerTask]:
        """Every task queued, in the order they would run (waiting ones last)."""
        for line in self._lines_in_order():
            yield from line
        yield from self._waiting.values()

    def _lines_in_order(self) -> List[_Line]:
        """Every line, highest priority first."""
        levels = sorted({*self._lines, 0}, reverse=True)
        return [self._lines[level] if level else self._zero for level in levels]

    def _line(self, task: WorkerTask) -> _Line:
        priority = task.task.priority
        if not priority:
            return self._zero
        line = self._lines.get(priority)
        if line is None:
            line = self._lines[priority] = _Line()
            heapq.heappush(self._levels, -priority)
        return line

    def _make_ready(self, task: WorkerTask) -> None:
        task.queued = True
        self._runnable += 1
        self._line(task).add(task)

    def add(self, task: WorkerTask) -> None:
        if not task.missing:
            message = task.task
            if not message.priority and not message.parent_task_id:
                # The common case, spelled out (one per task): a plain task of priority 0, to the end of its line.
                task.queued = True
                self._runnable += 1
                self._zero.ready.append(task)
                return
            self._make_ready(task)
            return
        self._waiting[task.task_id] = task
        for object_id in task.missing:
            self._waiters.setdefault(object_id, {})[task.task_id] = None

    def put_back(self, tasks: List[WorkerTask]) -> None:
        """Return tasks handed to a processor that never started them to the head of their lines, in order."""
        for task in reversed(tasks):
            task.queued = True
            self._runnable += 1
            self._line(task).add_at_head(task)

    def first_ready(self) -> Optional[WorkerTask]:
        levels = self._levels
        if not levels:  # every task has priority 0
            task = self._zero.first()
            self._head = self._zero
            return task
        return self._first_by_priority()

    def _first_by_priority(self) -> Optional[WorkerTask]:
        levels = self._levels
        zero_done = False
        while levels:
            priority = -levels[0]
            if priority < 0 and not zero_done:
                zero_done = True
                task = self._zero.first()
                if task is not None:
                    self._head = self._zero
                    return task
            line = self._lines[priority]
            task = line.first()
            if task is not None:
                self._head = line
                return task
            heapq.heappop(levels)  # found empty: gone until a task of that priority comes again
            del self._lines[priority]
        self._head = self._zero
        return None if zero_done else self._zero.first()

    def pop_ready(self) -> WorkerTask:
        """Take the task that first_ready() has just returned."""
        task = self._head.pop()
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
        for line in reversed(self._lines_in_order()):
            for task in list(islice(line.newest(), count - len(taken))):
                self.remove(task)
                taken.append(task)
        return taken
