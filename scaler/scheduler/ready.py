"""Internal: the scheduler's ready tasks: one queue per distinct resource requirement, each a FIFO per priority level.

Tasks with no resources and priority 0 (every task, when nobody sets options) live in one deque of one queue: handing
one out costs a `popleft`, as a single deque would. Other priorities add a deque each and an entry in a small heap of
the levels present, never a heap push per task. A requirement that no connected worker meets keeps its queue until one
connects (`eligible` is then empty: its tasks wait for resources).
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING, Deque, Dict, Iterator, List, Optional

from scaler.scheduler.resources import Resources
from scaler.scheduler.state import TaskState

if TYPE_CHECKING:
    from scaler.scheduler.placement import WorkerLoads


def _ready_since(task: TaskState) -> float:
    return task.ready_since


class ReadyQueue:
    """The ready tasks of one resource requirement, handed out highest priority first, in the order they became ready
    within a priority. A task leaving the queue other than by `pop` (canceled, finished) only clears its `queued`
    flag: its entry is dropped when reached."""

    __slots__ = ("requirement", "buckets", "levels", "live", "members", "eligible", "reported")

    def __init__(self, requirement: Resources) -> None:
        self.requirement = requirement
        self.buckets: Dict[int, Deque[TaskState]] = {}  # priority -> tasks, oldest first (may be empty)
        self.levels: List[int] = []  # heap of the negated priorities in `buckets`
        self.live = 0  # tasks queued here (entries with `queued` set)
        # unfinished tasks with this requirement, queued or not: the queue lives while they do (not counted for the
        # queue of no requirement, which always lives)
        self.members = 0
        # the worker classes (scaler.scheduler.placement.WorkerLoads) whose offer meets the requirement; kept up to
        # date as classes come and go, so that placing a task never compares resources
        self.eligible: List[WorkerLoads] = []
        self.reported = False  # its waiting for resources was logged (reset once a worker can take its tasks)

    def bucket(self, priority: int) -> Deque[TaskState]:
        bucket = self.buckets.get(priority)
        if bucket is None:
            bucket = self.buckets[priority] = deque()
            heapq.heappush(self.levels, -priority)
        return bucket

    def push(self, task: TaskState) -> None:
        bucket = self.buckets.get(task.priority)
        if bucket is None:
            bucket = self.bucket(task.priority)
        bucket.append(task)
        task.queued = True
        self.live += 1

    def top(self) -> Optional[Deque[TaskState]]:
        """The bucket of the highest priority holding a queued task, dropping exhausted buckets above it."""
        levels = self.levels
        buckets = self.buckets
        while levels:
            bucket = buckets[-levels[0]]
            while bucket and not bucket[0].queued:
                bucket.popleft()
            if bucket:
                return bucket
            del buckets[-heapq.heappop(levels)]
        return None

    def discard(self, task: TaskState) -> None:
        """A queued task left (canceled, finished): its entry stays until reached."""
        task.queued = False
        self.live -= 1

    def hand_back(self, tasks: List[TaskState]) -> None:
        """Queue tasks a worker no longer holds, sorted by `ready_since`, where they belong by when each first became
        ready: ahead of every task of their priority that became ready after them, which is all the bucket holds
        unless earlier hand-backs still wait (workers leaving one after the other while none has room): those few are
        merged with them."""
        by_priority: Dict[int, List[TaskState]] = {}
        for task in tasks:
            group = by_priority.get(task.priority)
            if group is None:
                by_priority[task.priority] = [task]
            else:
                group.append(task)
        for priority, group in by_priority.items():
            bucket = self.bucket(priority)
            self.live += len(group)
            for task in group:
                task.queued = True
            newest = group[-1].ready_since
            older: List[TaskState] = []
            while bucket:
                task = bucket[0]
                if task.queued and task.ready_since >= newest:
                    break
                bucket.popleft()
                if task.queued:  # stale entries (tasks canceled or finished while queued) are dropped on the way
                    older.append(task)
            if older:
                group = sorted(older + group, key=_ready_since)
            bucket.extendleft(reversed(group))

    def oldest(self) -> Optional[TaskState]:
        """The queued task that became ready first (the first queued one of some bucket)."""
        best: Optional[TaskState] = None
        for bucket in self.buckets.values():
            while bucket and not bucket[0].queued:
                bucket.popleft()
            if bucket and (best is None or bucket[0].ready_since < best.ready_since):
                best = bucket[0]
        return best

    def in_order(self) -> Iterator[TaskState]:
        """Queued tasks in hand-out order (tests and validate; not for the hot path)."""
        for priority in sorted(self.buckets, reverse=True):
            yield from (task for task in self.buckets[priority] if task.queued)

    def validate(self) -> None:
        assert sorted(-level for level in self.levels) == sorted(self.buckets), "priority heap and buckets differ"
        count = 0
        for priority, bucket in self.buckets.items():
            queued = [task for task in bucket if task.queued]
            assert all(task.priority == priority and task.queue is self for task in queued), "task in a wrong bucket"
            assert all(a.ready_since <= b.ready_since for a, b in zip(queued, queued[1:])), "bucket not oldest first"
            count += len(queued)
        assert count == self.live, f"{self.live} tasks said queued, {count} found"
