"""Internal: the scheduler's side of actors, as part of its sans-IO core (core.py).

An actor's tasks carry its id (Task.actorId). The one that creates it (createsActor) is placed on a worker with a free
actor slot (Hello.actorSlots) among those offering its resources: the one hosting the fewest actors, then the least
loaded. With none free it waits, and the actor's calls wait behind it. From then on every call goes straight to that
worker, in the order received: no ready queue, no balancing, no slot of the worker's task capacity. Actor tasks are
never retried; they run at most once.

The actor ends when its worker says it ended (ActorRelease: freed, its process died or went past the memory limit,
its constructor raised), or when its worker is removed (died, retired past its deadline): its unanswered calls, and
any later ones, are answered actorLost with the reason. Its owner, the client that created it, frees it with
ActorRelease, and by leaving.

After a scheduler restart, workers registering again list the actors they host (Hello.actors), and clients the actors
they own. Calls for an actor nobody reported yet wait for a worker to report it, for ADOPTION_SECONDS at most; an
actor reported by a worker and claimed by no client within as long is freed.

Actors is a part of SchedulerCore (a base class of it): the attributes it reads are the core's, declared below.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional

from scaler.protocol import ActorRelease, ActorStatus, Task, TaskResult, TaskStatus
from scaler.rate_limit import LimitedLog
from scaler.scheduler.placement import Placement
from scaler.scheduler.ready import ReadyQueue
from scaler.scheduler.resources import Resources, normalize_resources, satisfies
from scaler.scheduler.state import ASSIGNED, CANCELING, WAITING, ClientState, TaskState, WorkerState

logger = logging.getLogger("scaler.scheduler.core")

ADOPTION_SECONDS = 60.0  # after a restart: how long calls wait for an actor's worker, and an actor for its owner
ENDED_ACTORS_KEPT = 4096  # why recent actors ended, for the calls that come after
_ACTOR_LOST = int(TaskStatus.actor_lost)


class SchedulerActor:
    __slots__ = (
        "actor_id", "owner", "name", "worker", "requirement", "creation", "held_back", "pending", "calls", "released"
    )  # fmt: skip

    def __init__(self, actor_id: bytes, owner: Optional[bytes], requirement: Resources = ()) -> None:
        self.actor_id = actor_id
        self.owner = owner  # the client that created it (None: after a restart, until it says so)
        self.name = ""  # its class's qualified name, for the monitor
        self.worker: Optional[bytes] = None  # where it lives; None while it waits for a slot (or, after a restart,
        self.requirement = requirement  # for a worker to report it): the resources its creation asked for
        self.creation = b""  # the id of the task that creates it (not one of its calls)
        self.held_back: Dict[bytes, TaskState] = {}  # its tasks received before it had a worker, in arrival order
        self.pending: Dict[bytes, None] = {}  # its tasks sent to its worker, unanswered
        self.calls = 0  # method calls answered
        self.released = False  # freed by its owner: the worker ends it once the calls sent before have run


class Actors:
    # the core's state this part reads and changes (core.py makes them)
    tasks: Dict[bytes, TaskState]
    workers: Dict[bytes, WorkerState]
    clients: Dict[bytes, ClientState]
    retiring: Dict[bytes, WorkerState]
    state_counts: List[int]
    function_tasks: Dict[bytes, int]
    function_names: Dict[bytes, str]
    children: Dict[bytes, List[bytes]]
    loads: Placement
    peer_events: LimitedLog
    _plain: ReadyQueue
    _last_call: float
    _send: Callable[[bytes, int, bytes], None]
    _send_message: Callable[[bytes, Any], None]
    _set_state: Callable[[TaskState, int], None]
    _refuse: Callable[[bytes, bytes, str], None]
    _finish_locally: Callable[[TaskState, int, bytes, str], None]

    def _init_actors(self) -> None:
        self.actors: Dict[bytes, SchedulerActor] = {}
        self._unplaced: Dict[bytes, SchedulerActor] = {}  # actors whose creation waits for a free slot
        self._unreported: Dict[bytes, float] = {}  # after a restart: actor id -> until when it may be reported
        self._ended_actors: Dict[bytes, str] = {}  # actor id -> why it ended, the most recent ENDED_ACTORS_KEPT

    # ---- tasks ---------------------------------------------------------------------------------------------------

    def _on_actor_task(self, client: ClientState, message: Task, raw: bytes, now: float) -> None:
        """An actor's creation or call: known as a task, held back or sent to the actor's worker at once."""
        actor_id = message.actor_id
        task_id = message.task_id
        actor = self.actors.get(actor_id)
        if message.dependencies:
            self._refuse(client.identity, task_id, "an actor's tasks take no futures of other tasks as arguments")
            return
        if message.creates_actor and actor is None:
            requirement, error = normalize_resources(message.resources or [])
            if requirement is None:
                self._refuse(client.identity, task_id, f"bad resources: {error}")
                return
            actor = self.actors[actor_id] = SchedulerActor(actor_id, client.identity, requirement)
            actor.name = self.function_names.get(message.function_id, "").removesuffix(".__init__")
            actor.creation = task_id
            client.actors[actor_id] = None
            self._unplaced[actor_id] = actor
        elif actor is None:
            ended = self._ended_actors.get(actor_id)
            if ended is not None:
                self._refuse_lost(client.identity, task_id, f"actor {actor_id.hex()} is gone: {ended}")
                return
            # unknown: after a restart, a call may come before the worker hosting its actor registered again
            actor = self.actors[actor_id] = SchedulerActor(actor_id, None)
            self._unreported[actor_id] = now + ADOPTION_SECONDS
        elif actor.released:
            self._refuse_lost(client.identity, task_id, f"actor {actor_id.hex()} is gone: it was freed")
            return
        task = TaskState(
            task_id, client.identity, raw, message.function_id, message.report_result, message.parent_task_id, [],
            now, self._plain, 0, 0,
        )  # fmt: skip
        task.actor = actor
        self.tasks[task_id] = task
        client.tasks[task_id] = None
        self.function_tasks[message.function_id] = self.function_tasks.get(message.function_id, 0) + 1
        if message.parent_task_id:  # canceled with its parent, as any nested task
            self.children.setdefault(message.parent_task_id, []).append(task_id)
        task.state = WAITING
        self.state_counts[WAITING] += 1
        if actor.worker is None:
            actor.held_back[task_id] = task
        else:
            self._send_actor_task(actor, task)

    def _refuse_lost(self, client: bytes, task_id: bytes, text: str) -> None:
        self._send_message(client, TaskResult(task_id=task_id, status=_ACTOR_LOST, error_text=text))

    def _send_actor_task(self, actor: SchedulerActor, task: TaskState) -> None:
        assert actor.worker is not None  # placed
        self._set_state(task, ASSIGNED)
        task.worker = actor.worker
        actor.pending[task.task_id] = None
        self._send(actor.worker, Task.WHICH, task.raw)

    def _actor_task_done(self, task: TaskState) -> None:
        """From the core's _forget: an actor's task is answered (or canceled before it was sent)."""
        actor = task.actor
        if actor.pending.pop(task.task_id, 0) is None:
            if task.task_id != actor.creation:
                actor.calls += 1
            worker = self.workers.get(task.worker) if task.worker is not None else None
            if worker is not None:
                self.loads.note(worker)  # its row counts what it processed
        elif actor.held_back.pop(task.task_id, None) is not None and task.task_id == actor.creation:
            self._end_actor(actor, "its creation was canceled before it ran")

    # ---- placement -----------------------------------------------------------------------------------------------

    def _place_actors(self) -> None:
        """Each actor waiting for a slot goes to the eligible worker hosting the fewest actors, then the least loaded.
        O(workers) per actor created: creations are rare next to tasks, which this never touches."""
        for actor in list(self._unplaced.values()):
            best: Optional[WorkerState] = None
            for worker in self.workers.values():
                if (
                    worker.retire_deadline is None
                    and len(worker.actors) < worker.actor_slots
                    and satisfies(worker.loads.offer, actor.requirement)
                    and (
                        best is None
                        or (len(worker.actors), len(worker.assigned)) < (len(best.actors), len(best.assigned))
                    )
                ):
                    best = worker
            if best is None:
                continue
            del self._unplaced[actor.actor_id]
            self._host(actor, best)

    def _host(self, actor: SchedulerActor, worker: WorkerState) -> None:
        actor.worker = worker.identity
        worker.actors[actor.actor_id] = None
        worker.row.actors = len(worker.actors)
        self.loads.note(worker)
        held_back = list(actor.held_back.values())
        actor.held_back.clear()
        for task in held_back:
            self._send_actor_task(actor, task)
        if actor.released:  # freed while it waited for a slot: after the calls made before
            self._send_message(worker.identity, ActorRelease(actor_ids=[actor.actor_id], reason="its owner freed it"))

    # ---- ends ----------------------------------------------------------------------------------------------------

    def _end_actor(self, actor: SchedulerActor, why: str) -> None:
        """Forget the actor; its unanswered tasks are answered actorLost, and so are later ones."""
        actor_id = actor.actor_id
        if self.actors.pop(actor_id, None) is None:
            return
        self._unplaced.pop(actor_id, None)
        self._unreported.pop(actor_id, None)
        if actor.worker is not None:
            worker = self.workers.get(actor.worker)
            if worker is not None and worker.actors.pop(actor_id, 0) is None:
                worker.row.actors = len(worker.actors)
                self.loads.note(worker)
        if actor.owner is not None:
            owner = self.clients.get(actor.owner)
            if owner is not None:
                owner.actors.pop(actor_id, None)
        text = f"actor {actor_id.hex()} is gone: {why}"
        for task_id in [*actor.held_back, *actor.pending]:
            task = self.tasks.get(task_id)
            if task is not None:
                self._finish_locally(task, _ACTOR_LOST, b"", text)
        self._ended_actors[actor_id] = why
        if len(self._ended_actors) > ENDED_ACTORS_KEPT:
            del self._ended_actors[next(iter(self._ended_actors))]

    def _release_actor(self, actor: SchedulerActor, why: str) -> None:
        """Its owner frees it: its worker ends it once the calls sent before have run; one not placed ends now."""
        if actor.released:
            return
        actor.released = True
        if actor.worker is not None:
            self._send_message(actor.worker, ActorRelease(actor_ids=[actor.actor_id], reason=why))
        elif actor.actor_id not in self._unplaced:  # not hosted (a restart): nothing ran, nothing will
            self._end_actor(actor, why)
        # else its creation and the calls after it run once placed, then it is freed (_host)

    def _on_actor_release(self, state: Any, message: ActorRelease, now: float) -> None:
        """From a client: free actors it owns. From a worker: actors it hosted are gone."""
        for actor_id in message.actor_ids:
            actor = self.actors.get(actor_id)
            if actor is None:
                continue
            if type(state) is WorkerState:
                if actor.worker == state.identity:
                    self._end_actor(actor, message.reason or "its worker ended it")
            elif actor.owner == state.identity:
                self._release_actor(actor, message.reason or "its owner freed it")

    def _lose_worker_actors(self, worker: WorkerState, why: str) -> None:
        for actor_id in list(worker.actors):
            self._end_actor(self.actors[actor_id], why)

    def _release_client_actors(self, client: ClientState) -> None:
        for actor_id in list(client.actors):
            actor = self.actors.get(actor_id)
            if actor is not None:
                self._release_actor(actor, f"its client {client.name} left")

    # ---- after a restart -----------------------------------------------------------------------------------------

    def _adopt_actors(self, worker: WorkerState, actor_ids: List[bytes], now: float) -> None:
        """A worker registering again hosts these actors: their calls go there; unclaimed, they are freed later."""
        for actor_id in actor_ids:
            actor = self.actors.get(actor_id)
            if actor is None:
                actor = self.actors[actor_id] = SchedulerActor(actor_id, None)
                self._unreported[actor_id] = now + ADOPTION_SECONDS  # for its owner to claim it
            elif actor.worker is not None or actor_id in self._unplaced:
                self._send_message(worker.identity, ActorRelease(actor_ids=[actor_id], reason="hosted elsewhere"))
                continue
            if actor.owner is not None:
                self._unreported.pop(actor_id, None)
            self._host(actor, worker)
        self.peer_events.log(worker.identity, now, "worker %s hosts %d actor(s) still", worker.name, len(actor_ids))

    def _claim_actors(self, client: ClientState, actor_ids: List[bytes], now: float) -> None:
        """A client registering again owns these actors."""
        for actor_id in actor_ids:
            actor = self.actors.get(actor_id)
            if actor is None:
                actor = self.actors[actor_id] = SchedulerActor(actor_id, client.identity)
                self._unreported[actor_id] = now + ADOPTION_SECONDS  # for its worker to report it
            elif actor.owner is None:
                actor.owner = client.identity
                if actor.worker is not None:
                    self._unreported.pop(actor_id, None)
            client.actors[actor_id] = None

    def _expire_unreported(self, now: float) -> None:
        for actor_id, deadline in list(self._unreported.items()):
            if deadline > now:
                continue
            actor = self.actors[actor_id]
            if actor.worker is None:
                self._end_actor(actor, f"no worker reported it within {ADOPTION_SECONDS:g}s of a scheduler restart")
            else:
                del self._unreported[actor_id]
                self._release_actor(actor, f"no client claimed it within {ADOPTION_SECONDS:g}s of a scheduler restart")

    # ---- monitoring and invariants -------------------------------------------------------------------------------

    def actor_statuses(self) -> List[ActorStatus]:
        rows = []
        for actor in self.actors.values():
            worker = self.workers.get(actor.worker) if actor.worker is not None else None
            rows.append(
                ActorStatus(
                    actor_id=actor.actor_id,
                    name=actor.name,
                    worker=worker.name if worker is not None else "",
                    pending=len(actor.pending) + len(actor.held_back),
                    calls=actor.calls,
                )
            )
        return rows

    def _validate_actors(self) -> None:
        for actor_id, actor in self.actors.items():
            assert actor.actor_id == actor_id
            if actor.worker is not None:
                assert actor_id in self.workers[actor.worker].actors, "an actor's worker does not list it"
                assert not actor.held_back, "a placed actor holds tasks back"
            else:
                assert actor_id in self._unplaced or actor_id in self._unreported, "an actor waits for nothing"
            for task_id in actor.pending:
                task = self.tasks[task_id]
                assert task.actor is actor and task.state in (ASSIGNED, CANCELING) and task.worker == actor.worker
            for task_id, task in actor.held_back.items():
                assert self.tasks.get(task_id) is task and task.actor is actor and task.state == WAITING
            if actor.owner is not None and actor.owner in self.clients:
                assert actor_id in self.clients[actor.owner].actors
        for worker in self.workers.values():
            assert all(self.actors[actor_id].worker == worker.identity for actor_id in worker.actors)
            assert worker.row.actors == len(worker.actors)
        assert all(self.actors[actor_id].worker is None for actor_id in self._unplaced)
