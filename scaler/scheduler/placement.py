"""Internal: where the next task goes: workers filed by load, so that placing a task and balancing never walk every
worker."""

from __future__ import annotations

import heapq
from typing import Dict, Iterator, List, Optional

from scaler.scheduler.resources import Resources
from scaler.scheduler.state import WorkerState

# Past this many tasks a frame, a frame's own cost (a ZeroMQ send and receive, their system calls) no longer counts.
REFILL_BATCH = 32


def refill_mark(capacity: int) -> int:
    """A worker that was full takes tasks again once this many of its slots are free: half of them, at most
    REFILL_BATCH (1 for a capacity of 1 or 2); below that it waits, and a worker that was not full takes tasks until
    it is.

    Topping a full worker up in batches rather than one task per freed slot keeps it as busy (it still holds the other
    tasks) and keeps frames full under load: with thousands of workers, one task per frame would make every task pay
    a ZeroMQ send, a receive and their system calls alone. A batch much larger would only make the flow lumpy (a
    worker with room for 30,000 tasks waiting for 15,000 results before it gets more). Workers that are not full are
    filled least loaded first, so a burst still spreads over every idle worker."""
    return min((capacity + 1) // 2, REFILL_BATCH)


class WorkerLoads:
    """Every connected worker, filed under its load: the tasks it holds minus those parked on nested tasks (which do
    not use it), at least 0. Each load level has two rooms: `open`, the workers that take tasks now, and `closed`,
    those that are full or, having been full, wait for `refill_mark` free slots.

    Least-loaded placement takes a worker from the lowest level with an open one: O(1), plus O(log levels) when a
    level's open room fills up again after emptying (`levels` is a heap of the levels whose open room may hold someone,
    cleaned lazily). Ties go to the worker filed last at that level, so a burst over idle workers still spreads one task
    per worker before any gets a second. Balancing walks the levels from the top down and stops as soon as it has
    found enough surplus, so it touches only the busiest workers. The counts the status reports (free slots, total
    load, capacity) are kept as workers move, not summed when asked. A retiring worker has no free slot: always closed.
    """

    __slots__ = (
        "open",
        "closed",
        "levels",
        "listed",
        "total_load",
        "free_slots",
        "capacity",
        "stale",
        "count",
        "retiring",
        "offer",
        "changed",
    )

    def __init__(self, offer: Resources = (), changed: Optional[List[WorkerState]] = None) -> None:
        self.offer = offer  # what each of its workers offers (see Placement)
        # workers whose load changed since the status last read them (Placement.changed, shared by every class)
        self.changed: List[WorkerState] = [] if changed is None else changed
        self.count = 0  # workers filed
        self.retiring = 0  # of those, workers retiring (they take no task): the class serves no one once all are
        self.open: List[Dict[WorkerState, None]] = []  # level -> workers that take tasks now, in filing order
        self.closed: List[Dict[WorkerState, None]] = []  # level -> the others
        self.levels: List[int] = []  # heap of levels whose open room may be non-empty
        self.listed: List[bool] = []  # level -> whether it is in `levels`
        self.total_load = 0  # sum of every worker's level
        self.free_slots = 0  # sum of every worker's free slots, open or not
        self.capacity = 0  # sum of every worker's capacity
        self.stale: List[WorkerState] = []  # workers whose load changed since they were filed: `settle` refiles them

    def add(self, worker: WorkerState) -> None:
        worker.refill_mark = refill_mark(worker.capacity)
        worker.loads = self
        self.count += 1
        self.capacity += worker.capacity
        self.file(worker)

    def remove(self, worker: WorkerState) -> None:
        worker.stale = False
        if worker.retire_deadline is not None:
            self.retiring -= 1
        if worker.level >= 0:
            self._unfile(worker)
        self.count -= 1
        self.capacity -= worker.capacity

    def touch(self, worker: WorkerState) -> None:
        """Its load changed: refiled at the next `settle`, once however many of its results a frame carried."""
        if not worker.stale:
            worker.stale = True
            self.stale.append(worker)

    def settle(self) -> None:
        """Refile the workers touched since; call before reading the index."""
        stale = self.stale
        if stale:
            for worker in stale:
                if worker.stale:  # not removed meanwhile
                    worker.stale = False
                    self.file(worker)
            stale.clear()

    def file(self, worker: WorkerState) -> None:
        """(Re)file a worker after the tasks it holds, or its parked count, changed."""
        if not worker.row_changed:  # its status row's free, sent and processed follow its load
            worker.row_changed = True
            self.changed.append(worker)
        held = len(worker.assigned) - worker.parked
        level = held if held > 0 else 0
        slots = worker.capacity - held  # more than its capacity while it holds fewer tasks than it parks
        if slots < 0 or worker.retire_deadline is not None or worker.memory_paused:
            # tasks assigned while parked ones lent their slots, and those went back to work; or a retiring worker, or
            # one paused for memory, which takes no task: filed closed, it is never placed on nor counted idle or free
            slots = 0
        old = worker.level
        if old >= 0:
            if old == level and worker.free_slots == slots:
                return
            self._unfile(worker)
        if level >= len(self.open):
            self._grow(level)
        worker.level = level
        worker.free_slots = slots
        self.total_load += level
        self.free_slots += slots
        # hysteresis: closed when full, open again at the refill mark, as it was in between
        if slots >= worker.refill_mark or (slots and worker.takes_tasks):
            worker.takes_tasks = True
            self.open[level][worker] = None
            if not self.listed[level]:
                self.listed[level] = True
                heapq.heappush(self.levels, level)
        else:
            worker.takes_tasks = False
            self.closed[level][worker] = None

    def take_least_loaded(self) -> Optional[WorkerState]:
        """Unfile and return an open worker of the lowest load, or None; the caller files it again."""
        levels = self.levels
        rooms = self.open
        while levels:
            level = levels[0]
            room = rooms[level]
            if room:
                worker = room.popitem()[0]
                worker.level = -1
                self.total_load -= level
                self.free_slots -= worker.free_slots
                return worker
            heapq.heappop(levels)
            self.listed[level] = False
        return None

    def lowest_open(self) -> Optional[int]:
        """The lowest load of an open worker (the one `take_least_loaded` would take), or None."""
        levels = self.levels
        rooms = self.open
        while levels:
            level = levels[0]
            if rooms[level]:
                return level
            heapq.heappop(levels)
            self.listed[level] = False
        return None

    def idle(self) -> int:
        """Workers with nothing to do (load 0; such a worker is always open)."""
        return len(self.open[0]) if self.open else 0

    def busiest(self, lowest: int) -> Iterator[WorkerState]:
        """Workers with a load of at least `lowest`, the busiest first; do not (re)file workers while iterating."""
        for level in range(len(self.open) - 1, lowest - 1, -1):
            yield from self.closed[level]
            yield from self.open[level]

    def validate(self, workers: Dict[bytes, WorkerState]) -> None:
        """Every worker filed once, at its load, in the right room; the counts are the sums they claim to be."""
        assert not self.stale, "workers left to refile"
        filed = 0
        for level in range(len(self.open)):
            for room, is_open in ((self.open[level], True), (self.closed[level], False)):
                for worker in room:
                    assert workers.get(worker.identity) is worker, f"{worker.name} filed but not connected"
                    held = len(worker.assigned) - worker.parked
                    assert worker.level == level == max(0, held), f"{worker.name} filed at {level}, load {held}"
                    closed = worker.retire_deadline is not None or worker.memory_paused
                    free = 0 if closed else max(0, worker.capacity - held)
                    assert worker.free_slots == free, f"{worker.name}: wrong free slots"
                    assert worker.takes_tasks == is_open, f"{worker.name} in the wrong room"
                    if worker.free_slots == 0 or worker.free_slots >= worker.refill_mark:
                        assert is_open == (worker.free_slots > 0), f"{worker.name} open or closed wrongly"
                    filed += 1
            if self.open[level]:
                assert self.listed[level] and level in self.levels, f"level {level} has open workers, not listed"
            assert self.listed[level] == (level in self.levels)
        mine = [worker for worker in workers.values() if worker.loads is self]
        assert filed == len(mine) == self.count, f"{filed} workers filed, {len(mine)} connected"
        assert self.retiring == sum(1 for worker in mine if worker.retire_deadline is not None), "retiring miscounted"
        assert self.total_load == sum(w.level for w in mine)
        assert self.free_slots == sum(w.free_slots for w in mine)
        assert self.capacity == sum(w.capacity for w in mine)

    def _unfile(self, worker: WorkerState) -> None:
        level = worker.level
        if worker.takes_tasks:
            del self.open[level][worker]
        else:
            del self.closed[level][worker]
        self.total_load -= level
        self.free_slots -= worker.free_slots
        worker.level = -1

    def _grow(self, level: int) -> None:
        while len(self.open) <= level:
            self.open.append({})
            self.closed.append({})
            self.listed.append(False)


class Placement:
    """Connected workers grouped by what they offer (`Hello.resources`): a "resource class" per distinct offer, each
    with its own WorkerLoads. Clusters have few distinct offers (one when nobody declares resources), so a task is
    placed on the least loaded open worker among the classes eligible for it (ReadyQueue.eligible) in O(classes +
    log levels), without ever comparing resources per task; a worker lands only where its class meets the task's
    requirement. The totals the status reports are sums over the classes."""

    __slots__ = ("classes", "changed", "membership")

    def __init__(self) -> None:
        self.classes: Dict[Resources, WorkerLoads] = {}
        # What the published status must write again (scaler.scheduler.status): the workers whose row may have
        # changed since it last did (their load, or what the core noted), and a count of workers come and gone.
        self.changed: List[WorkerState] = []
        self.membership = 0

    def note(self, worker: WorkerState) -> None:
        """Its status row changed otherwise than by its load (a heartbeat, a retirement)."""
        if not worker.row_changed:
            worker.row_changed = True
            self.changed.append(worker)

    def add(self, worker: WorkerState, offer: Resources) -> bool:
        """File a new worker in the class of its offer; True if that class is new (eligibility must be refreshed)."""
        loads = self.classes.get(offer)
        created = loads is None
        if loads is None:
            loads = self.classes[offer] = WorkerLoads(offer, self.changed)
        loads.add(worker)
        self.membership += 1
        return created

    def remove(self, worker: WorkerState) -> bool:
        """Unfile a leaving worker; True if its class is now empty and gone."""
        loads = worker.loads
        loads.remove(worker)
        self.membership += 1
        if loads.count:
            return False
        del self.classes[loads.offer]
        return True

    def settle(self) -> None:
        for loads in self.classes.values():
            if loads.stale:
                loads.settle()

    @property
    def free_slots(self) -> int:
        return sum(loads.free_slots for loads in self.classes.values())

    @property
    def capacity(self) -> int:
        return sum(loads.capacity for loads in self.classes.values())

    def idle(self) -> int:
        return sum(loads.idle() for loads in self.classes.values())

    def validate(self, workers: Dict[bytes, WorkerState]) -> None:
        for offer, loads in self.classes.items():
            assert loads.offer == offer and loads.count > 0, "a class is misfiled or empty"
            loads.validate(workers)
        assert sum(loads.count for loads in self.classes.values()) == len(workers), "a worker is in no class"
        assert all(self.classes.get(worker.loads.offer) is worker.loads for worker in workers.values())


def take_least_loaded(eligible: List[WorkerLoads]) -> Optional[WorkerState]:
    """Unfile and return an open worker of the lowest load among the eligible classes, or None."""
    if len(eligible) == 1:
        return eligible[0].take_least_loaded()
    best: Optional[WorkerLoads] = None
    best_level = 0
    for loads in eligible:
        level = loads.lowest_open()
        if level is not None and (best is None or level < best_level):
            best = loads
            best_level = level
    return best.take_least_loaded() if best is not None else None
