"""Internal: the scheduler's sans-IO core: decoded messages and the time in, encoded messages per peer out.

No sockets, clocks or event loops here: `receive`, `receive_malformed` and `tick` change state and queue messages, and
`take_outgoing` hands the queued bytes to whoever does the IO. Every message type is handled in exactly one method,
reached through a per-role table indexed by the message's small-int `WHICH`. Tasks and results are forwarded as the
bytes their sender encoded, so routing a task costs no re-encoding; only a graph node is encoded again, once, when the
small results it reads are copied into it (_inline_results).
"""

from __future__ import annotations

import heapq
import logging
import pickle
from collections import deque
from typing import Deque, Dict, Iterable, List, NamedTuple, Optional, Set, Tuple, Union

from scaler import config
from scaler.config import DEFAULT_PEER_EVENTS_PER_INTERVAL
from scaler.errors import MemoryLimitError, memory_stopped_by, where_failed
from scaler.io.curve_keys import raw_key
from scaler.protocol import (
    MESSAGE_TYPES,
    PROTOCOL_VERSION,
    ActorRelease,
    Argument,
    ArgumentKind,
    BalanceRequest,
    BalanceResponse,
    ClientDisconnect,
    ClientHeartbeat,
    DataKeys,
    DisconnectReply,
    Goodbye,
    HeartbeatEcho,
    Hello,
    HelloReply,
    ObjectDelete,
    ObjectKind,
    ObjectPut,
    ObjectRequest,
    ObjectResponse,
    Resource,
    Role,
    SchedulerStatus,
    Task,
    TaskCancel,
    TaskOutput,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerHeartbeat,
    WorkerRetire,
    decode_frame,
    encode,
    heartbeat_flags,
)
from scaler.protocol.dispatch import handler_table
from scaler.rate_limit import LimitedLog, RateLimiter
from scaler.scheduler.actors import Actors
from scaler.scheduler.cadence import Cadence
from scaler.scheduler.held import INT32_MAX, HeldResults
from scaler.scheduler.memory import MemoryPeaks, function_key, with_memory
from scaler.scheduler.placement import Placement, WorkerLoads, take_least_loaded
from scaler.scheduler.ready import ReadyQueue
from scaler.scheduler.resources import MEMORY, Resources, describe, normalize_resources, satisfies
from scaler.scheduler.settings import SchedulerSettings
from scaler.scheduler.state import (
    ASSIGNED,
    CANCELING,
    READY,
    WAITING,
    ClientState,
    StoredObject,
    TaskState,
    WorkerState,
)
from scaler.scheduler.status import StatusRows, refreshed_row

logger = logging.getLogger(__name__)

_SUCCESS = int(TaskStatus.success)
_CANCELED = int(TaskStatus.canceled)
_FAILED = int(TaskStatus.failed)
_TIMED_OUT = int(TaskStatus.timed_out)
# Distinct resource requirements of unfinished tasks at once: each has a queue that placement and ticks walk, so a
# client inventing a new one per task must not slow every frame; real workloads have a handful.
MAX_REQUIREMENTS = 1024
# Distinct worker offers (resource classes) at once: placing a task with a requirement, and balancing, look at every
# eligible class, and a class coming or going refreshes every requirement's eligibility; a cluster has a few kinds of
# machines. A worker whose Hello would create one more is refused.
MAX_RESOURCE_CLASSES = 64
_DONE = -1  # state of a forgotten task, so stale entries of the ready queue are skipped
_NEVER = float("inf")
# The shell calls the core several times a second (ticks every 0.1 s, at most 0.5 s apart while it holds no task). A
# longer gap means the scheduler itself was not listening (a huge graph frame being decoded, a paused process): that
# time is not peers' silence.
_STALL_SECONDS = 1.0
# Balancing into a worker that its results left with nothing happens at once, at most this often (the periodic look
# stays every --balance-interval): a burst of workers running dry costs one look, not one each
PROMPT_BALANCE_SECONDS = 0.01
# A graph node goes where most of its input bytes are held unless that worker has more than this many tasks more
# than the least loaded one (see _place_bucket)
LOCALITY_SLACK = 2
_BIT_TASK_LOCK = heartbeat_flags.TASK_LOCK  # the worker's processor is running a task (not parked)
_BIT_MEMORY_PAUSED = heartbeat_flags.MEMORY_PAUSED  # above its memory pause threshold: it starts no new task
_N_TYPES = len(MESSAGE_TYPES)
_ECHO = HeartbeatEcho.WHICH
_KIND_RESULT = int(ObjectKind.result)
_TASK_REF = int(ArgumentKind.task_ref)
_INLINE = int(ArgumentKind.inline)
# A graph node's dependency result is copied into the node's Task (see _inline_results) while all its copies, one per
# unfinished consumer, add up to at most this: one small result may go to thousands of consumers, a large one to few.
_INLINE_RESULT_BYTES = config.DEFAULT_INLINE_LIMIT_BYTES
FINISHED_NAMES = tuple(status.name for status in TaskStatus)


def _ready_since(task: TaskState) -> float:
    return task.ready_since


def _level(worker: WorkerState) -> int:
    return worker.level


def _attempts(task: TaskState) -> int:
    """How often the task was started on a worker: each failed or timed-out attempt, each worker death it was blamed
    for (it was likely running then), and the attempt on the worker holding it now, if any."""
    return task.failures + task.retries + (task.worker is not None)


Peer = Union[WorkerState, ClientState]


class Demand(NamedTuple):
    """What an autoscaler reads in the status: how much work waits, and how much room the workers have."""

    tasks_waiting: int  # held by the scheduler, on no worker: ready, or waiting on dependencies
    # of those, the ones that could run now if a worker had a free slot: not those needing resources that no connected
    # worker offers, which more workers like the connected ones would not start (tasks_needing_resources)
    tasks_ready: int
    tasks_needing_resources: int  # ready, but waiting for a worker offering what they need to connect
    tasks_assigned: int  # on workers (queued there or running), canceling ones included
    tasks_running: int  # running, as the workers said at their last heartbeat (parked ones included)
    workers: int
    idle_workers: int  # holding no task (tasks parked on nested ones aside)
    worker_slots: int  # the workers' capacities, summed
    free_slots: int  # slots free for another task, summed
    oldest_ready_wait: float  # seconds the task first in line of tasks_ready has waited for a worker; 0 when none


def _registered(previous_registrations: int) -> str:
    if not previous_registrations:
        return "connected"
    return f"registered again (it had registered {previous_registrations} time(s) before, with a scheduler it lost)"


class SchedulerCore(HeldResults, Actors):
    def __init__(self, settings: SchedulerSettings, now: float) -> None:
        self.settings = settings
        self.tasks: Dict[bytes, TaskState] = {}
        self.workers: Dict[bytes, WorkerState] = {}
        self.retiring: Dict[bytes, WorkerState] = {}  # workers that asked to retire (WorkerRetire), until they go
        self.clients: Dict[bytes, ClientState] = {}
        self.objects: Dict[bytes, StoredObject] = {}
        # ready tasks, one queue per distinct resource requirement; () (no resources) always exists
        self.memory_peaks = MemoryPeaks()  # of functions that went past a worker's memory limit (scheduler/memory.py)
        self._memory_learned = self.memory_peaks.peaks  # the same dict: tested per task, a plain truth test
        self._smallest_memory_limit = float("inf")  # of the connected workers (none: inf), kept as classes change
        self._plain = ReadyQueue(())  # tasks needing no resources: every task, when nobody sets options
        self.ready_queues: Dict[Resources, ReadyQueue] = {(): self._plain}
        self.retried_tasks = 0  # attempts started again after the function raised or timed out
        self._recomputing: Dict[bytes, StoredObject] = {}  # lost held results being made again, by task id
        # chunks of those a worker holding nothing uploads (ObjectPut), until its TaskResult says they are all here
        self._remade_uploads: Dict[bytes, Tuple[int, List[bytes]]] = {}
        # Lineage: the tasks that made held results which were freed, kept while held results made from them (their
        # descendants) may have to be made again, with how many held results read each (by id)
        self.lineage: Dict[bytes, TaskState] = {}
        self._lineage_refs: Dict[bytes, int] = {}
        self.recomputed_results = 0  # held results made again after their holder was lost, since start
        # Held results a worker registering again still holds (Hello.heldResults) that no task here made: kept for
        # a client resubmitting the task that made them (a scheduler restart) until a deadline, by id: (worker,
        # size, deadline); and their ids in deadline order. Tasks claiming one in the frame being read wait in
        # _claims, settled once the frame is read (its later nodes may read the result).
        self._unclaimed: Dict[bytes, Tuple[bytes, int, float]] = {}
        self._unclaimed_order: Deque[Tuple[float, bytes]] = deque()
        self._claims: List[TaskState] = []
        self.adopted_results = 0  # held results reported by workers registering again that answered a task here
        self.children: Dict[bytes, List[bytes]] = {}  # parent task id -> nested task ids
        self._init_actors()
        self.function_names: Dict[bytes, str] = {}
        self.function_tasks: Dict[bytes, int] = {}
        self.state_counts = [0, 0, 0, 0]  # tasks by state: waiting, ready, assigned, canceling
        self.finished_counts = [0] * len(TaskStatus)
        self.sent_counts = [0] * _N_TYPES
        self.received_counts = [0] * _N_TYPES
        self.malformed = 0
        self.registered_again = 0  # peers whose Hello said they had registered before: survivors of a lost scheduler
        self.workers_lost = 0  # workers removed because they went silent
        self.workers_replaced = 0  # workers whose Hello said their cluster started them in place of a lost one
        self.relay_port = 0  # the data relay's, set by the shell that started it (HelloReply.relayPort); 0: none
        self.peer_warnings = LimitedLog(logger)  # what peers make us warn about: a few lines, then a summary
        # peers connecting and leaving: every line while a cluster starts, not an endless stream when a peer loops
        self.peer_events = LimitedLog(
            logger, RateLimiter(overall=DEFAULT_PEER_EVENTS_PER_INTERVAL), level=logging.INFO, what="line(s) on peers"
        )
        self.stopping = False  # set when an unprotected shutdown was accepted: flush, then exit
        self.loads = Placement()
        self.status_rows = StatusRows(self.loads)  # the workers' rows of the status, kept encoded
        self.tasks_running = 0  # sum of what each worker last said it runs
        # (when to look again, tie-break, peer): each connected peer once; a peer is looked at when its timeout could
        # have passed, not on every tick, so liveness costs nothing per tick beyond the peers due
        self._liveness: List[Tuple[float, int, Peer]] = []
        self._liveness_order = 0
        self._outgoing: Dict[bytes, List[bytes]] = {}
        self._next_balance = now + settings.balance_interval_seconds
        # A worker whose results left it with nothing is balanced into at once, not at the next look: with tasks of
        # tens of milliseconds, the end of a graph otherwise waits on the last tasks queued behind a running one
        self._went_idle = False
        self._next_prompt_balance = now
        # graph nodes balancing took back from a worker: placed once without the locality rule, which would hand them
        # straight back to the worker holding their inputs, the one they were taken from
        self._rebalanced: Set[bytes] = set()
        self._last_call = now
        # the heartbeat interval and peer timeouts named to peers, stretched as they grow in number (cadence.py)
        self.cadence = Cadence(
            settings.heartbeat_interval_seconds,
            settings.worker_timeout_seconds,
            settings.client_timeout_seconds,
            settings.heartbeats_per_second,
        )
        # With CurveZMQ: what a peer serving data is told before its HelloReply (DataKeys.authorizedKeys), encoded once
        curve = settings.curve_keys
        self._data_keys: Optional[bytes] = None
        if curve is not None:
            self._data_keys = encode(DataKeys(authorized_keys=[raw_key(key) for key in sorted(curve.authorized_keys)]))
        self._client_handlers = handler_table(
            (
                (ClientHeartbeat, self._on_client_heartbeat),
                (Task, self._on_task),
                (TaskCancel, self._on_task_cancel),
                (ObjectPut, self._on_object_put),
                (ObjectRequest, self._on_object_request),
                (ObjectDelete, self._on_object_delete),
                (ObjectResponse, self._on_keeper_response),
                (DataKeys, self._on_data_keys),
                (ClientDisconnect, self._on_client_disconnect),
                (ActorRelease, self._on_actor_release),
                (Hello, self._on_hello_again),
            )
        )
        self._worker_handlers = handler_table(
            (
                (WorkerHeartbeat, self._on_worker_heartbeat),
                (TaskResult, self._on_task_result),
                (TaskOutput, self._on_task_output),
                (ObjectPut, self._on_object_put),
                (ObjectRequest, self._on_object_request),
                (ObjectResponse, self._on_holder_response),
                (DataKeys, self._on_data_keys),
                (BalanceResponse, self._on_balance_response),
                (WorkerDisconnect, self._on_worker_disconnect),
                (WorkerRetire, self._on_worker_retire),
                (ActorRelease, self._on_actor_release),
                (Hello, self._on_hello_again),
            )
        )

    # ---- inputs ------------------------------------------------------------------------------------------------------

    def receive(self, peer: bytes, messages: list, now: float) -> None:
        """Messages decoded from one frame of `peer`."""
        self._forgive_stall(now)
        received_counts = self.received_counts
        for message in messages:
            which = message.WHICH
            received_counts[which] += 1
            client = self.clients.get(peer)
            if client is not None:
                client.last_seen = now
                handler = self._client_handlers[which]
                state: object = client
            else:
                worker = self.workers.get(peer)
                if worker is None:
                    self._on_stranger(peer, message, now)
                    continue
                worker.last_seen = now
                handler = self._worker_handlers[which]
                state = worker
            if handler is None:
                self._misuse(peer, state, type(message).__name__, now)
                continue
            handler(state, message, now)
        if self._claims:  # rare: only after a scheduler restart
            self._settle_claims()
        if self.retiring:  # rare: one check per frame, none per task
            self._advance_retirements(now)
        self._assign_ready()
        if self._went_idle:
            self._went_idle = False
            if now >= self._next_prompt_balance:
                self._next_prompt_balance = now + PROMPT_BALANCE_SECONDS
                self._balance()

    def receive_malformed(self, peer: bytes, reason: str, now: float) -> None:
        """A frame of `peer` that did not decode: counted, logged (rate limited, see scaler.rate_limit), dropped."""
        self.malformed += 1
        state = self.clients.get(peer) or self.workers.get(peer)
        if state is None:
            self.peer_warnings.log(peer, now, "dropped a malformed frame from unregistered peer %r: %s", peer, reason)
            return
        state.malformed += 1
        if state.malformed == 1:
            self.peer_warnings.log(
                peer,
                now,
                "dropped a malformed frame from %s (further ones counted, not logged): %s",
                state.name,
                reason,
            )
        if state.malformed >= self.settings.max_malformed_per_peer:
            self._drop_peer(state, f"sent {state.malformed} malformed frames", now)

    def tick(self, now: float) -> None:
        """Timers: peers that went silent, and load balancing."""
        self.peer_warnings.flush(now)
        self.peer_events.flush(now)
        self._forgive_stall(now)
        self._drop_silent_peers(now)
        if now >= self._next_balance:
            self._next_balance = now + self.settings.balance_interval_seconds
            self._balance()
        if self.retiring:
            self._advance_retirements(now)
        if self._unclaimed_order:
            self._expire_unclaimed(now)
        if self._unreported:
            self._expire_unreported(now)
        self._assign_ready()
        self._report_unmet_requirements(now)

    def holds_work(self) -> bool:
        """Tasks held or workers retiring: balancing, placement and retirement deadlines want frequent ticks. Without
        either, a tick only looks for silent peers and flushes rate-limited warnings, which may wait a little."""
        return bool(self.tasks) or bool(self.retiring) or bool(self._unreported)

    def _report_unmet_requirements(self, now: float) -> None:
        """Say once per requirement (until a worker meets it) that tasks wait for resources nobody offers."""
        for queue in self.ready_queues.values():
            if not self._waits_for_resources(queue):  # tasks needing nothing wait for any worker: not this
                queue.reported = False
            elif queue.live and not queue.reported:
                queue.reported = True
                self.peer_warnings.log(
                    queue.requirement,
                    now,
                    "%d task(s) need %s; only retiring workers offer it: they wait until another one connects"
                    if queue.eligible
                    else "%d task(s) need %s; no connected worker offers it: they wait until one connects",
                    queue.live,
                    describe(queue.requirement),
                )

    def tasks_needing_resources(self) -> int:
        """Ready tasks needing resources that no connected worker offers, retiring ones aside: O(distinct requirements
        x eligible classes). Tasks needing nothing are not counted while no worker takes tasks: any worker will do."""
        return sum(queue.live for queue in self.ready_queues.values() if self._waits_for_resources(queue))

    def _waits_for_resources(self, queue: ReadyQueue) -> bool:
        """Its tasks wait for a worker offering what they need to connect: none offers it, or only retiring ones
        (which take no task), so more workers like those connected would not start them. O(eligible classes)."""
        if queue is self._plain:
            return False
        for loads in queue.eligible:
            if loads.count > loads.retiring:
                return False
        return True

    def ready_in_order(self) -> List[TaskState]:
        """The ready tasks in the order they would be handed out to a worker eligible for all of them (tests)."""
        ready = [task for queue in self.ready_queues.values() for task in queue.in_order()]
        return sorted(ready, key=lambda task: (-task.priority, task.ready_since))

    def _drop_silent_peers(self, now: float) -> None:
        liveness = self._liveness
        while liveness and liveness[0][0] < now:
            peer = heapq.heappop(liveness)[2]
            if type(peer) is WorkerState:
                if self.workers.get(peer.identity) is not peer:
                    continue  # gone meanwhile
                deadline = peer.last_seen + peer.clock.timeout
                if deadline < now:
                    self.workers_lost += 1
                    self._drop_worker(peer, f"no heartbeat for {now - peer.last_seen:.1f}s", now)
                    continue
            else:
                if self.clients.get(peer.identity) is not peer:
                    continue
                deadline = peer.last_seen + peer.clock.timeout
                if deadline < now:
                    self._drop_client(peer, f"no heartbeat for {now - peer.last_seen:.1f}s")
                    continue
            self._watch(peer, deadline)

    def _watch(self, peer: Peer, when: float) -> None:
        self._liveness_order += 1
        heapq.heappush(self._liveness, (when, self._liveness_order, peer))

    def _forgive_stall(self, now: float) -> None:
        """After a stall, credit every peer with it: their messages of that time are still queued, unread."""
        stall = now - self._last_call
        if stall > _STALL_SECONDS:
            logger.warning("the scheduler did not run for %.1fs: peer timeouts extended by as much", stall)
            peers: List[Peer] = [*self.workers.values(), *self.clients.values()]
            for peer in peers:
                peer.last_seen += stall
        if now > self._last_call:
            self._last_call = now

    def demand(self, now: float) -> Demand:
        """What waits and what room there is, from counts kept up to date: O(1), whatever the number of tasks."""
        counts = self.state_counts
        loads = self.loads
        loads.settle()
        needing = self.tasks_needing_resources()
        ready = counts[READY] - needing
        return Demand(
            tasks_waiting=counts[WAITING] + counts[READY],
            tasks_ready=ready,
            tasks_needing_resources=needing,
            tasks_assigned=counts[ASSIGNED] + counts[CANCELING],
            tasks_running=self.tasks_running,
            workers=len(self.workers),
            idle_workers=loads.idle(),
            worker_slots=loads.capacity,
            free_slots=loads.free_slots,
            oldest_ready_wait=max(0.0, now - self._oldest_ready_since()) if ready else 0.0,
        )

    def _oldest_ready_since(self) -> float:
        """When the ready task waiting longest became ready, of those some connected worker could take: the first of
        some bucket of some queue. Tasks join a bucket at the back, except those handed back by a worker, which join
        at the front and became ready before any task behind them (they were assigned, so everything ahead of them
        was too)."""
        oldest = [
            task.ready_since
            for task in (queue.oldest() for queue in self.ready_queues.values() if not self._waits_for_resources(queue))
            if task is not None
        ]
        return min(oldest) if oldest else self._last_call

    def validate(self) -> None:
        """Assert the core's invariants; the tests call it after every step (production never does)."""
        holders: Dict[bytes, List[bytes]] = {}
        for identity, worker in self.workers.items():
            assert worker.identity == identity
            for task_id in worker.assigned:
                holders.setdefault(task_id, []).append(identity)
        counts = [0, 0, 0, 0]
        for task_id, task in self.tasks.items():
            counts[task.state] += 1
            if task.state in (WAITING, READY):
                assert task_id not in holders and task.worker is None, f"{task_id.hex()} waits and is on a worker"
            elif task.actor is not None:  # sent to its actor's worker, in no slot of it (_validate_actors)
                assert task_id not in holders
            else:
                assert holders.get(task_id) == [task.worker], f"{task_id.hex()} is not on exactly its worker"
        assert not set(holders) - set(self.tasks), "a worker holds a task the core forgot"
        assert counts == self.state_counts, f"state counts {self.state_counts}, tasks say {counts}"
        assert all(self.tasks[task_id].state == READY for task_id in self._rebalanced), "a rebalanced task not ready"
        self._validate_ready(counts[READY])
        self.loads.validate(self.workers)
        assert len(self.loads.classes) <= MAX_RESOURCE_CLASSES, "more distinct worker offers than the limit"
        retiring = {identity for identity, worker in self.workers.items() if worker.retire_deadline is not None}
        assert retiring == set(self.retiring), "the retiring workers and the retiring index differ"
        assert all(self.workers.get(identity) is worker for identity, worker in self.retiring.items())
        assert all(worker.row.retiring == (worker.retire_deadline is not None) for worker in self.workers.values())
        assert self.tasks_running == sum(worker.running for worker in self.workers.values())
        watched = [
            peer
            for _, _, peer in self._liveness
            if self.workers.get(peer.identity) is peer or self.clients.get(peer.identity) is peer
        ]
        assert len(watched) == len({id(peer) for peer in watched}) == len(self.workers) + len(self.clients), (
            "every connected peer is watched for silence exactly once"
        )
        self._validate_status_rows()
        self._validate_held()
        self._validate_actors()
        cadence = self.cadence
        peers: List[Peer] = [*self.workers.values(), *self.clients.values()]
        for peer in peers:
            clock = peer.clock
            assert clock.allowed_ms >= cadence.base_ms, f"{peer.name} may heartbeat faster than configured"
            configured = cadence.worker_timeout if type(peer) is WorkerState else cadence.client_timeout
            assert clock.timeout >= configured, f"{peer.name} is given less silence than configured"

    def _validate_status_rows(self) -> None:
        """The rows kept encoded are those a status built from scratch has. Writes what changed into them, as a
        status does; any change not noted shows as a stale row."""
        kept = self.encode_status(SchedulerStatus(time_us=1))
        rows = [refreshed_row(worker) for worker in self.workers.values()]
        assert kept == encode(SchedulerStatus(time_us=1, workers=rows)), "a status row is stale"
        assert not self.loads.changed and not any(worker.row_changed for worker in self.workers.values())

    def _validate_ready(self, ready: int) -> None:
        """Every ready task queued exactly once, in its requirement's queue; each queue's eligible classes are those
        meeting its requirement; no task is on a worker whose offer does not meet its requirement."""
        queues = self.ready_queues
        members: Dict[int, int] = {}  # recomputed from the task table: unfinished tasks with a requirement, per queue
        for task in self.tasks.values():
            queue: ReadyQueue = task.queue
            assert queues.get(queue.requirement) is queue, f"{task.task_id.hex()}'s queue is not listed"
            if queue.requirement:
                members[id(queue)] = members.get(id(queue), 0) + 1
            assert task.queued == (task.state == READY), f"{task.task_id.hex()} is queued iff ready"
            if task.worker is not None:
                offer = self.workers[task.worker].loads.offer
                assert satisfies(offer, queue.requirement), f"{task.task_id.hex()} on an ineligible worker"
        queued: List[TaskState] = []
        for requirement, queue in queues.items():
            assert queue.requirement == requirement
            queue.validate()
            assert queue.members == members.get(id(queue), 0), f"queue {describe(requirement)}: wrong member count"
            if requirement:
                assert queue.members, "an unused requirement queue is kept"
            else:
                assert queue is self._plain
            eligible = [loads for offer, loads in self.loads.classes.items() if satisfies(offer, requirement)]
            assert {id(loads) for loads in queue.eligible} == {id(loads) for loads in eligible}, "stale eligibility"
            assert len(queue.eligible) == len(eligible)
            queued.extend(queue.in_order())
        assert all(self.tasks.get(task.task_id) is task for task in queued), "a forgotten task is queued"
        assert len(queued) == len({id(task) for task in queued}) == ready, "ready tasks not queued once each"

    def encode_status(self, status: SchedulerStatus) -> bytes:
        """`status`, which the shell filled but for the workers' rows, encoded with a row per worker: O(rows changed
        since the last status, workers come or gone), not O(workers) (scaler.scheduler.status)."""
        return self.status_rows.encode(status, self.workers)

    def take_outgoing(self) -> Dict[bytes, List[bytes]]:
        """Encoded messages queued per peer since the last call; each list is meant to travel as one frame."""
        outgoing = self._outgoing
        self._outgoing = {}
        return outgoing

    # ---- helpers -----------------------------------------------------------------------------------------------------

    def _send(self, peer: bytes, which: int, data: bytes) -> None:
        self.sent_counts[which] += 1
        queue = self._outgoing.get(peer)
        if queue is None:
            self._outgoing[peer] = [data]
        else:
            queue.append(data)

    def _send_message(self, peer: bytes, message) -> None:
        self._send(peer, message.WHICH, encode(message))

    def _set_state(self, task: TaskState, state: int) -> None:
        counts = self.state_counts
        counts[task.state] -= 1
        counts[state] += 1
        task.state = state

    def _misuse(self, peer: bytes, state, type_name: str, now: float) -> None:
        self.receive_malformed(peer, f"a {type(state).__name__[:-5].lower()} may not send {type_name}", now)

    # ---- peers -------------------------------------------------------------------------------------------------------

    def _on_stranger(self, peer: bytes, message, now: float) -> None:
        if type(message) is not Hello:
            # A peer of a scheduler that died, heartbeating into its successor: it registers again and resubmits.
            self._send_message(peer, Goodbye(reason="not registered: send Hello first", reconnect=True))
            return
        if message.protocol_version != PROTOCOL_VERSION:
            reason = (
                f"protocol version {message.protocol_version} is not supported: "
                f"this scheduler speaks version {PROTOCOL_VERSION}"
            )
            self.peer_warnings.log(peer, now, "refused %s (%r): %s", message.name or "a peer", peer, reason)
            self._send_message(peer, HelloReply(protocol_version=PROTOCOL_VERSION, accepted=False, reason=reason))
            return
        name = message.name or peer.decode("utf-8", "replace")
        again = message.previous_registrations
        if again:
            self.registered_again += 1
        if message.role == Role.worker:
            if message.capacity < 1:
                reason = "a worker must have capacity >= 1"
                self._send_message(peer, HelloReply(protocol_version=PROTOCOL_VERSION, accepted=False, reason=reason))
                return
            offer, error = normalize_resources(message.resources)
            if offer is None:
                reason = f"bad resources: {error}"
                self._send_message(peer, HelloReply(protocol_version=PROTOCOL_VERSION, accepted=False, reason=reason))
                return
            announced = offer
            if message.memory_limit:  # its limit is a resource: tasks that need more go elsewhere (memory.py)
                offer = with_memory(offer, message.memory_limit)
            if offer not in self.loads.classes and len(self.loads.classes) >= MAX_RESOURCE_CLASSES:
                reason = (
                    f"too many distinct resource offers: workers connected already offer {MAX_RESOURCE_CLASSES} "
                    f"different sets of resources, the scheduler's limit; offer one of those ({describe(offer)} is new)"
                )
                self.peer_warnings.log(peer, now, "refused worker %s (%r): %s", name, peer, reason)
                self._send_message(peer, HelloReply(protocol_version=PROTOCOL_VERSION, accepted=False, reason=reason))
                return
            capacity = message.capacity
            queue_cap = self.settings.per_worker_queue_size
            if queue_cap is not None and capacity > queue_cap:
                capacity = queue_cap
            worker = WorkerState(peer, name, capacity, now, again)
            worker.row.resources = [Resource(name=key, amount=amount) for key, amount in announced]
            worker.data_address = message.data_address
            worker.fetches_from_holders = message.fetches_from_holders
            worker.takes_handoffs = message.takes_handoffs
            worker.row.memory_limit = worker.memory_limit = message.memory_limit
            worker.actor_slots = message.actor_slots
            self.workers[peer] = worker
            if self.loads.add(worker, offer):
                self._refresh_eligibility()
            self._fit_cadence()
            self._watch(worker, now + self._told_cadence(worker))
            offers = f", resources {describe(offer)}" if offer else ""
            if message.replaces:
                self.workers_replaced += 1
                offers += f", in place of a lost worker ({message.replaces})"
            self.peer_events.log(peer, now, "worker %s %s, capacity %d%s", name, _registered(again), capacity, offers)
            if not message.task_policies:
                self.peer_warnings.log(
                    peer,
                    now,
                    "worker %s is of an older version: it runs its queue in arrival order, not by priority, and does "
                    "not enforce task timeouts",
                    name,
                )
        elif message.role == Role.client:
            client = ClientState(peer, name, now, again)
            client.fetches_from_holders = message.fetches_from_holders
            client.data_address = message.data_address
            self.clients[peer] = client
            self._fit_cadence()
            self._watch(client, now + self._told_cadence(client))
            self.peer_events.log(peer, now, "client %s %s", name, _registered(again))
        else:
            reason = f"role {message.role} does not connect to the scheduler address (monitors subscribe)"
            self._send_message(peer, HelloReply(protocol_version=PROTOCOL_VERSION, accepted=False, reason=reason))
            return
        self._accept_hello(peer, message.role, resumed=False, data_address=message.data_address)
        if message.role == Role.worker and message.held_results:
            self._adopt_held(self.workers[peer], message.held_results, now)
        if message.actors:  # registering again after a restart: the actors it hosts, or owns
            if message.role == Role.worker:
                self._adopt_actors(self.workers[peer], message.actors, now)
            else:
                self._claim_actors(self.clients[peer], message.actors, now)

    def _on_hello_again(self, state, message: Hello, now: float) -> None:
        """Hello from a registered peer: its connection dropped and came back to this same scheduler. A client keeps
        its session (it resubmits what may have been lost; duplicates are ignored); a worker dropped its tasks when
        it lost the connection, so it is taken as a new worker."""
        if isinstance(state, ClientState) and message.role == Role.client:
            state.resumed = True
            self.peer_events.log(
                state.identity,
                now,
                "client %s said Hello again on a dropped connection: its session is kept",
                state.name,
            )
            self._told_cadence(state)
            self._accept_hello(state.identity, Role.client, resumed=True, data_address=state.data_address)
            return
        if isinstance(state, WorkerState):
            self._drop_worker(state, "it registered again after losing its connection", now)
        else:
            self._drop_client(state, "it registered again in another role")
        self._on_stranger(state.identity, message, now)

    def _accept_hello(self, peer: bytes, role: int, resumed: bool, data_address: str = "") -> None:
        cadence = self.cadence
        if self._data_keys is not None and data_address:  # the keys its data address accepts: before the HelloReply
            self._send(peer, DataKeys.WHICH, self._data_keys)
        self._send_message(
            peer,
            HelloReply(
                protocol_version=PROTOCOL_VERSION,
                accepted=True,
                heartbeat_interval_ms=cadence.interval_ms,
                peer_timeout_ms=cadence.timeout_ms(role == Role.worker),  # capped: a huge timeout must not break Hello
                forwards_task_output=True,
                resumed=resumed,
                task_policies=True,
                max_frame_bytes=self.settings.max_frame_bytes,
                holds_on_workers=True,
                holds_on_clients=True,
                relay_port=self.relay_port,
                adopts_held_results=role == Role.worker,
                memory_pause=True,
                actors=True,
            ),
        )

    def _refresh_eligibility(self) -> None:
        """A resource class appeared or went: recompute which classes each requirement may use (few of each)."""
        classes = self.loads.classes
        for requirement, queue in self.ready_queues.items():
            queue.eligible = [loads for offer, loads in classes.items() if satisfies(offer, requirement)]
        limits = [dict(offer).get(MEMORY, float("inf")) for offer in classes]
        self._smallest_memory_limit = min(limits, default=float("inf"))

    def _drop_peer(self, state, reason: str, now: float) -> None:
        if isinstance(state, WorkerState):
            self._drop_worker(state, reason, now)
        else:
            self._drop_client(state, reason)
        self._send_message(state.identity, Goodbye(reason=reason))

    def _on_client_heartbeat(self, client: ClientState, message: ClientHeartbeat, now: float) -> None:
        self._echo(client, message, False, now)

    def _echo(self, peer: Peer, heartbeat: Union[ClientHeartbeat, WorkerHeartbeat], worker: bool, now: float) -> None:
        """Answer a heartbeat: its own sentAtUs (the peer's round trip), and the cadence from now on."""
        self._fit_cadence()
        cadence = self.cadence
        cadence.heartbeat(peer.clock, heartbeat.interval_ms, worker)
        echo = HeartbeatEcho(
            sent_at_us=heartbeat.sent_at_us,
            heartbeat_interval_ms=cadence.interval_ms,
            peer_timeout_ms=cadence.worker_told_ms if worker else cadence.client_told_ms,
        )
        self._send(peer.identity, _ECHO, encode(echo))

    def _told_cadence(self, peer: Peer) -> float:
        """A peer about to be told the cadence in a HelloReply, which every peer follows: its timeout (seconds)."""
        peer.clock = self.cadence.clock(worker=type(peer) is WorkerState)
        return peer.clock.timeout

    def _fit_cadence(self) -> None:
        cadence = self.cadence
        if not cadence.fit(len(self.workers) + len(self.clients)):
            return
        logger.info(
            "heartbeat interval now %gs, worker timeout %gs, client timeout %gs: %d peers at %d heartbeat(s)/s at most",
            cadence.interval_ms / 1000,
            cadence.worker_told_ms / 1000,
            cadence.client_told_ms / 1000,
            len(self.workers) + len(self.clients),
            cadence.budget,
        )

    def _on_worker_heartbeat(self, worker: WorkerState, message: WorkerHeartbeat, now: float) -> None:
        row = worker.row
        row.agent_cpu = message.agent_cpu
        row.agent_rss = message.agent_rss
        row.cpu = message.processor_cpu
        row.rss = message.processor_rss
        row.queued = message.queued
        row.lag_us = message.lag_us
        row.flags = message.flags
        row.spilled_bytes = message.spilled_bytes
        if message.function_peaks:  # with memory limits: what its tasks' functions were seen to use
            for peak in message.function_peaks:
                key = self._function_key(peak.function_id)
                if key is not None:
                    self.memory_peaks.learn(key, peak.peak_bytes)
        self.loads.note(worker)
        # Tasks parked on their children (nested tasks) hold a slot without using the worker: lend their slots back,
        # or parents could fill every slot and leave none for the children they wait for.
        active = 1 if message.flags & _BIT_TASK_LOCK else 0
        parked = max(0, message.running - active)
        self.tasks_running += message.running - worker.running
        worker.running = message.running
        if parked != worker.parked:
            worker.parked = parked
            worker.loads.file(worker)
        if (message.flags & _BIT_MEMORY_PAUSED != 0) != worker.memory_paused:
            self._memory_pause(worker, not worker.memory_paused, now)
        self._echo(worker, message, True, now)

    def _memory_pause(self, worker: WorkerState, paused: bool, now: float) -> None:
        """A worker's memory went above its pause threshold (or fell below it again): it gets no new task meanwhile,
        and hands back the tasks queued on it, for other workers; then it takes tasks again."""
        worker.memory_paused = paused
        worker.loads.file(worker)
        what = "paused (memory): its queued tasks go elsewhere" if paused else "resumed (memory below its threshold)"
        self.peer_events.log(worker.identity, now, "worker %s %s", worker.name, what)
        if paused and len(worker.assigned) > worker.running and not worker.balance_pending:
            worker.balance_pending = True
            self._send_message(worker.identity, BalanceRequest(count=len(worker.assigned) - worker.running))

    def _on_worker_disconnect(self, worker: WorkerState, message: WorkerDisconnect, now: float) -> None:
        # A retiring worker that leaves before its retirement is over was stopped from outside (a second SIGTERM, its
        # own deadline): what it ran did not kill it, so no task is blamed.
        reason = "disconnected: {}".format(message.reason or "no reason given")
        self._drop_worker(worker, reason, now, blame=worker.retire_deadline is None)

    # ---- retirement --------------------------------------------------------------------------------------------------

    def _on_worker_retire(self, worker: WorkerState, message: WorkerRetire, now: float) -> None:
        self.retire(worker.identity, message.deadline_ms / 1000, now, message.reason or "it asked to")

    def retire(self, identity: bytes, deadline_seconds: float, now: float, reason: str) -> bool:
        """Take a worker out of the pool without losing or repeating a task: it gets no new task, its queued tasks
        come back (BalanceRequest) for other workers, its running ones may finish for `deadline_seconds`, after which
        they run elsewhere (a late result is ignored: the task settles once). Then Goodbye(retired) tells it to exit.
        False if the worker is unknown. Asked again, the earlier deadline stands."""
        worker = self.workers.get(identity)
        if worker is None:
            return False
        if worker.retire_deadline is not None:
            return True
        worker.retire_deadline = now + deadline_seconds
        worker.row.retiring = True
        self.loads.note(worker)
        worker.loads.retiring += 1  # its class may now serve no one (_waits_for_resources)
        self.retiring[identity] = worker
        worker.loads.file(worker)  # no free slot from now on: never a placement or balancing target (WorkerLoads.file)
        self.peer_events.log(
            identity,
            now,
            "worker %s retiring (%s): %d task(s) to finish or hand back within %gs",
            worker.name,
            reason,
            len(worker.assigned),
            deadline_seconds,
        )
        if worker.assigned:  # it hands back those it has not started
            worker.balance_pending = True
            self._send_message(identity, BalanceRequest(count=len(worker.assigned)))
        if worker.held:  # the results it holds go to other workers before it leaves
            self._hand_over(worker, list(worker.held))
        return True

    def _advance_retirements(self, now: float) -> None:
        """Let go of retiring workers that hold no task any more and whose held results were taken by others (or
        could not be), or whose deadline passed."""
        for worker in list(self.retiring.values()):
            assert worker.retire_deadline is not None  # retiring workers have one
            if (worker.assigned or worker.handing or worker.taking or worker.actors) and now < worker.retire_deadline:
                continue  # tasks to finish, results to hand over or to take, actors that may still be called
            if worker.assigned:
                self._drop_worker(worker, "retirement deadline passed: its tasks run elsewhere", now, blame=False)
                reason = "retired: the deadline passed, your unfinished tasks run elsewhere"
            elif worker.handing:
                self._drop_worker(worker, "retirement deadline passed: what it still held is made again", now)
                reason = "retired: the deadline passed, the results you held are made again elsewhere"
            elif worker.actors:
                self._drop_worker(worker, "retired with actors still alive at its deadline: they are lost", now, False)
                reason = "retired: the deadline passed, your actors are lost"
            else:
                self._drop_worker(worker, "retired", now)
                reason = "retired: every task you held is settled"
            self._send_message(worker.identity, Goodbye(reason=reason, retired=True))

    # ---- leaving -----------------------------------------------------------------------------------------------------

    def _drop_worker(self, worker: WorkerState, reason: str, now: float, blame: bool = True) -> None:
        """Forget a worker; what it held runs elsewhere, unless a task has now killed too many workers. With `blame`
        false the worker did not die (a retirement): no task counts a retry."""
        if self.workers.pop(worker.identity, None) is None:
            return
        self.retiring.pop(worker.identity, None)
        if self.loads.remove(worker):
            self._refresh_eligibility()
        self.tasks_running -= worker.running
        self.peer_events.log(
            worker.identity,
            now,
            "worker %s removed (%s), %d task(s) to reassign",
            worker.name,
            reason,
            len(worker.assigned),
        )
        retry_limit = self.settings.task_retry_limit
        suspects = self._likely_running(worker) if blame else set()
        back: List[TaskState] = []  # newest first
        for task_id in reversed(list(worker.assigned)):
            task = self.tasks.get(task_id)
            if task is None or task.worker != worker.identity:
                continue  # settled meanwhile: a nested child canceled with its parent just above
            task.worker = None
            if task.state == CANCELING:
                self._finish_locally(task, _CANCELED, b"", "")
                continue
            # Its nested tasks were submitted by a client that died with the worker: nobody waits for them any more,
            # and the task resubmits them when it runs again.
            self._cancel_children(task)
            self._drop_attempt_upload(task)
            if task_id not in suspects:
                self._set_state(task, READY)
                back.append(task)
                continue
            task.retries += 1
            if task.retries >= retry_limit:
                text = (
                    f"task {task_id.hex()} was running on {task.retries} workers that died "
                    f"(last: {worker.name}, {reason}); not retried again, as the task itself may be what kills them "
                    f"(out of memory, a crash)"
                )
                self._finish_locally(task, int(TaskStatus.worker_died), b"", text)
                continue
            self._set_state(task, READY)
            back.append(task)
        back.reverse()
        self._hand_back(back)
        for object_id in list(worker.handing):
            self._end_handoff(worker, object_id)
        if self.retiring:
            self._give_up_handoffs(worker)
        if self._unclaimed:
            self._forget_unclaimed(worker)
        # A task settled above may have freed what the worker held (its last reader): that is not lost. The worker is
        # out of `workers` by then, so _free left it listed in `held`.
        objects = self.objects
        lost = [objects[object_id] for object_id in worker.held if object_id in objects]
        worker.held.clear()
        worker.held_bytes = 0
        for stored in lost:  # all of them first: one may be an input of another, to be made again before it
            stored.holder = None
        for stored in lost:
            self._lost_held(stored, f"its worker {worker.name} was removed ({reason})")
        if worker.actors:
            self._lose_worker_actors(worker, f"its worker {worker.name} was removed ({reason})")

    def _likely_running(self, worker: WorkerState) -> Set[bytes]:
        """The tasks a dead worker most likely was running, which alone count a retry: a task merely queued there
        did not kill it. A worker runs tasks in the order it received them within a priority, highest priority first,
        except nested ones, newest first; so the oldest it held (one, plus one per task parked on its children), the
        oldest of its highest priority, and its newest nested task. A guess, since a worker does not say which task it
        starts. A task that kills its worker is among these when it runs (unless results of earlier tasks died with
        the worker too), so it is blamed; an innocent task only if it was among these when its worker died,
        `task_retry_limit` times."""
        held = list(worker.assigned)
        suspects = set(held[: 1 + worker.parked])
        tasks = self.tasks
        # A worker runs its queue highest priority first (Task.priority): the oldest task of the highest priority it
        # holds may have started before the oldest one did (nested tasks: the newest, below).
        first_of_top = None
        for task_id in held:
            task = tasks[task_id]
            if not task.parent_task_id and (first_of_top is None or task.priority > tasks[first_of_top].priority):
                first_of_top = task_id
        if first_of_top is not None:
            suspects.add(first_of_top)
        newest_nested = next((task_id for task_id in reversed(held) if tasks[task_id].parent_task_id), None)
        if newest_nested is not None:
            suspects.add(newest_nested)
        return suspects

    def _on_client_disconnect(self, client: ClientState, message: ClientDisconnect, now: float) -> None:
        if not message.shutdown_cluster:
            self._drop_client(client, "disconnected")
            self._send_message(client.identity, DisconnectReply(accepted=True))
            return
        if self.settings.protected:
            reason = "the scheduler is in protected mode: start it unprotected to allow client.shutdown()"
            self.peer_events.log(
                client.identity, now, "client %s asked to shut the cluster down: refused, protected mode", client.name
            )
            self._send_message(client.identity, DisconnectReply(accepted=False, reason=reason))
            return
        logger.info("client %s shut the cluster down", client.name)
        self._send_message(client.identity, DisconnectReply(accepted=True))
        self._drop_client(client, "shut the cluster down")
        self.shutdown("a client shut the cluster down")

    def shutdown(self, reason: str, reconnect: bool = False) -> None:
        """Say Goodbye to every peer; the shell flushes the outgoing messages and stops. With `reconnect` (stopped by
        a signal, as for an upgrade) peers wait for a scheduler to come back on the address instead of leaving."""
        self.peer_warnings.flush(self._last_call, force=True)
        self.peer_events.flush(self._last_call, force=True)
        for identity in list(self.workers) + list(self.clients):
            self._send_message(identity, Goodbye(reason=reason, reconnect=reconnect))
        self.stopping = True

    def _drop_client(self, client: ClientState, reason: str) -> None:
        """Forget a client: cancel what it still has running and free its objects."""
        if self.clients.pop(client.identity, None) is None:
            return
        self.peer_events.log(
            client.identity,
            self._last_call,
            "client %s removed (%s): %d unfinished task(s) canceled, %d object(s) freed",
            client.name,
            reason,
            len(client.tasks),
            len(client.objects),
        )
        for task_id in list(client.tasks):
            task = self.tasks.get(task_id)
            if task is not None:
                self._cancel(task)
        for object_id in list(client.objects):
            stored = self.objects.get(object_id)
            if stored is not None:
                stored.released = True
                self._maybe_free(stored)
        if client.actors:
            self._release_client_actors(client)

    # ---- tasks -------------------------------------------------------------------------------------------------------

    def _on_task(self, client: ClientState, message: Task, now: float) -> None:
        task_id = message.task_id
        existing = self.tasks.get(task_id)
        if existing is not None or not task_id:
            if existing is not None and client.resumed and existing.client == client.identity:
                return  # resubmitted after a dropped connection, and never lost: it runs once
            self._refuse(client.identity, task_id, f"task id {task_id.hex()!r} is empty or already in use")
            return
        if len(self.tasks) >= self.settings.max_tasks_waiting:
            self._refuse(client.identity, task_id, f"too many tasks waiting ({len(self.tasks)})")
            return
        if message.actor_id:
            self._on_actor_task(client, message, message.raw if message.raw is not None else encode(message), now)
            return
        if message.resources:
            requirement, error = normalize_resources(message.resources)
            if requirement is None:
                self._refuse(client.identity, task_id, f"bad resources: {error}")
                return
            queue = self.ready_queues.get(requirement)
            if queue is None:
                if len(self.ready_queues) > MAX_REQUIREMENTS:
                    reason = f"too many distinct resource requirements at once ({MAX_REQUIREMENTS})"
                    self._refuse(client.identity, task_id, reason)
                    return
                queue = self._new_ready_queue(requirement)
            if requirement:  # zero amounts only: no requirement, the queue that always lives (see _forget)
                queue.members += 1
        else:
            queue = self._plain
        if self._memory_learned:  # a function went past a worker's memory limit: its tasks go, if they can, elsewhere
            queue = self._memory_hint(queue, message.function_id)
        priority = message.priority
        if message.parent_task_id:
            # a nested task runs before tasks of its parent's level, so that parents waiting on children finish first
            parent = self.tasks.get(message.parent_task_id)
            if parent is not None and parent.priority >= priority:
                priority = min(parent.priority + 1, INT32_MAX)
                if message.args is None:  # read by decode_frame_for_routing: every field is needed to re-encode
                    message = decode_frame(message.raw)[0]
                message.priority = priority
                message.raw = None  # re-encoded below: the worker orders its queue by the priority it receives
        raw = message.raw if message.raw is not None else encode(message)
        task = TaskState(
            task_id,
            client.identity,
            raw,
            message.function_id,
            message.report_result,
            message.parent_task_id,
            message.dependencies,
            now,
            queue,
            priority,
            message.retries,
        )
        self.tasks[task_id] = task
        self.state_counts[READY] += 1
        client.tasks[task_id] = None
        function_tasks = self.function_tasks
        function_tasks[message.function_id] = function_tasks.get(message.function_id, 0) + 1
        if message.parent_task_id:
            siblings = self.children.get(message.parent_task_id)
            if siblings is None:
                self.children[message.parent_task_id] = [task_id]
            else:
                siblings.append(task_id)
        if message.dependencies and not self._link_dependencies(task):
            return
        if self._unclaimed and task_id in self._unclaimed:  # made before a restart, and held: answered, not run
            self._set_state(task, WAITING)
            self._claims.append(task)
            return
        if task.pending_dependencies:
            self._set_state(task, WAITING)
        else:
            if task.dependency_ids:
                self._inline_results(task)
            bucket = queue.buckets.get(priority)  # ReadyQueue.push, inlined on the hot path
            if bucket is None:
                bucket = queue.bucket(priority)
            bucket.append(task)
            task.queued = True
            queue.live += 1

    def _new_ready_queue(self, requirement: Resources) -> ReadyQueue:
        queue = self.ready_queues[requirement] = ReadyQueue(requirement)
        queue.eligible = [loads for offer, loads in self.loads.classes.items() if satisfies(offer, requirement)]
        return queue

    def _link_dependencies(self, task: TaskState) -> bool:
        """Wire a graph node to what it waits for; False if it already finished because a dependency is unknown."""
        for dependency_id in task.dependency_ids:
            dependency = self.tasks.get(dependency_id)
            if dependency is not None:
                if dependency.dependents is None:
                    dependency.dependents = [task.task_id]
                else:
                    dependency.dependents.append(task.task_id)
                task.pending_dependencies += 1
                if self._recomputing and dependency_id in self._recomputing:
                    # a lost result being made again: its record stays, and is not counted again when made
                    self._input_record(dependency_id).consumers += 1
                continue
            stored = self.objects.get(dependency_id)
            if stored is not None and stored.kind == ObjectKind.result:
                stored.consumers += 1
                continue
            text = (
                f"dependency {dependency_id.hex()} is unknown: graph nodes must travel in one frame, dependencies first"
            )
            self._finish_locally(task, int(TaskStatus.not_found), b"", text)
            return False
        return True

    def _refuse(self, client: bytes, task_id: bytes, reason: str) -> None:
        self.finished_counts[TaskStatus.refused] += 1
        self._send_message(client, TaskResult(task_id=task_id, status=TaskStatus.refused, error_text=reason))

    def _assign_ready(self) -> None:
        """Hand ready tasks out, highest priority first and oldest first within a priority, each to a least loaded
        worker with a free slot among those meeting its resource requirement, so bursts and rebalanced tasks spread
        over idle workers: O(1) per task however many workers there are (see WorkerLoads), and O(resource classes)
        when workers differ in what they offer. With no resources asked for, one queue: a `popleft` per task."""
        if self._unplaced:
            self._place_actors()
        self.loads.settle()
        if not self.state_counts[READY]:
            return
        queues = self.ready_queues
        if len(queues) == 1:  # nobody asked for resources
            if self._plain.eligible:
                self._place(self._plain)
            return
        self._place_merged(queues)

    def _place_merged(self, queues: Dict[Resources, ReadyQueue]) -> None:
        """Several requirements: their queues merged as one, highest priority first, then the task that became ready
        first, so that a worker eligible for several requirements is handed the best task among them all rather than
        one requirement's before the next one's. A heap holds each queue's first task (a handful of queues); the
        queue on top places tasks until its next one would come after the next queue's first (a whole bucket, when
        requirements do not interleave), so a task costs a comparison, plus a heap push and pop when the lead passes
        to another queue. A queue whose eligible workers are all full leaves the merge."""
        heads: List[Tuple[int, float, int, ReadyQueue]] = []
        for index, queue in enumerate(queues.values()):
            if queue.live and queue.eligible:
                bucket = queue.top()
                if bucket is not None:
                    heads.append((-bucket[0].priority, bucket[0].ready_since, index, queue))
        heapq.heapify(heads)
        while heads:
            _, _, index, queue = heapq.heappop(heads)
            bucket = queue.top()
            if bucket is None:
                continue
            limit = _NEVER  # its tasks go first until one became ready after the next queue's first, same priority
            if heads and heads[0][0] == -bucket[0].priority:
                limit = heads[0][1]
            if self._place_until(queue, bucket, limit):
                bucket = queue.top()
                if bucket is not None:
                    heapq.heappush(heads, (-bucket[0].priority, bucket[0].ready_since, index, queue))

    def _place_until(self, queue: ReadyQueue, bucket, limit: float) -> bool:
        """_place_bucket for the merge: hands out the bucket's tasks that became ready by `limit`; False once its
        eligible workers are all full."""
        eligible = queue.eligible
        placed = 0
        done = True
        while bucket:
            task = bucket[0]
            if not task.queued:
                bucket.popleft()  # canceled or finished while it waited
                continue
            if task.ready_since > limit:
                break
            worker = take_least_loaded(eligible)
            if worker is None:
                done = False
                break
            bucket.popleft()
            task.queued = False
            placed += 1
            if self._rebalanced:
                self._rebalanced.discard(task.task_id)
            worker.assigned[task.task_id] = None
            task.worker = worker.identity
            task.state = ASSIGNED
            self._send(worker.identity, Task.WHICH, task.raw)
            worker.loads.file(worker)
        queue.live -= placed
        counts = self.state_counts
        counts[READY] -= placed
        counts[ASSIGNED] += placed
        return done

    def _place(self, queue: ReadyQueue) -> None:
        while True:
            bucket = queue.top()
            if bucket is None or not self._place_bucket(queue, bucket):
                return

    def _place_bucket(self, queue: ReadyQueue, bucket) -> bool:
        """Hand out the tasks of one priority level of one requirement while eligible workers have room; True if it
        ran out of tasks rather than workers."""
        eligible = queue.eligible
        single = eligible[0] if len(eligible) == 1 else None  # one resource class: its worker loads, as before them
        send = self._send
        task_which = Task.WHICH
        rebalanced = self._rebalanced
        placed = 0
        worker: Optional[WorkerState] = None
        while bucket:
            if worker is None:
                worker = single.take_least_loaded() if single is not None else take_least_loaded(eligible)
                if worker is None:
                    break
            task = bucket.popleft()
            if not task.queued:
                continue  # canceled or finished while it waited
            task.queued = False
            placed += 1
            if rebalanced and task.task_id in rebalanced:
                rebalanced.discard(task.task_id)  # taken from the worker the locality rule would pick: any will do
            elif task.dependency_ids:  # it reads results held on workers: where most of their bytes are, if it has room
                local = self._local_worker(task, eligible)
                # and unless it is busier than the least loaded worker by more than LOCALITY_SLACK tasks: moving an
                # input costs less than a worker idling while another has a queue
                if (
                    local is not None
                    and local is not worker
                    and len(local.assigned) - local.parked <= len(worker.assigned) - worker.parked + LOCALITY_SLACK
                ):
                    local.assigned[task.task_id] = None
                    task.worker = local.identity
                    task.state = ASSIGNED
                    send(local.identity, task_which, task.raw)
                    local.loads.file(local)
                    continue
            worker.assigned[task.task_id] = None
            task.worker = worker.identity
            task.state = ASSIGNED
            send(worker.identity, task_which, task.raw)
            (single or worker.loads).file(worker)
            worker = None
        if worker is not None:
            worker.loads.file(worker)
        queue.live -= placed
        counts = self.state_counts
        counts[READY] -= placed
        counts[ASSIGNED] += placed
        return not bucket

    def _on_task_result(self, worker: WorkerState, message: TaskResult, now: float) -> None:
        task = self.tasks.get(message.task_id)
        if task is None or task.worker != worker.identity:
            return  # a result crossing a cancel or a reassignment: the task was settled already
        worker.row.processed += 1
        status = message.status
        if status == _FAILED and message.memory_limit and self._over_memory_limit(task, worker, message, now):
            return
        if (
            task.max_retries
            and (status == _FAILED or status == _TIMED_OUT)
            and task.failures < task.max_retries
            and task.state == ASSIGNED
        ):
            self._retry(task, worker, now)
            return
        if task.failures or task.retries:
            message.attempts = _attempts(task)  # > 1: this attempt and an earlier one
            self._finish(task, status, message, None)  # re-encoded with its attempts
        else:
            self._finish(task, status, message, message.raw)
        if not worker.assigned:
            self._went_idle = True

    # ---- memory (scheduler/memory.py) --------------------------------------------------------------------------------

    def _function_key(self, function_id: bytes) -> Optional[bytes]:
        stored = self.objects.get(function_id)
        if stored is None or not stored.complete:
            return None
        if stored.memory_key is None:
            stored.memory_key = function_key(stored.chunks)
        return stored.memory_key

    def _memory_hint(self, queue: ReadyQueue, function_id: bytes) -> ReadyQueue:
        """A new task of a function that went past a worker's limit before: into the queue of workers whose limit
        fits what it used, if some have room now; never a requirement nobody meets (it would not run)."""
        key = self._function_key(function_id)
        expected = self.memory_peaks.expected(key) if key is not None else None
        if expected is None or expected < self._smallest_memory_limit:
            return queue  # it fits every worker: placed as any task
        requirement = with_memory(queue.requirement, expected + 1)
        if not any(loads.free_slots for offer, loads in self.loads.classes.items() if satisfies(offer, requirement)):
            return queue
        hinted = self._requeue(queue, requirement)
        return queue if hinted is None else hinted

    def _requeue(self, queue: ReadyQueue, requirement: Resources) -> Optional[ReadyQueue]:
        """The queue of `requirement`, a task's from now on instead of `queue` (member counts moved); None if there
        are too many requirements already."""
        new = self.ready_queues.get(requirement)
        if new is None:
            if len(self.ready_queues) > MAX_REQUIREMENTS:
                return None
            new = self._new_ready_queue(requirement)
        new.members += 1
        if queue.requirement:
            queue.members -= 1
            if not queue.members:
                del self.ready_queues[queue.requirement]
        return new

    def _over_memory_limit(self, task: TaskState, worker: WorkerState, message: TaskResult, now: float) -> bool:
        """The task went past its worker's memory limit: learn it, and run it again on a worker with a larger limit
        (not counted against its retries: each such retry needs a larger limit, so they end) if one is connected;
        else it fails, saying so. True if the task was settled here."""
        limit = message.memory_limit
        key = self._function_key(task.function_id)
        if key is not None:
            self.memory_peaks.learn(key, max(limit, message.peak_memory))
        if task.state != ASSIGNED:
            return False
        requirement = with_memory(task.queue.requirement, limit + 1)
        larger = [loads for offer, loads in self.loads.classes.items() if satisfies(offer, requirement)]
        if any(loads.count > loads.retiring for loads in larger):
            queue = self._requeue(task.queue, requirement)
            if queue is not None:
                task.queue = queue
                task.max_retries += 1  # this attempt is not the task's fault: its retries stay as they were
                self._retry(task, worker, now)
                return True
        how = memory_stopped_by(message.error_text) or "its worker"
        error = MemoryLimitError(limit, message.peak_memory, how, worker.name, "no connected worker has a larger limit")
        message.payload = pickle.dumps(error)
        message.error_text = where_failed(task.task_id.hex(), worker.name) + str(error)
        if task.failures or task.retries:
            message.attempts = _attempts(task)
        self._finish(task, _FAILED, message, None)  # re-encoded with the scheduler's word
        return True

    def _retry(self, task: TaskState, worker: WorkerState, now: float) -> None:
        """The task failed or timed out with retries left: back to the ready tasks (same priority and requirement;
        ahead of those that became ready after it), to run again on any eligible worker."""
        del worker.assigned[task.task_id]
        worker.loads.touch(worker)
        task.worker = None
        task.failures += 1
        self.retried_tasks += 1
        # what the failed attempt submitted from inside is abandoned: the new attempt submits it again
        self._cancel_children(task)
        self._drop_attempt_upload(task)
        self._set_state(task, READY)
        self._hand_back([task])
        logger.debug(
            "task %s failed on %s: attempt %d of %d",
            task.task_id.hex(),
            worker.name,
            task.failures,
            task.max_retries + 1,
        )

    def _drop_attempt_upload(self, task: TaskState) -> None:
        """A task goes back to run again: what its attempt uploaded (a failure's exception, or all or part of a large
        result from a worker that holds nothing) goes, as the next attempt puts its own, maybe held where it runs. Not
        the record of a lost result the task makes again: the next attempt makes it."""
        stored = self.objects.get(task.task_id)
        if stored is not None and self._recomputing.get(task.task_id) is not stored:
            self._free(stored)

    def _on_task_output(self, worker: WorkerState, message: TaskOutput, now: float) -> None:
        """What a task with streamOutput printed: to its client as the worker encoded it, like results."""
        task = self.tasks.get(message.task_id)
        if task is not None and task.worker == worker.identity and task.client in self.clients:
            assert message.raw is not None  # a received message has its bytes
            self._send(task.client, TaskOutput.WHICH, message.raw)

    def _finish_locally(self, task: TaskState, status: int, payload: bytes, error_text: str) -> None:
        """Finish a task the scheduler settles itself (cancel, failed dependency, dead workers)."""
        attempts = _attempts(task)
        message = TaskResult(
            task_id=task.task_id,
            status=status,
            payload=payload,
            error_text=error_text,
            attempts=attempts if attempts > 1 else 0,
        )
        self._finish(task, status, message, None)

    def _finish(self, task: TaskState, status: int, result: TaskResult, raw: Optional[bytes]) -> None:
        """Forget a task, tell its client if it asked, and settle the graph nodes that wait for it."""
        self._forget(task, status, result, raw)
        if task.dependents:
            if status == _SUCCESS:
                self._release_dependents(task)
            else:
                self._fail_dependents(task, status, result)
        if status == _SUCCESS:
            self.children.pop(task.task_id, None)
        else:
            self._cancel_children(task)

    def _cancel_children(self, task: TaskState) -> None:
        for child_id in self.children.pop(task.task_id, ()):
            child = self.tasks.get(child_id)
            if child is not None:
                self._cancel(child)

    def _forget(self, task: TaskState, status: int, result: TaskResult, raw: Optional[bytes]) -> None:
        task_id = task.task_id
        del self.tasks[task_id]
        self.state_counts[task.state] -= 1
        task.state = _DONE
        queue = task.queue
        if task.queued:
            queue.discard(task)
        if queue.requirement:  # the queue of a requirement lives while tasks need it
            queue.members -= 1
            if not queue.members:
                del self.ready_queues[queue.requirement]
        self.finished_counts[status] += 1
        if task.actor is not None:
            self._actor_task_done(task)
        if task.worker is not None:
            worker = self.workers.get(task.worker)
            if worker is not None and worker.assigned.pop(task_id, 0) is None:
                worker.loads.touch(worker)
        if self._rebalanced:
            self._rebalanced.discard(task_id)
        function_tasks = self.function_tasks
        remaining = function_tasks[task.function_id] - 1
        if remaining:
            function_tasks[task.function_id] = remaining
        else:
            del function_tasks[task.function_id]
        client = self.clients.get(task.client)
        if client is not None:
            client.tasks.pop(task_id, None)
            if task.report_result:
                self._send(task.client, TaskResult.WHICH, raw if raw is not None else encode(result))
        # its own result first: held, it keeps the recipes of what it read (lineage) as they are freed just below
        self._settle_result_object(task, status, result, client is not None)
        for dependency_id in task.dependency_ids:
            stored = self.objects.get(dependency_id)
            if stored is not None and stored.consumers:
                stored.consumers -= 1
                self._maybe_free(stored)

    def _settle_result_object(self, task: TaskState, status: int, result: TaskResult, client_present: bool) -> None:
        """Keep a finished task's result as an object while graph consumers or its client still need it."""
        task_id = task.task_id
        if self._recomputing:
            lost = self._recomputing.pop(task_id, None)
            if lost is not None:
                self._recomputed(lost, task, status, result)
                return
        stored = self.objects.get(task_id)
        if status != _SUCCESS:
            if stored is not None:
                self._free(stored)
            return
        if stored is None and result.held_bytes:
            stored = self._hold(task, result.held_bytes)
            if client_present:
                self.clients[task.client].objects[task_id] = None
        elif stored is None and task.dependents:
            stored = StoredObject(task_id, task.client, int(ObjectKind.result), "", 1, len(result.payload))
            stored.chunks.append(result.payload)
            self.objects[task_id] = stored
            stored.recipe = task  # a held result made from it may have to be made again once it is freed
            if client_present:
                self.clients[task.client].objects[task_id] = None
        elif stored is not None and stored.chunk_count:
            stored.recipe = task  # uploaded by a worker that holds nothing: kept here as a small result is
        if stored is None:
            return
        # Only dependents still unfinished will read it: some may have been canceled while this task ran.
        tasks = self.tasks
        stored.consumers = sum(1 for dependent in task.dependents if dependent in tasks) if task.dependents else 0
        # the client fetches a reported in-object result itself and deletes it after
        stored.released = not (result.in_object and task.report_result and client_present)
        self._maybe_free(stored)
        if self.retiring and stored.holder in self.retiring and self.objects.get(task_id) is stored:
            self._hand_over(self.retiring[stored.holder], [task_id])  # made by a worker that is leaving

    def _release_dependents(self, task: TaskState) -> None:
        tasks = self.tasks
        assert task.dependents is not None  # called for tasks that have some
        for dependent_id in task.dependents:
            dependent = tasks.get(dependent_id)
            if dependent is None:
                continue
            dependent.pending_dependencies -= 1
            if dependent.pending_dependencies == 0 and dependent.state == WAITING:
                self._set_state(dependent, READY)
                self._inline_results(dependent)
                dependent.ready_since = self._last_call
                dependent.queue.push(dependent)

    def _inline_results(self, task: TaskState) -> None:
        """A graph node about to be ready: copy the small results it reads into its Task as inline arguments, so that
        its worker runs it without fetching them (a fetch is a round trip and several messages for a few bytes).

        A result goes inline while its copies, one per unfinished consumer, fit _INLINE_RESULT_BYTES together; a
        larger one stays an object, fetched once per worker. An inlined result is no longer this task's to hold."""
        objects = self.objects
        inlined: Dict[bytes, bytes] = {}
        for dependency_id in task.dependency_ids:
            stored = objects.get(dependency_id)
            if (
                stored is not None
                and stored.kind == _KIND_RESULT
                and stored.chunk_count == 1
                and len(stored.chunks) == 1
                and stored.total_size * max(1, stored.consumers) <= _INLINE_RESULT_BYTES
            ):
                inlined[dependency_id] = stored.chunks[0]
        if not inlined:
            return
        message = decode_frame(task.raw)[0]  # our own bytes of a Task that decoded once: the fast reader's layout
        message.args = [
            Argument(kind=_INLINE, name=argument.name, data=inlined[argument.data])
            if argument.kind == _TASK_REF and argument.data in inlined
            else argument
            for argument in message.args
        ]
        message.dependencies = [dependency for dependency in message.dependencies if dependency not in inlined]
        task.raw = encode(message)
        task.dependency_ids = message.dependencies
        for dependency_id in inlined:
            stored = objects[dependency_id]
            if stored.consumers:
                stored.consumers -= 1
                self._maybe_free(stored)

    def _fail_dependents(self, task: TaskState, status: int, result: TaskResult) -> None:
        """Every task downstream of a failed or canceled one finishes the same way, without running.

        Iterative, since a graph may be a chain of 100,000 nodes."""
        assert task.dependents is not None  # called for tasks that have some
        pending = list(task.dependents)
        tasks = self.tasks
        while pending:
            dependent = tasks.get(pending.pop())
            if dependent is None or dependent.state not in (WAITING, READY):
                continue
            copy = TaskResult(
                task_id=dependent.task_id, status=status, payload=result.payload, error_text=result.error_text
            )
            self._forget(dependent, status, copy, None)
            if dependent.dependents:
                pending.extend(dependent.dependents)

    # ---- cancel ------------------------------------------------------------------------------------------------------

    def _on_task_cancel(self, client: ClientState, message: TaskCancel, now: float) -> None:
        for task_id in message.task_ids:
            task = self.tasks.get(task_id)
            if task is None or task.client != client.identity:
                self._send_message(client.identity, TaskResult(task_id=task_id, status=TaskStatus.not_found))
                continue
            task.report_result = True  # the client asked about it, so it hears how it ended
            self._cancel(task)

    def _cancel(self, task: TaskState) -> None:
        if task.state == ASSIGNED:
            assert task.worker is not None  # assigned tasks have one
            self._set_state(task, CANCELING)
            self._send_message(task.worker, TaskCancel(task_ids=[task.task_id]))
        elif task.state in (WAITING, READY):
            self._finish_locally(task, _CANCELED, b"", "")

    # ---- objects -----------------------------------------------------------------------------------------------------

    def _on_object_put(self, state, message: ObjectPut, now: float) -> None:
        object_id = message.object_id
        if self._recomputing and object_id in self._recomputing and type(state) is WorkerState:
            self._remade_chunk(state, message)
            return
        stored = self.objects.get(object_id)
        if stored is not None and stored.holder == state.identity and stored.chunk_count == 0:
            self._relay_chunk(stored, message)  # a held result its holder uploads for peers that asked us
            return
        if stored is None:
            if type(state) is WorkerState and message.kind == ObjectKind.result:
                task = self.tasks.get(object_id)
                if task is None or task.client not in self.clients:
                    # settled or freed meanwhile, or its client left (it is being canceled): the rest of an upload
                    # under way then, not the worker's fault
                    return
            if message.chunk_index != 0 or (message.chunk_count < 1 and not message.held_by_sender):
                self._misuse(
                    state.identity,
                    state,
                    f"ObjectPut chunk {message.chunk_index} of {message.chunk_count} for an unknown object",
                    now,
                )
                return
            owner = state.identity
            if isinstance(state, WorkerState):
                task = self.tasks.get(object_id)
                if task is None or message.kind != ObjectKind.result:
                    return  # a result for a task that was settled meanwhile
                owner = task.client
            client = self.clients.get(owner)
            if client is None:
                return
            if len(client.objects) >= self.settings.max_objects_per_client:
                self.peer_warnings.log(
                    owner,
                    now,
                    "client %s holds %d objects, the limit: object dropped",
                    client.name,
                    len(client.objects),
                )
                return
            if message.held_by_sender:
                if state is not client or not client.data_address or message.chunk_count:
                    self._misuse(state.identity, state, "ObjectPut.heldBySender from a peer that serves no data", now)
                    return
                stored = StoredObject(object_id, owner, message.kind, message.name, 0, message.total_size)
                stored.holder = owner  # the client serves it: the scheduler keeps where and how large, not its bytes
            else:
                chunks = message.chunk_count
                stored = StoredObject(object_id, owner, message.kind, message.name, chunks, message.total_size)
            self.objects[object_id] = stored
            client.objects[object_id] = None
            if message.kind == ObjectKind.function and message.name:
                self.function_names[object_id] = message.name
            if message.held_by_sender:
                return
        elif stored.complete:
            return  # the same content id again: objects are immutable, the first copy stands
        if message.chunk_index != len(stored.chunks):
            self._misuse(state.identity, state, f"ObjectPut chunk {message.chunk_index} out of order", now)
            return
        stored.chunks.append(message.payload)

    def _on_data_keys(self, state, message: DataKeys, now: float) -> None:
        """With CurveZMQ: the public key a peer's data address serves under, the answer to the DataKeys it was sent.
        Requesters are told it with the peer's address (ObjectResponse.holderPublicKey)."""
        if self._data_keys is None or not state.data_address or len(message.public_key) != 32:
            self._misuse(state.identity, state, "DataKeys without CurveZMQ, a data address or a 32-byte key", now)
            return
        state.data_key = message.public_key

    def _on_object_request(self, state, message: ObjectRequest, now: float) -> None:
        peer = state.identity
        worker = type(state) is WorkerState
        # with CurveZMQ, a requester that sent no DataKeys (an older peer) could not make the handshake with the holder
        relay = message.via_scheduler or not state.fetches_from_holders
        if self._data_keys is not None and not state.data_key:
            relay = True
        for object_id in message.object_ids:
            stored = self.objects.get(object_id)
            if stored is None or not stored.complete:
                self._send_message(peer, ObjectResponse(object_id=object_id, found=False))
                continue
            if worker:  # a worker asks once for an object it keeps: a list, not a set, and a rare duplicate
                stored.holders += (peer,)
            if stored.chunk_count == 0:
                self._answer_held(stored, peer, relay)
                continue
            for index, chunk in enumerate(stored.chunks):
                self._send_message(
                    peer,
                    ObjectResponse(
                        object_id=object_id,
                        found=True,
                        kind=stored.kind,
                        name=stored.name,
                        payload=chunk,
                        chunk_index=index,
                        chunk_count=stored.chunk_count,
                        total_size=stored.total_size,
                    ),
                )

    def _on_object_delete(self, client: ClientState, message: ObjectDelete, now: float) -> None:
        for object_id in message.object_ids:
            stored = self.objects.get(object_id)
            if stored is not None and stored.owner == client.identity:
                stored.released = True
                self._maybe_free(stored)

    def _maybe_free(self, stored: StoredObject) -> None:
        if stored.released and stored.consumers == 0:
            self._free(stored)

    def _free(self, stored: StoredObject) -> None:
        """Forget an object, and tell the workers it was sent to: they would keep it until their retention ran out."""
        self.objects.pop(stored.object_id, None)
        client = self.clients.get(stored.owner)
        if client is not None:
            client.objects.pop(stored.object_id, None)
        if stored.holder is not None:
            holding = self.workers.get(stored.holder)
            if holding is not None and holding.held.pop(stored.object_id, 0) is None:
                holding.held_bytes -= stored.total_size
                if stored.object_id in holding.handing:
                    self._end_handoff(holding, stored.object_id)
        if stored.producer is not None:
            if stored.object_id in self._lineage_refs:
                self.lineage[stored.object_id] = stored.producer  # held results made from it may have to be remade
            else:
                self._unref_lineage(stored.producer.dependency_ids)
        elif stored.recipe is not None and stored.object_id in self._lineage_refs:
            self._keep_lineage(stored.object_id, stored.recipe)
        if stored.waiting:  # a worker whose task needs it: the task fails there, as for an object deleted before
            self._answer_lost(stored, "it was freed")
        if stored.holders:
            delete = ObjectDelete(object_ids=[stored.object_id])
            for holder in set(stored.holders):
                if holder in self.workers:
                    self._send_message(holder, delete)

    def _on_holder_response(self, worker: WorkerState, message: ObjectResponse, now: float) -> None:
        """A worker asked to upload a result answers it does not hold it (any more); or one asked to take a retiring
        worker's result says whether it does now."""
        stored = self.objects.get(message.object_id)
        if stored is None or stored.holder != worker.identity:
            self._on_handoff_answer(worker, message)
        elif not message.found:
            del worker.held[stored.object_id]
            worker.held_bytes -= stored.total_size
            if stored.object_id in worker.handing:
                self._end_handoff(worker, stored.object_id)
            self._lost_held(stored, f"worker {worker.name} no longer held it")

    def _on_keeper_response(self, client: ClientState, message: ObjectResponse, now: float) -> None:
        """A client asked to upload an object it keeps answers it no longer has it (it deleted it meanwhile)."""
        stored = self.objects.get(message.object_id)
        if stored is not None and stored.holder == client.identity and not message.found:
            self._answer_lost(stored, f"client {client.name} no longer has it")

    # ---- balancing ---------------------------------------------------------------------------------------------------

    def _balance(self) -> None:
        """Move queued tasks from the busiest workers to idle ones; running tasks never move. Not into a resource
        class while ready tasks wait that its workers could take (those go first); ready tasks that wait for other
        workers (full ones of another class, or resources nobody offers) do not stop it.

        Idle workers of a resource class take tasks from workers whose offer theirs covers (their own class, and for
        instance a gpu worker from workers offering nothing): every task such a worker holds can run on them. The
        tasks come back through placement, which gives each to a least loaded worker meeting its requirement, never
        to one lacking it (whoever left meanwhile)."""
        loads = self.loads
        loads.settle()
        classes = loads.classes
        waiting = [queue.eligible for queue in self.ready_queues.values() if queue.live and queue.eligible]
        for offer, receiver in classes.items():
            if receiver.idle() and not any(receiver in eligible for eligible in waiting):
                if len(classes) == 1:
                    self._balance_into(receiver, [receiver])
                else:
                    self._balance_into(receiver, [donor for o, donor in classes.items() if satisfies(offer, o)])

    def _balance_into(self, receiver: WorkerLoads, donors: List[WorkerLoads]) -> None:
        """Asks the busiest donors first and stops once the receiver's idle workers would get their fair share, so it
        touches only the workers it asks. Retiring workers are neither (they have no free slot, so never count as
        idle, and were asked for all they hold)."""
        retiring = [worker for worker in self.retiring.values() if worker.loads in donors] if self.retiring else []
        # the idle workers of other classes share none of these tasks: they are left out of the fair share
        pool = sum(donor.count - (donor.idle() if donor is not receiver else 0) for donor in donors) - len(retiring)
        if pool < 2:
            return
        total_load = sum(donor.total_load for donor in donors) - sum(worker.level for worker in retiring)
        fair_share = max(1, total_load // pool)
        wanted = receiver.idle() * fair_share
        lowest = max(2, fair_share + 1)  # parked tasks neither run nor move
        if len(donors) == 1:
            busiest: Iterable[WorkerState] = donors[0].busiest(lowest)
        else:  # few classes; only the workers above the fair share are walked, as for one
            busiest = sorted((w for donor in donors for w in donor.busiest(lowest)), key=_level, reverse=True)
        for worker in busiest:
            if worker.retire_deadline is not None:
                continue
            surplus = worker.level - fair_share
            if not worker.balance_pending:
                worker.balance_pending = True
                self._send_message(worker.identity, BalanceRequest(count=surplus))
            wanted -= surplus
            if wanted <= 0:
                return

    def _on_balance_response(self, worker: WorkerState, message: BalanceResponse, now: float) -> None:
        worker.balance_pending = False
        moved: List[TaskState] = []
        for task_id in message.task_ids:
            task = self.tasks.get(task_id)
            if task is None or task.worker != worker.identity:
                continue
            del worker.assigned[task_id]
            task.worker = None
            if task.state == CANCELING:
                self._finish_locally(task, _CANCELED, b"", "")
                continue
            self._drop_attempt_upload(task)
            self._set_state(task, READY)
            moved.append(task)
            if task.dependency_ids:
                self._rebalanced.add(task_id)
        worker.loads.file(worker)
        if moved:
            self._hand_back(moved)
            logger.debug("balanced %d task(s) away from %s", len(moved), worker.name)

    def _hand_back(self, tasks: List[TaskState]) -> None:
        """Queue tasks a worker no longer holds (it left, retired, failed them with retries left, or balancing took
        them) where they belong: by when each first became ready, so the first in line of their priority is still the
        one that has waited longest (ReadyQueue.hand_back)."""
        tasks = [task for task in tasks if task.state == READY and self.tasks.get(task.task_id) is task]
        if not tasks:
            return
        tasks.sort(key=_ready_since)  # stable; in the order they were assigned, which is already this one
        first = tasks[0].queue
        if all(task.queue is first for task in tasks):
            first.hand_back(tasks)
            return
        by_queue: Dict[int, List[TaskState]] = {}
        for task in tasks:
            by_queue.setdefault(id(task.queue), []).append(task)
        for group in by_queue.values():
            group[0].queue.hand_back(group)
