"""Internal: the worker's side of actors, as part of its sans-IO core (core.py).

An actor is an instance kept in a process of its own (docs/guide/worker-state.md, "Actors"). The task that creates it
(Task.createsActor) makes the worker start a processor for it, beside the one running its tasks; that processor runs
the actor's tasks only, one at a time, in the order they arrived: the creation first, then its method calls (the
functions of scaler/actor_calls.py, to the processor like any task's). A call waits in the actor's line until the
objects it needs are here and every call before it was handed; up to ACTOR_PIPE calls are handed ahead, as many as a
task processor is (fewer would send results back a few at a time, at several times the cost per call: bench/peers/
actors.py), and a cancel still drops those not started. A running call is never stopped: that would kill the actor's
state.

The actor ends when the scheduler frees it (ActorRelease: once the calls sent before it have run), when its
constructor raises, or when its process dies or goes past the memory limit. Its unanswered calls are answered
actorLost, and the scheduler is told (ActorRelease, with the reason).

A lost scheduler does not end an actor. Calls handed to its process run on; calls not handed yet are forgotten (they
never ran: their clients resubmit them). Each actor keeps its last ACTOR_ANSWERS_KEPT answers (at most
ANSWER_BYTES_KEPT of them), so that a call resubmitted to a restarted scheduler after it ran here is answered again,
not run twice; one still running is answered once it ends. A call that ran and whose answer is no longer kept is
not run again either: an actor call's task id names its caller (its first CALLER_BYTES) and carries its sequence
number (the rest, little-endian), increasing in the order that caller sends calls to the actor (docs/protocol.md,
"Actors"). Each actor keeps, for its CALLERS_KEPT most recent callers, the highest number it ran, and answers a call
at or below it with ActorAnswerLostError.

ActorHosting is a part of WorkerCore (a base class of it): the attributes it reads are the core's, declared below.
"""

from __future__ import annotations

import logging
import pickle
from collections import OrderedDict, deque
from typing import Any, Callable, Deque, Dict, List, Set, Tuple

from scaler import config
from scaler.errors import ActorAnswerLostError
from scaler.protocol import ActorRelease, Task, TaskResult, TaskStatus
from scaler.rate_limit import LimitedLog
from scaler.worker.instructions import DropTasks, HandTasks
from scaler.worker.objects import ObjectCache
from scaler.worker.processor_messages import ProcessorResult, ProcessorTask
from scaler.worker.settings import WorkerSettings
from scaler.worker.state import ACTOR_PROCESSOR, CANCELED, CONNECTED, HANDED, READY, WAITING, ProcessorState, WorkerTask

logger = logging.getLogger("scaler.worker.core")

ACTOR_PIPE = config.DEFAULT_PREFETCH_TASKS  # calls handed ahead to an actor's process
ACTOR_ANSWERS_KEPT = 4 * ACTOR_PIPE  # answers each actor keeps for calls resubmitted after a scheduler restart...
ANSWER_BYTES_KEPT = 64 * 1024 * 1024  # ...and their bytes at most (inline answers, each under the inline limit)
ENDED_ACTORS_KEPT = 1024  # why recent actors ended, for calls that arrive after
CALLER_BYTES = 8  # an actor call's task id: its caller, then its sequence number (little-endian)
CALLERS_KEPT = 4096  # callers whose highest call run each actor keeps (a task's client is a caller of its own)
_ACTOR_LOST = TaskStatus.actor_lost
_SUCCESS = TaskStatus.success
_FAILED = TaskStatus.failed
_NONE = pickle.dumps(None)  # what a constructor call returns (actor_calls.ActorConstructor)


class WorkerActor:
    """An actor hosted here: its process, its calls waiting to be handed, its recent answers."""

    __slots__ = ("actor_id", "processor", "waiting", "answered", "answered_bytes", "ran", "releasing", "broken")

    def __init__(self, actor_id: bytes, processor: ProcessorState) -> None:
        self.actor_id = actor_id
        self.processor = processor
        self.waiting: Deque[WorkerTask] = deque()  # received, not handed yet, in arrival order
        self.answered: OrderedDict[bytes, Tuple[TaskResult, int]] = OrderedDict()  # task id -> (answer, its bytes)
        self.answered_bytes = 0
        self.ran: OrderedDict[bytes, int] = OrderedDict()  # caller -> the highest sequence number run, recent last
        self.releasing = False  # the scheduler freed it: it ends once the calls before have run
        self.broken = ""  # why it cannot go on (its constructor raised): it ends with the report that said so


class ActorHosting:
    # the core's state this part reads and changes (core.py makes them)
    settings: WorkerSettings
    name: str
    tasks: Dict[bytes, WorkerTask]
    processors: Dict[int, ProcessorState]
    cache: ObjectCache
    connection: int
    warnings: LimitedLog
    _now: float
    _outgoing: List[Tuple[object, int]]
    _instructions: List[object]
    _start_processor: Callable[[], ProcessorState]
    _remove_processor: Callable[[ProcessorState, bool], None]
    _take_from_pipe: Callable[[ProcessorState, WorkerTask], None]
    _processor_task: Callable[[WorkerTask, ProcessorState, List[Any]], ProcessorTask]
    _answer: Callable[..., None]
    _send_result: Callable[..., None]
    _forget: Callable[[WorkerTask, str], None]
    _new_task: Callable[[Task], WorkerTask]

    def _init_actors(self) -> None:
        self.actors: Dict[bytes, WorkerActor] = {}
        self.actor_processors: Dict[int, WorkerActor] = {}
        self._ended_actors: Dict[bytes, str] = {}  # actor id -> why it ended, the most recent ENDED_ACTORS_KEPT

    def _on_actor_task(self, message: Task) -> None:
        task_id = message.task_id
        actor_id = message.actor_id
        actor = self.actors.get(actor_id)
        if actor is not None:
            answered = actor.answered.get(task_id)
            if answered is not None:  # resubmitted after it ran (a scheduler restart): its answer again
                self._outgoing.append(answered)
                return
        if task_id in self.tasks:
            return  # resubmitted while it runs: answered when it ends
        if actor is not None and not message.creates_actor and len(task_id) > CALLER_BYTES:
            ran = actor.ran.get(task_id[:CALLER_BYTES])
            if ran is not None and int.from_bytes(task_id[CALLER_BYTES:], "little") <= ran:
                self._answer_lost(task_id)  # it ran before the restart (calls of a caller run in its order)
                return
        if message.creates_actor:
            if actor is not None:  # its creation resubmitted after a restart, its answer no longer kept: it was made
                self._outgoing.append((TaskResult(task_id=task_id, status=_SUCCESS, payload=_NONE), len(_NONE)))
                return
            if len(self.actors) >= self.settings.actor_slots:
                self._lost(task_id, f"this worker hosts {len(self.actors)} actors already (--actor-slots)")
                return
            processor = self._start_processor()
            processor.role = ACTOR_PROCESSOR
            actor = self.actors[actor_id] = WorkerActor(actor_id, processor)
            self.actor_processors[processor.number] = actor
            logger.info("%s: actor %s starts in processor %d", self.name, actor_id.hex(), processor.number)
        elif actor is None or actor.releasing or actor.broken:
            why = self._ended_actors.get(actor_id) or (actor.broken if actor is not None else "") or "it was freed"
            self._lost(task_id, f"actor {actor_id.hex()} is gone: {why}")
            return
        actor.waiting.append(self._new_task(message))

    def _lost(self, task_id: bytes, text: str) -> None:
        self._outgoing.append((TaskResult(task_id=task_id, status=_ACTOR_LOST, error_text=text), len(text)))

    def _answer_lost(self, task_id: bytes) -> None:
        text = (
            f"actor call {task_id.hex()} ran before a scheduler restart, and its answer was lost with the scheduler "
            "(this worker no longer keeps it; it knows the call ran because it ran one of the same caller numbered as "
            "high or higher): an actor call is never run twice"
        )
        payload = pickle.dumps(ActorAnswerLostError(text))
        answer = TaskResult(task_id=task_id, status=_FAILED, payload=payload, error_text=text)
        self._outgoing.append((answer, len(payload)))

    def _ran(self, actor: WorkerActor, task_id: bytes) -> None:
        """An actor's process ran this call: its caller's calls up to it never run again."""
        if len(task_id) <= CALLER_BYTES:
            return
        ran = actor.ran
        caller = task_id[:CALLER_BYTES]
        ran[caller] = max(ran.pop(caller, 0), int.from_bytes(task_id[CALLER_BYTES:], "little"))
        if len(ran) > CALLERS_KEPT:
            ran.popitem(last=False)

    def _dispatch_actors(self) -> None:
        """Hand each actor's calls to its process, in order, up to ACTOR_PIPE ahead; end those freed and idle."""
        for actor in list(self.actors.values()):
            processor = actor.processor
            waiting = actor.waiting
            handed: List[ProcessorTask] = []
            shared: List[Any] = []
            pipe = processor.pipe
            while waiting and len(pipe) < ACTOR_PIPE and waiting[0].state == READY:
                task = waiting.popleft()
                task.move("dispatch", HANDED)
                processor.handed_count += 1
                task.seq = processor.handed_count
                task.processor = processor
                pipe[task.task_id] = task
                handed.append(self._processor_task(task, processor, shared))
            if handed:
                self._instructions.append(HandTasks(processor.number, handed, shared))
            if actor.releasing and not waiting and not pipe:
                self._end_actor(actor, "it was freed")

    def _actor_object_arrived(self, object_id: bytes) -> None:
        for actor in self.actors.values():
            for task in actor.waiting:
                if object_id in task.missing:
                    task.missing.discard(object_id)
                    if not task.missing:
                        task.move("object arrived", READY)

    def _actor_object_unavailable(self, object_id: bytes, answer: Callable[[WorkerTask], None]) -> None:
        for actor in self.actors.values():
            for task in [task for task in actor.waiting if object_id in task.missing]:
                actor.waiting.remove(task)
                answer(task)

    def _on_actor_results(self, processor: ProcessorState, results: List[ProcessorResult]) -> None:
        """A report of an actor's process: each result answers its call; a constructor that raised ends the actor."""
        actor = self.actor_processors[processor.number]
        pipe = processor.pipe
        for result in results:
            task_id, succeeded, payload, error_text = result[:4]
            task = pipe.pop(task_id, None)
            if task is None:
                continue
            self._ran(actor, task_id)
            task.processor = None
            if task.state == CANCELED:
                processor.canceled -= 1
                self._forget(task, "result")
                continue
            if actor.broken:  # after a constructor that raised: the call found no instance
                self._answer(task, "actor lost", _ACTOR_LOST, b"", f"actor {actor.actor_id.hex()}: {actor.broken}")
                continue
            if task.task.creates_actor and not succeeded:
                first_line = (error_text.strip().splitlines() or ["an exception"])[-1]
                actor.broken = f"its constructor raised {first_line}"
            self._answer(task, "result", _SUCCESS if succeeded else _FAILED, payload, error_text, result)
        if actor.broken:
            self._end_actor(actor, actor.broken)

    def _actor_answered(self, task: WorkerTask, result: TaskResult, size: int) -> bool:
        """Keep an actor call's answer for a resubmission; True when it must not be sent now (no scheduler)."""
        actor = self.actors.get(task.task.actor_id)
        if actor is not None:
            answered = actor.answered
            answered[task.task_id] = (result, size)
            actor.answered_bytes += size
            while len(answered) > ACTOR_ANSWERS_KEPT or actor.answered_bytes > ANSWER_BYTES_KEPT:
                actor.answered_bytes -= answered.popitem(last=False)[1][1]
        return self.connection != CONNECTED

    def _cancel_actor_task(self, task: WorkerTask) -> None:
        """A cancel of an actor's call: one not started is answered canceled (and dropped by the process if handed);
        a running one runs on, since stopping it would kill the actor, and answers with its result."""
        actor = self.actors[task.task.actor_id]
        processor = actor.processor
        if task.state in (WAITING, READY):
            actor.waiting.remove(task)
            self._answer(task, "cancel", TaskStatus.canceled)
        elif task.state != HANDED or task.seq <= processor.started:
            return  # running or done: its result answers the cancel
        else:
            self._send_result(task, TaskStatus.canceled)
            task.move("cancel", CANCELED)
            processor.canceled += 1
            self._instructions.append(DropTasks(processor.number, [task.task_id]))
        if task.task.creates_actor:  # nothing to call without it
            self._end_actor(actor, "its creation was canceled before it ran")

    def _on_actor_release(self, message: ActorRelease) -> None:
        """The scheduler frees these actors: each ends once the calls it was sent before have run."""
        for actor_id in message.actor_ids:
            actor = self.actors.get(actor_id)
            if actor is not None:
                actor.releasing = True

    def _lose_actor(self, processor: ProcessorState, why: str, kill: bool) -> None:
        actor = self.actor_processors[processor.number]
        self.warnings.log("actor lost", self._now, "%s: actor %s lost: %s", self.name, actor.actor_id.hex(), why)
        self._end_actor(actor, why, kill)

    def _end_actor(self, actor: WorkerActor, why: str, kill: bool = True) -> None:
        """The actor is gone: its process (killed, unless it died), its unanswered calls (answered actorLost)."""
        actor_id = actor.actor_id
        processor = actor.processor
        del self.actors[actor_id]
        del self.actor_processors[processor.number]
        if processor.number in self.processors:
            self._remove_processor(processor, kill)
        text = f"actor {actor_id.hex()} is gone: {why}"
        for task in list(processor.pipe.values()):
            self._take_from_pipe(processor, task)
            if task.state == CANCELED:
                processor.canceled -= 1
                self._forget(task, "actor lost")
            else:
                self._answer(task, "actor lost", _ACTOR_LOST, b"", text)
        while actor.waiting:
            self._answer(actor.waiting.popleft(), "actor lost", _ACTOR_LOST, b"", text)
        self._ended_actors[actor_id] = why
        if len(self._ended_actors) > ENDED_ACTORS_KEPT:
            del self._ended_actors[next(iter(self._ended_actors))]
        if self.connection == CONNECTED:
            self._outgoing.append((ActorRelease(actor_ids=[actor_id], reason=why), 0))
        logger.info("%s: actor %s ended: %s", self.name, actor_id.hex(), why)

    def _forget_waiting_actor_calls(self) -> None:
        """The scheduler is lost: calls not handed yet never ran, and their clients resubmit them."""
        for actor in self.actors.values():
            while actor.waiting:
                self._forget(actor.waiting.popleft(), "scheduler lost")

    def hosted_actors(self) -> List[bytes]:
        """The actors to name in a Hello: those alive and not being freed."""
        return [actor_id for actor_id, actor in self.actors.items() if not actor.releasing and not actor.broken]

    def _check_actors(self, queued_ids: Set[bytes]) -> int:
        """Invariants of the actors (invariants.py); the number of calls waiting in their lines."""
        waiting = 0
        for actor_id, actor in self.actors.items():
            assert actor.actor_id == actor_id
            processor = actor.processor
            assert self.processors.get(processor.number) is processor and processor.role == ACTOR_PROCESSOR
            assert self.actor_processors[processor.number] is actor
            assert len(actor.answered) <= ACTOR_ANSWERS_KEPT
            assert actor.answered_bytes == sum(size for _, size in actor.answered.values()) <= ANSWER_BYTES_KEPT
            assert len(actor.ran) <= CALLERS_KEPT
            for task in actor.waiting:
                assert self.tasks.get(task.task_id) is task and task.task_id not in queued_ids
                assert task.state in (WAITING, READY) and task.processor is None, task.stimuli()
                assert task.task.actor_id == actor_id
            for task in processor.pipe.values():
                assert task.task.actor_id == actor_id
            waiting += len(actor.waiting)
        assert len(self.actor_processors) == len(self.actors)
        return waiting
