"""Internal: what the scheduler core remembers about tasks, workers, clients and objects: flat `__slots__` records."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from scaler.protocol import WorkerStatus
from scaler.scheduler.cadence import PeerClock

# Task states, small ints so the hot path branches cheaply. A finished task is forgotten, not kept in a final state.
WAITING = 0  # has unfinished dependencies
READY = 1  # in the ready queue, waiting for a worker with free capacity
ASSIGNED = 2  # sent to a worker, which queues or runs it
CANCELING = 3  # assigned, and a TaskCancel was sent to its worker; the worker's TaskResult ends it

STATE_NAMES = ("waiting", "ready", "assigned", "canceling")


class TaskState:
    __slots__ = (
        "task_id",
        "client",
        "raw",
        "function_id",
        "state",
        "worker",
        "pending_dependencies",
        "dependents",
        "report_result",
        "parent_task_id",
        "retries",
        "dependency_ids",
        "ready_since",
        "priority",
        "queue",
        "queued",
        "max_retries",
        "failures",
        "actor",
    )

    def __init__(
        self,
        task_id: bytes,
        client: bytes,
        raw: bytes,
        function_id: bytes,
        report_result: bool,
        parent_task_id: bytes,
        dependency_ids: List[bytes],
        ready_since: float,
        queue: Any,  # a ReadyQueue: ready.py imports this module, not the other way round
        priority: int,
        max_retries: int,
    ) -> None:
        self.task_id = task_id
        self.client = client
        self.raw = raw  # the Task message exactly as the client sent it, forwarded to the worker unchanged
        self.function_id = function_id
        self.state = READY
        self.worker: Optional[bytes] = None
        self.pending_dependencies = 0
        self.dependents: Optional[List[bytes]] = None
        self.report_result = report_result
        self.parent_task_id = parent_task_id
        self.retries = 0
        self.dependency_ids = dependency_ids
        self.ready_since = ready_since  # when it first became ready: how long it waits for a worker, for the status
        self.priority = priority  # effective: its own, raised for a nested task to its parent's + 1
        self.queue: Any = queue  # the ReadyQueue of its resource requirement (scaler.scheduler.ready)
        self.queued = False  # it is in that queue's deques (a live entry)
        self.max_retries = max_retries  # Task.retries: runs again this often after failing or timing out
        self.failures = 0  # failed or timed-out attempts so far (worker deaths are counted in `retries`)
        self.actor: Any = None  # an actor's task (Task.actorId): its SchedulerActor (scheduler/actors.py)


class WorkerState:
    __slots__ = (
        "identity",
        "name",
        "capacity",
        "assigned",
        "last_seen",
        "clock",
        "balance_pending",
        "row",
        "malformed",
        "parked",
        "running",
        "level",
        "takes_tasks",
        "free_slots",
        "refill_mark",
        "stale",
        "retire_deadline",
        "loads",
        "row_changed",
        "row_slot",
        "data_address",
        "data_key",
        "held",
        "fetches_from_holders",
        "held_bytes",
        "takes_handoffs",
        "handing",
        "taking",
        "memory_paused",
        "memory_limit",
        "actor_slots",
        "actors",
    )

    def __init__(self, identity: bytes, name: str, capacity: int, now: float, previous_registrations: int = 0) -> None:
        self.identity = identity
        self.name = name
        self.capacity = capacity
        # insertion-ordered set of task ids sent to this worker and not finished
        self.assigned: Dict[bytes, None] = {}
        self.last_seen = now
        self.clock = PeerClock(0, 0.0)  # its heartbeat cadence and allowed silence: set at Hello (cadence.py)
        self.balance_pending = False
        # its row of the published status, kept up to date by its heartbeats and results rather than built per status
        # previous_registrations, from its Hello: >0 for a worker that survived a lost scheduler
        self.row = WorkerStatus(name=name, previous_registrations=previous_registrations)
        self.row_changed = False  # listed in Placement.changed: its row is to be encoded again (status.py)
        self.row_slot = -1  # its row's place among the encoded rows of the status; -1: not laid out yet
        self.malformed = 0
        self.parked = 0  # its tasks waiting on nested tasks (last heartbeat): they do not count against capacity
        self.running = 0  # tasks it said it runs (last heartbeat), parked ones included
        # where scaler.scheduler.placement.WorkerLoads filed it: load level (-1: not filed), whether it takes tasks
        # now (at least `refill_mark` free slots), its free slots
        self.level = -1
        self.takes_tasks = False
        self.free_slots = 0
        self.refill_mark = 1
        self.stale = False  # its load changed since it was filed
        # Set when it asked to retire (WorkerRetire): it gets no new task, and what it still runs then is run elsewhere
        self.retire_deadline: Optional[float] = None
        self.loads: Any = None  # the WorkerLoads of its resource class (scaler.scheduler.placement.Placement)
        self.data_address = ""  # Hello.dataAddress: where it serves the results it holds
        self.data_key = b""  # with CurveZMQ, DataKeys.publicKey: the key its data address serves under
        self.held: Dict[bytes, None] = {}  # ids of the results it holds (TaskResult.heldBytes), while stored here
        self.held_bytes = 0  # their sizes, summed: where a retiring worker's results go (the least loaded first)
        self.fetches_from_holders = False  # Hello.fetchesFromHolders: it is told where a held result is
        self.takes_handoffs = False  # Hello.takesHandoffs: it may be asked to take a retiring worker's held results
        # Retiring, what it holds and was asked to hand over: object id -> the worker asked to fetch and hold it
        self.handing: Dict[bytes, bytes] = {}
        self.taking = 0  # results it was asked to take from retiring workers and has not answered for yet
        # its heartbeat says it is above its memory pause threshold: like a retiring one, it has no free slot meanwhile
        self.memory_paused = False
        self.memory_limit = 0  # Hello.memoryLimit, bytes; 0: none
        self.actor_slots = 0  # Hello.actorSlots: how many actors it may host
        self.actors: Dict[bytes, None] = {}  # ids of the actors it hosts


class ClientState:
    __slots__ = (
        "identity",
        "name",
        "tasks",
        "objects",
        "last_seen",
        "clock",
        "malformed",
        "previous_registrations",
        "resumed",
        "fetches_from_holders",
        "data_address",
        "data_key",
        "actors",
    )

    def __init__(self, identity: bytes, name: str, now: float, previous_registrations: int = 0) -> None:
        self.identity = identity
        self.name = name
        self.tasks: Dict[bytes, None] = {}  # unfinished task ids, insertion ordered
        self.objects: Dict[bytes, None] = {}
        self.last_seen = now
        self.clock = PeerClock(0, 0.0)  # set at Hello (cadence.py)
        self.malformed = 0
        self.previous_registrations = previous_registrations  # Hello: >0 for a client that reconnected
        # It said Hello again on a connection the scheduler still knew: it resubmits what it may have lost, so a task
        # id it already has here is a copy to ignore, not a clash to refuse.
        self.resumed = False
        self.fetches_from_holders = False  # Hello.fetchesFromHolders: it is told where a held result is
        self.data_address = ""  # Hello.dataAddress: where it serves the large objects it keeps (ObjectPut.heldBySender)
        self.data_key = b""  # with CurveZMQ, DataKeys.publicKey: the key its data address serves under
        self.actors: Dict[bytes, None] = {}  # ids of the actors it created and has not freed


class StoredObject:
    """An object held for workers and clients: sent by a client, or a task result kept for graph consumers."""

    __slots__ = (
        "object_id",
        "owner",
        "kind",
        "name",
        "chunks",
        "chunk_count",
        "total_size",
        "consumers",
        "released",
        "holders",
        "holder",
        "waiting",
        "uploading",
        "later",
        "producer",
        "recipe",
        "memory_key",
    )

    def __init__(self, object_id: bytes, owner: bytes, kind: int, name: str, chunk_count: int, total_size: int) -> None:
        self.object_id = object_id
        self.owner = owner
        self.kind = kind
        self.name = name
        self.chunks: List[bytes] = []
        self.chunk_count = chunk_count
        self.total_size = total_size
        self.consumers = 0  # unfinished graph tasks that still need this result
        self.released = True  # False while the owning client still has to fetch it (a reported in-object result)
        # Workers it was sent to: told to drop their copies when it is freed. Tuples, like the two below: shared empty
        # ones cost nothing for the many objects (graph results) that never need them.
        self.holders: Tuple[bytes, ...] = ()
        # A result held by a worker (TaskResult.heldBytes), or an object kept by its client (ObjectPut.heldBySender):
        # no chunks here. `holder` is that worker or client (None while a result is made again, its holder gone);
        # `waiting` the peers to answer once it is there again, or its upload relayed (True: they want the bytes,
        # False: where it is).
        self.holder: Optional[bytes] = None
        self.waiting: Tuple[Tuple[bytes, bool], ...] = ()
        self.uploading = -1  # chunks relayed so far of the upload under way; -1: none under way
        self.later: Tuple[bytes, ...] = ()  # asked while an upload was half relayed: they get the next one
        self.producer: Any = None  # the TaskState that made a held result: run again if its holder is lost
        # The TaskState that made a small result kept here (it cannot be lost): kept as lineage once the result is
        # freed, if a recipe kept names it; its inputs are counted in the lineage references only from then on
        self.recipe: Any = None
        self.memory_key: Optional[bytes] = None  # a function's key for learning its memory (scheduler/memory.py)

    @property
    def complete(self) -> bool:
        return len(self.chunks) == self.chunk_count
