"""Internal: the client's sans-IO core: what a connection to the scheduler knows and decides, with no socket, thread
or clock of its own (docs/contributing.md, "Cores and shells"; the shell is connection.py with io_thread.py).

In: submissions from user threads (`send`, `send_task`, `cancel_tasks`, `clear`, actors), the scheduler's decoded
messages (`receive(messages, now)`), the time (`tick(now)`: a scheduler silent for too long fails the connection), and
what the shell saw (`lost`, `fetched`, a frame that could not be sent). Out: messages to send, in the send queue the
shell takes (`take_outgoing`), a wake-up when the queue goes from idle to busy (the `wake` callable the shell gives),
and commands (`commands`, drained by the shell after each call from its thread): fetch a result from its holder, say
Hello again, follow a new registration's settings, answer a relay's upload, stop. Futures are settled here: they hold
their result state, the core holds each unanswered task's record (the message to send again, its retries, the objects it
holds, its graph).

Threads: user threads call the submitting methods concurrently; they take `lock`, which guards the queue, the ledger,
the task records and the registration. The shell's IO thread calls the rest. A plain success leaves `pending` without
the lock (a dict's get and pop are atomic, see `_on_task_results`). Futures settle on the IO thread, so their done
callbacks run there.

A scheduler that is lost (its connection closed, or it said to register again) is waited for up to
`reconnect_seconds`; once one answers, everything unanswered is sent again under the same task ids (resubmission.py),
objects first. A new scheduler runs it all; the same scheduler, whose connection merely dropped
(HelloReply.resumed), ignores what it already holds. Each future settles once: its entry leaves `pending` with the
first answer.
"""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from scaler.client import output
from scaler.client.future import ScalerFuture
from scaler.client.ledger import ObjectLedger, ObjectNeed
from scaler.client.objects import LargeObject, Outgoing
from scaler.client.resubmission import GraphRecord, resubmission
from scaler.client.results import CANCELED, SUCCESS, failure_of, profiling_info_of, settle_successes
from scaler.client.send_queue import SendQueue
from scaler.config import DEFAULT_HEARTBEAT_INTERVAL_SECONDS, DEFAULT_MAX_FRAME_BYTES
from scaler.errors import DisconnectedError, ScalerError, SchedulerGoneError
from scaler.io.shared_bytes import SharedBytes
from scaler.protocol import (
    PROTOCOL_VERSION,
    ActorRelease,
    ClientDisconnect,
    DataKeys,
    DisconnectReply,
    Goodbye,
    HeartbeatEcho,
    Hello,
    HelloReply,
    ObjectDelete,
    ObjectRequest,
    ObjectResponse,
    Role,
    TaskCancel,
    TaskOutput,
    TaskResult,
)
from scaler.protocol.dispatch import handler_table
from scaler.serializer import default_loads

logger = logging.getLogger(__name__)

# What the shell must do (the first item of each command), in the order the core decided.
FETCH = 0  # (FETCH, object id, holder's data address, holder's public key): fetch a result; fetch_unreachable if not
REGISTER_AGAIN = 1  # (REGISTER_AGAIN,): the scheduler was lost: say Hello until one answers
REGISTERED = 2  # (REGISTERED, HelloReply): a scheduler took us: follow its heartbeat, frame limit and relay
HANDSHAKE = 3  # (HANDSHAKE, HelloReply): the first answer, which the creating thread waits for
CADENCE = 4  # (CADENCE, seconds): heartbeat this often
DATA_KEYS = 5  # (DATA_KEYS, keys): let these keys fetch at our data address; answer with data_key() if it serves
UPLOAD = 6  # (UPLOAD, object ids): the scheduler relays objects we keep: queue upload() of each we still serve
DISCONNECTED = 7  # (DISCONNECTED, DisconnectReply): the answer the closing thread waits for
STOP = 8  # (STOP,): the connection is over; the IO thread ends after this turn
Command = Tuple[Any, ...]

# Heartbeats go out at the interval the scheduler names, and at least this many times per silence window, so that a
# live scheduler (which echoes each) is never taken for gone.
_HEARTBEATS_PER_SILENCE_WINDOW = 4

# What a new scheduler is sent again of the queue, and what the same scheduler is (the rest is in the resubmission). A
# disconnect is always sent again, last.
_KEPT_FOR_NEW = (ActorRelease,)
_KEPT_FOR_SAME = (TaskCancel, ObjectDelete, ActorRelease)


class ResultFetch:
    """A result the worker stored as an object, or holds: its chunks, arriving in ObjectResponses (relayed by the
    scheduler), or its bytes from its holder (the shell's fetch)."""

    __slots__ = ("future", "result", "chunks", "held_objects")

    def __init__(self, future: ScalerFuture, result: TaskResult, held_objects: Optional[List[bytes]]) -> None:
        self.future = future
        self.result = result
        self.chunks: List[Any] = []
        # the objects its task read, kept until the result is here: it is made again from them if its holder is lost
        self.held_objects = held_objects


class ClientCore:
    def __init__(
        self,
        identity: bytes,
        address: str,
        hostname: str,
        pid: int,
        task_prefix: bytes,
        reconnect_seconds: float,
        wake: Callable[[], None],
        gone_after_seconds: float = 0.0,
    ) -> None:
        """`gone_after_seconds`: how long no scheduler may be heard, once one took us, before every unanswered task
        fails (SchedulerGoneError); by default `reconnect_seconds`."""
        self.identity = identity
        self.address = address  # for what the logs and errors say
        self.hostname = hostname
        self.pid = pid
        self.reconnect_seconds = reconnect_seconds  # 0: a lost scheduler fails everything at once
        self.gone_after_seconds = gone_after_seconds or reconnect_seconds
        self.silence_limit = 0.0  # gone_after_seconds from the first registration on; 0: not timed
        self.last_heard = 0.0  # when the scheduler's last frame came: the `now` of the last receive()
        self.lock = threading.Lock()
        self.registered = False  # a scheduler knows us: the queue may be sent
        self.handshaken = False  # the first HelloReply was taken
        self.registrations = 0  # sessions a scheduler accepted: more than one after a scheduler was lost
        self.closed_reason: Optional[str] = None  # set once: the connection is unusable from then on
        self.forwards_task_output = False  # the scheduler forwards TaskOutput (Client(stream_output=True))
        self.task_policies = False  # the scheduler honours Task.resources, priority, retries (client.options())
        self.actors = False  # the scheduler places actors (HelloReply.actors)
        self.owned_actors: Set[bytes] = set()  # actors created here and not released: a new scheduler hears of them
        # Held by an actor call from taking its task id until it is queued: a connection's actor calls are sent in the
        # order of their ids, which workers read as sequence numbers (docs/protocol.md, "Actors").
        self.actor_calls = threading.Lock()
        self.max_frame_bytes = DEFAULT_MAX_FRAME_BYTES  # the scheduler's, from its HelloReply
        self.data_address = ""  # where workers fetch the large objects we keep: set by the shell before the Hello
        self.lag_us = 0  # the last heartbeat round trip
        self.commands: List[Command] = []

        self.pending: Dict[bytes, ScalerFuture] = {}  # task id -> future, until the task is answered
        self.messages: Dict[bytes, Any] = {}  # task id -> its message as sent, for a scheduler that lost it
        self.retries: Dict[bytes, int] = {}  # task id -> its retries option, where not 0
        self.held: Dict[bytes, List[bytes]] = {}  # task id -> the objects it holds, where any
        self.graphs: Dict[bytes, GraphRecord] = {}  # task id of a graph's key -> the graph's record
        self.fetches: Dict[bytes, ResultFetch] = {}  # results being fetched: IO thread only
        self.ledger = ObjectLedger()
        self.send_queue = SendQueue()
        self.disconnecting: Optional[ClientDisconnect] = None  # sent again to a new scheduler while unanswered
        self._wake = wake
        self._task_prefix = task_prefix
        self._task_counter = itertools.count()
        self._handlers = handler_table(
            [
                (TaskResult, self._on_task_result),
                (TaskOutput, self._on_task_output),
                (ObjectResponse, self._on_object_response),
                (ObjectRequest, self._on_upload_request),
                (DataKeys, self._on_data_keys),
                (HelloReply, self._on_hello_reply),
                (DisconnectReply, self._on_disconnect_reply),
                (Goodbye, self._on_goodbye),
                (HeartbeatEcho, self._on_heartbeat_echo),
            ]
        )

    # ---- user threads ------------------------------------------------------------------------------------------------

    def new_task_id(self) -> bytes:
        # A random per-connection prefix and a counter: unique like random ids, at a fraction of the cost.
        return self._task_prefix + next(self._task_counter).to_bytes(8, "little")

    def send(
        self,
        needs: Iterable[ObjectNeed],
        messages: Sequence[Outgoing],
        futures: Sequence[ScalerFuture] = (),
        kept: Sequence[Any] = (),
        retries: int = 0,
        held: Optional[Dict[bytes, List[bytes]]] = None,
        pin: Optional[bytes] = None,
    ) -> bool:
        """Queue `messages`, preceded by the objects in `needs` the scheduler lacks, and track the tasks of `futures`:
        `kept[i]` is the message of futures[i]'s task as sent (a reference, not a copy), to send again to a scheduler
        that lost it; `retries`, their option (for the note on an exception); `held`, task id -> the objects a task
        holds, for those that hold any. Parallel lists, not a record per task: map() sends 1,000 at a time, and a
        tuple each, alive until sent, was as many more objects for the garbage collector.

        False, with nothing queued, if an object the scheduler lacks came without its ObjectPut (clear() deleted it
        since the caller cached its id): the caller serializes it again and retries. DisconnectedError if closed."""
        with self.lock:
            if self.closed_reason is not None:
                self.check_open()
            puts = self.ledger.puts_for(needs)
            if puts is None:
                return False
            if pin is not None:
                self.ledger.pin(pin)
            pending, messages_kept = self.pending, self.messages
            for future, message in zip(futures, kept):
                task_id = future._task_id
                pending[task_id] = future
                messages_kept[task_id] = message
            if retries:
                for future in futures:
                    self.retries[future._task_id] = retries
            if held:
                for task_id, objects in held.items():
                    self._hold_locked(task_id, objects)
            send_queue = self.send_queue
            wake = send_queue.add(puts) if puts else False
            wake = send_queue.add(messages) or wake
        if wake:  # after the lock: the IO thread, woken, takes it at once (it would wait for us otherwise)
            self._wake()
        return True

    def send_task(self, object_ids: Sequence[bytes], encoded: bytes, future: ScalerFuture, retries: int) -> bool:
        """send() of one task encoded by template, holding no objects of its own, when the scheduler holds every object
        in `object_ids` (its function, a serializer): nothing to work out. False, with nothing queued, if it lacks
        one: use send()."""
        with self.lock:
            if self.closed_reason is not None:
                self.check_open()
            if not self.ledger.holds_all(object_ids):
                return False
            task_id = future._task_id
            self.pending[task_id] = future
            self.messages[task_id] = encoded
            if retries:
                self.retries[task_id] = retries
            wake = self.send_queue.add_task(encoded)
        if wake:
            self._wake()
        return True

    def send_graph(
        self,
        needs: Iterable[ObjectNeed],
        frame: bytes,
        record: GraphRecord,
        retries: int,
        objects: Optional[List[bytes]],
    ) -> bool:
        """send() of a graph: its nodes in one frame; each of its keys (`record.futures`) holds the graph's objects
        and, while unanswered, the record (what a scheduler that lost it needs)."""
        with self.lock:
            self.check_open()
            puts = self.ledger.puts_for(needs)
            if puts is None:
                return False
            for task_id, future in record.futures.items():
                self.pending[task_id] = future
                self.graphs[task_id] = record
                if retries:
                    self.retries[task_id] = retries
                if objects:
                    self._hold_locked(task_id, objects)
            send_queue = self.send_queue
            wake = send_queue.add(puts) if puts else False
            wake = send_queue.add([frame] if frame else []) or wake
        if wake:
            self._wake()
        return True

    def _hold_locked(self, task_id: bytes, objects: List[bytes]) -> None:
        """The task needs these objects until it is answered (released by _release_locked)."""
        self.held[task_id] = objects
        self.ledger.hold(objects)

    def holds_object(self, object_id: bytes) -> bool:
        """Whether an object sent with send_object is still held for this connection (clear() drops them all)."""
        return self.ledger.is_pinned(object_id)  # one set lookup: atomic, no lock needed

    def own_actor(self, actor_id: bytes) -> None:
        with self.lock:
            self.owned_actors.add(actor_id)

    def release_actor(self, actor_id: bytes) -> None:
        """Free an actor this connection created (its handle closed or collected); nothing if it is closed."""
        with self.lock:
            if actor_id not in self.owned_actors:
                return
            self.owned_actors.discard(actor_id)
            if self.closed_reason is None:
                self._queue_locked(ActorRelease(actor_ids=[actor_id], reason="its handle was closed"))

    def cancel_tasks(self, task_ids: List[bytes]) -> None:
        if task_ids:
            with self.lock:
                if self.closed_reason is None:
                    self._queue_locked(TaskCancel(task_ids=task_ids))

    def cancel_futures(self, futures: Iterable[ScalerFuture], nodes: Sequence[bytes] = ()) -> None:
        """Cancel these futures here and their tasks at the scheduler, with `nodes` (their graph's unreported nodes,
        which may run on after every key was answered: a key failed with a dependency while another ran)."""
        task_ids: Dict[bytes, None] = {}
        for future in futures:
            if future._cancel_locally():
                task_ids[future._task_id] = None
        task_ids.update(dict.fromkeys(nodes))
        self.cancel_tasks(list(task_ids))

    def clear(self) -> None:
        """Cancel every unanswered task and delete every object of this connection."""
        with self.lock:
            self.check_open()
            futures = list(self.pending.values())
            fetches = list(self.fetches.values())  # changed under the lock only
            futures.extend([fetch.future for fetch in fetches])  # unanswered too: cancelled here
            task_ids = list(self.pending)
            graphs = list(self.graphs.values())  # a copy made at once: the IO thread drops answered keys unlocked
            for graph in {id(graph): graph for graph in graphs}.values():
                task_ids.extend(graph.unreported)
            if task_ids:
                self._queue_locked(TaskCancel(task_ids=task_ids))
            object_ids = self.ledger.clear()
            self.held.clear()  # the ledger forgot what each task held: nothing is released twice
            for fetch in fetches:
                fetch.held_objects = None
            if object_ids:
                self._queue_locked(ObjectDelete(object_ids=object_ids))
        for future in futures:
            future._cancel_locally()

    def disconnect(self, shutdown_cluster: bool) -> None:
        """Queue a ClientDisconnect, sent again to a new scheduler until answered."""
        with self.lock:
            self.disconnecting = ClientDisconnect(shutdown_cluster=shutdown_cluster)
            self._queue_locked(self.disconnecting)

    def disconnect_answered(self) -> None:
        """The closing thread stopped waiting: a new scheduler need not hear the disconnect again."""
        self.disconnecting = None

    def check_open(self) -> None:
        """DisconnectedError once the connection is closed."""
        if self.closed_reason is not None:
            raise DisconnectedError(f"the client is disconnected ({self.closed_reason}): create a new Client")

    # ---- the queue ---------------------------------------------------------------------------------------------------

    def _queue_locked(self, message: Outgoing) -> None:
        leaving = self.disconnecting
        if leaving is not None and not leaving.shutdown_cluster and message is not leaving:
            # the scheduler forgets this client at its ClientDisconnect: a release or fetch behind it (a future
            # dropped, a gather still running) would reach it from a stranger, and be answered with a Goodbye. (A
            # shutdown may be refused, and the client goes on: what is queued meanwhile must still leave.)
            return
        if self.send_queue.add_one(message):
            self._wake()

    def _queue(self, message: Outgoing) -> None:
        with self.lock:
            self._queue_locked(message)

    def take_outgoing(self) -> List[Outgoing]:
        """Everything queued, for the IO thread to send (only while `registered`)."""
        with self.lock:
            return self.send_queue.take()

    def hello(self) -> Hello:
        """The Hello to send now: it says how often this client registered before, and, after a scheduler was lost,
        which actors are ours."""
        hello = Hello(
            protocol_version=PROTOCOL_VERSION,
            role=Role.client,
            name=self.identity.decode(),
            hostname=self.hostname,
            pid=self.pid,
            previous_registrations=self.registrations,
            fetches_from_holders=True,  # large results come from the workers that hold them
            data_address=self.data_address,  # where workers fetch the large objects it keeps
        )
        if self.registrations:
            with self.lock:
                hello.actors = list(self.owned_actors)
        return hello

    # ---- the scheduler's messages ------------------------------------------------------------------------------------

    def receive(self, messages: List[Any], now: float) -> None:
        """A frame's messages, in order. A run of TaskResults goes to `_on_task_results` whole (the common frame,
        results only, is one run: the list itself): a heartbeat's echo sharing a frame with 10,000 results must not
        send them one by one through the handler of a single result."""
        self.last_heard = now
        handlers = self._handlers
        result_kind = TaskResult.WHICH
        start = 0
        count = len(messages)
        while start < count:
            kind = messages[start].WHICH
            if kind != result_kind:
                handler = handlers[kind]
                if handler is not None:
                    handler(messages[start])
                else:
                    logger.debug("ignored unexpected %s from the scheduler", type(messages[start]).__name__)
                start += 1
                continue
            end = start + 1
            while end < count and messages[end].WHICH == result_kind:
                end += 1
            self._on_task_results(messages if start == 0 and end == count else messages[start:end])
            start = end

    def _on_task_results(self, results: List[TaskResult]) -> None:
        """Results that came in one frame: those of plain successes (value inline, no objects to release) settle
        together, under one lock for the futures; any other goes through _on_task_result.

        A plain success leaves `pending` without the core's lock: it touches nothing else the lock guards, and a
        dict's get and pop are atomic. Holding the lock over the frame's loop made a lock convoy with a submitting
        thread: the interpreter hands the GIL to the submitting thread inside the loop now and then, which then
        blocks on the lock at once, and each such turn costs both threads two more GIL hand-offs.

        The plain successes go in two parallel lists, not a list of (future, result) pairs: a frame holds thousands of
        results, and a pair per result was that many more objects for the garbage collector (see send_queue.py)."""
        futures: List[ScalerFuture] = []
        plain: List[TaskResult] = []
        others = []
        pop = self.pending.pop
        held = self.held
        for result in results:
            if result.status == SUCCESS and not result.in_object:
                task_id = result.task_id
                if not held or task_id not in held:
                    future = pop(task_id, None)
                    if future is not None:  # else cancelled meanwhile, by clear() or a closing connection
                        futures.append(future)
                        plain.append(result)
                    continue
            others.append(result)
        forget = self.messages.pop
        graphs = self.graphs
        retries = self.retries
        for result in plain:  # _answered, inline, its pops skipped where there is nothing to pop
            task_id = result.task_id
            forget(task_id, None)
            if graphs:
                graph = graphs.pop(task_id, None)
                if graph is not None:
                    graph.answered(task_id, result.payload)
            if retries:
                retries.pop(task_id, None)
        if output.labels:  # a streaming client's: no more output will come for these
            for result in plain:
                output.forget_task(result.task_id)
        settle_successes(futures, plain)
        for result in others:
            self._on_task_result(result)

    def _answered(self, task_id: bytes, payload: Optional[bytes] = None) -> int:
        """The scheduler answered: what a restarted one would need for the task is dropped; its retries option. A
        graph key's successful result (`payload`) is kept by its graph while other nodes need it, in case they must
        run again."""
        self.messages.pop(task_id, None)
        graph = self.graphs.pop(task_id, None)
        if graph is not None and payload is not None:
            graph.answered(task_id, payload)
        return self.retries.pop(task_id, 0)

    def _on_task_result(self, result: TaskResult) -> None:
        task_id = result.task_id
        if output.labels:
            output.forget_task(task_id)
        with self.lock:  # a fetch is made, and what the task held released, where clear() cannot come between
            future = self.pending.pop(task_id, None)
            held = self.held.pop(task_id, None)
            fetch = result.in_object and result.status == SUCCESS and future is not None and not future.done()
            if fetch:
                assert future is not None  # fetch says so
                self.fetches[task_id] = ResultFetch(future, result, held)  # it keeps what the task held
                self._queue_locked(ObjectRequest(object_ids=[task_id]))
                return
            if held:
                self._release_locked(held)
        if future is None:
            if result.in_object:
                self._queue(ObjectDelete(object_ids=[task_id]))  # a result crossing a cancel still must be freed
            return
        status = result.status
        if status == SUCCESS:
            if not result.in_object:
                self._settle_success(future, result, result.payload)
            else:  # cancelled by the user: not fetched
                self._answered(task_id)
                self._queue(ObjectDelete(object_ids=[task_id]))
        elif status == CANCELED:
            self._answered(task_id)
            future._cancel_locally()
        else:
            retries = self._answered(task_id)
            future._settle(failure_of(result, retries), True, profiling_info_of(future, result))

    @staticmethod
    def task_number(task_id: bytes) -> int:
        """The counter of one of our task ids: 0, 1, 2... in the order this connection made them."""
        return int.from_bytes(task_id[8:], "little")

    def _on_task_output(self, message: TaskOutput) -> None:
        output.on_task_output(message.task_id, message.stream, message.data, self.task_number(message.task_id))

    def _on_object_response(self, response: ObjectResponse) -> None:
        object_id = response.object_id
        fetch = self.fetches.get(object_id)
        if fetch is None:
            return
        if not response.found:
            self._fetch_failed(object_id, f"the result of task {object_id.hex()} was lost")
            return
        if response.holder_address:  # held by a worker: fetched there, or relayed if that worker is out of reach
            self.commands.append((FETCH, object_id, response.holder_address, response.holder_public_key))
            return
        if response.chunk_index == 0:
            fetch.chunks = []  # a relayed upload that started over (its holder was lost, the result made again)
        elif response.chunk_index != len(fetch.chunks):
            return  # not the next chunk (one relayed twice, or after some were missed): the next upload, whole, is
        fetch.chunks.append(response.payload)
        if len(fetch.chunks) < response.chunk_count:
            return
        self._fetched(object_id, fetch.chunks[0] if len(fetch.chunks) == 1 else b"".join(fetch.chunks))

    def _on_data_keys(self, message: DataKeys) -> None:
        """With CurveZMQ, just before a HelloReply: the keys our data address is to accept."""
        self.commands.append((DATA_KEYS, message.authorized_keys))

    def data_key(self, public_key: bytes) -> None:
        """The shell serves data under this key: the scheduler hands it the workers that fetch here."""
        self._queue(DataKeys(public_key=public_key))

    def _on_upload_request(self, request: ObjectRequest) -> None:
        """The scheduler relays objects this client keeps to a peer that cannot fetch them here."""
        self.commands.append((UPLOAD, list(request.object_ids)))

    def upload(self, object_id: bytes, payload: Any) -> None:
        """The bytes of a kept object the scheduler asked for (None: deleted meanwhile), as ObjectPut chunks; not if
        its delete is queued already (its last task was answered in the same frame): the upload would make it again."""
        with self.lock:
            if payload is None or not self.ledger.holds_all((object_id,)):
                self._queue_locked(ObjectResponse(object_id=object_id, found=False))
            else:
                self._queue_locked(LargeObject(object_id, 0, "", payload, upload=True))

    def _on_heartbeat_echo(self, echo: HeartbeatEcho) -> None:
        self.lag_us = max(0, int(self.last_heard * 1_000_000) - echo.sent_at_us)
        if echo.heartbeat_interval_ms:  # the scheduler stretched or shrank the cadence (0: an older one)
            self.commands.append((CADENCE, self._heartbeat_seconds(echo.heartbeat_interval_ms)))

    def _heartbeat_seconds(self, interval_ms: int) -> float:
        """The heartbeat interval the scheduler names (0: none named: the default), within the silence window."""
        interval = interval_ms / 1000 if interval_ms else DEFAULT_HEARTBEAT_INTERVAL_SECONDS
        return min(interval, self.silence_limit / _HEARTBEATS_PER_SILENCE_WINDOW)

    def tick(self, now: float) -> float:
        """When the scheduler must next be heard from (0: no limit yet: before the first registration); once that
        has passed, every unanswered task fails and the connection stops (STOP)."""
        limit = self.silence_limit
        if not limit or self.closed_reason is not None:
            return 0.0
        deadline = self.last_heard + limit
        if now >= deadline:
            self.silent(
                f"no message from the scheduler at {self.address} for {now - self.last_heard:.1f}s (a client waits "
                f"{limit:g}s for one: its reconnect_seconds, or its timeout_seconds if that is 0)"
            )
            self.commands.append((STOP,))
        return deadline

    def _on_hello_reply(self, reply: HelloReply) -> None:
        if self.registered:
            return  # the answer to a Hello sent again meanwhile
        if reply.accepted:
            self.max_frame_bytes = reply.max_frame_bytes or DEFAULT_MAX_FRAME_BYTES  # 0: an older scheduler's default
            self.silence_limit = self.gone_after_seconds
            self.commands.append((REGISTERED, reply))
            self.commands.append((CADENCE, self._heartbeat_seconds(reply.heartbeat_interval_ms)))
        if not self.handshaken:  # the first handshake, which the creating thread waits for
            self.handshaken = True
            if reply.accepted:
                self.registrations = 1
                self.registered = True
                self.forwards_task_output = reply.forwards_task_output
                self.task_policies = reply.task_policies
                self.actors = reply.actors
            self.commands.append((HANDSHAKE, reply))
            return
        if not reply.accepted:
            reason = f"the scheduler at {self.address} refused this client again: {reply.reason or 'no reason given'}"
            logger.warning("%s", reason)
            self.terminate(reason, SchedulerGoneError(reason))
            self.commands.append((STOP,))
            return
        if not reply.resumed:
            self.registrations += 1
        self.task_policies = reply.task_policies  # tasks submitted from now on go to this scheduler
        self.actors = reply.actors
        with self.lock:
            counts = self._resubmit_locked(reply.resumed)
        self.registered = True
        logger.warning(
            "registered again with %s scheduler at %s: resubmitted %d task(s) and %d graph(s), with %d object(s)",
            "the same" if reply.resumed else "a new",
            self.address,
            *counts,
        )

    def _on_disconnect_reply(self, reply: DisconnectReply) -> None:
        self.commands.append((DISCONNECTED, reply))

    def _on_goodbye(self, goodbye: Goodbye) -> None:
        reason = f"the scheduler said goodbye: {goodbye.reason or 'no reason given'}"
        if goodbye.reconnect and self.reconnect_seconds and self.handshaken and self.disconnecting is None:
            # it restarted and does not know us, or it stops and another may take its place
            if self.registered:
                self.lost(reason)
            return  # else our Hello is on its way
        # leaving, we are told what we said: the scheduler forgot us (or a new one never knew us)
        (logger.info if self.disconnecting is not None else logger.warning)("%s", reason)
        self.commands.append((DISCONNECTED, DisconnectReply(accepted=True, reason=reason)))  # going away anyway
        self.terminate(reason, SchedulerGoneError(reason))
        self.commands.append((STOP,))

    # ---- what the shell saw ------------------------------------------------------------------------------------------

    def lost(self, reason: str) -> None:
        """The scheduler is gone (its connection closed), or does not know this client any more."""
        if self.closed_reason is not None:
            return
        if not self.reconnect_seconds:
            logger.warning("%s: failing unfinished tasks (reconnect_seconds is 0)", reason)
            self.terminate(reason, SchedulerGoneError(reason))
            self.commands.append((STOP,))
            return
        logger.warning(
            "%s: waiting up to %gs for a scheduler on that address; %d unfinished task(s) will be resubmitted",
            reason,
            self.reconnect_seconds,
            len(self.pending) + len(self.fetches),
        )
        self.registered = False
        self.commands.append((REGISTER_AGAIN,))

    def silent(self, reason: str) -> None:
        """Nothing heard from the scheduler for too long (or the same frame keeps dropping the connection)."""
        logger.warning("%s: failing unfinished tasks", reason)
        self.terminate(reason, SchedulerGoneError(reason))

    def crashed(self, error: Exception) -> None:
        """The IO thread failed: nothing will be answered."""
        self.terminate(f"client IO thread failed: {error!r}", ScalerError(f"client IO thread failed: {error!r}"))

    def not_sent(self, message: Any, error: Exception) -> None:
        """`message` could not be sent (it did not encode, or its frame was over the scheduler's frame limit)."""
        task_id: Any = getattr(message, "task_id", None)  # None: not a task, nothing to pop
        with self.lock:
            future = self.pending.pop(task_id, None)
            held = self.held.pop(task_id, None) if future is not None else None
            if held:
                self._release_locked(held)
        if future is not None:
            self._answered(task_id)
            failure = error if isinstance(error, ScalerError) else ScalerError(f"task could not be encoded: {error}")
            future._settle(failure, True, None)

    def fetch_unreachable(self, object_id: bytes) -> None:
        """The holder of a result cannot be reached from here: the scheduler relays its bytes."""
        self._queue(ObjectRequest(object_ids=[object_id], via_scheduler=True))

    def fetched(self, object_id: bytes, payload: Any, timed_out: bool) -> None:
        """A fetch from a holder ended. Without the bytes (the holder could not be reached, or no longer holds it:
        lost, and made again meanwhile), the scheduler is asked to relay them; it answers once it has them."""
        if object_id not in self.fetches:
            return
        if payload is None:
            if timed_out:
                logger.warning(
                    "no answer from the worker holding the result of task %s: asking the scheduler to relay it",
                    object_id.hex(),
                )
            self.fetch_unreachable(object_id)
            return
        self._fetched(object_id, payload)

    def terminate(self, reason: str, error: Optional[BaseException] = None) -> None:
        """Mark the connection closed; unanswered futures fail with `error`, or are cancelled without one."""
        with self.lock:
            if self.closed_reason is None:
                self.closed_reason = reason
            futures = list(self.pending.values())
            futures.extend(fetch.future for fetch in self.fetches.values())
            for records in (self.pending, self.fetches, self.messages, self.retries, self.held, self.graphs):
                records.clear()
        for future in futures:
            if error is None:
                future._cancel_locally()
            else:
                future._settle(error, True, None)

    # ---- results being fetched ---------------------------------------------------------------------------------------

    def _fetched(self, object_id: bytes, payload: Any) -> None:
        """`payload`: bytes-like (a view of a received message), or the SharedBytes of a holder on this host, mapped
        here (if it cannot be, the scheduler is asked to relay its bytes); a custom deserializer is given bytes, as
        promised."""
        fetch = self.fetches.get(object_id)
        if fetch is None:
            return
        by_default_loads = fetch.future._deserialize is default_loads
        fetched = payload  # what the graph keeps, should it send the result back: not what the user's arrays view
        if type(payload) is SharedBytes:  # from a holder on this host: its memory, mapped
            try:
                payload = payload.to_read(by_default_loads)
            except (OSError, ValueError) as error:  # vm.max_map_count reached, say: this result only, not the client
                logger.warning(
                    "cannot map the result of task %s (%s): asking the scheduler to relay it", object_id.hex(), error
                )
                self.fetch_unreachable(object_id)
                return
        elif type(payload) is not bytes and not by_default_loads:
            payload = fetched = bytes(payload)
        fetch = self._end_fetch(object_id, True)
        if fetch is None:
            return
        self._settle_success(fetch.future, fetch.result, payload, fetched)

    def _fetch_failed(self, object_id: bytes, reason: str) -> None:
        fetch = self._end_fetch(object_id, False)
        if fetch is None:
            return
        self._answered(object_id)
        fetch.future._settle(ScalerError(reason), True, None)

    def _end_fetch(self, object_id: bytes, fetched: bool) -> Optional[ResultFetch]:
        """A fetch is over: the result, if `fetched`, is freed on its holder, and what its task held is released (under
        the lock, as clear() forgets it). None if the connection closed meanwhile (terminate() settled its future)."""
        with self.lock:
            fetch = self.fetches.pop(object_id, None)
            if fetch is None:
                return None
            if fetched:
                self._queue_locked(ObjectDelete(object_ids=[object_id]))
            if fetch.held_objects:
                self._release_locked(fetch.held_objects)
                fetch.held_objects = None
        return fetch

    def _release_locked(self, object_ids: List[bytes]) -> None:
        """The objects a task read are no longer needed by it: those no other task needs are deleted."""
        deleted = self.ledger.release(object_ids)
        if deleted and self.closed_reason is None:
            self._queue_locked(ObjectDelete(object_ids=deleted))

    def _settle_success(self, future: ScalerFuture, result: TaskResult, payload: Any, kept: Any = None) -> None:
        """`kept`: what a graph keeps of the result, if not `payload` itself (see GraphRecord.answered)."""
        self._answered(result.task_id, payload if kept is None else kept)
        if future.done():
            return  # cancelled by the user: not worth deserializing
        try:
            value = future._deserialize(payload)
        except Exception as error:
            future._settle(error, True, None)
            return
        future._settle(value, False, profiling_info_of(future, result))

    # ---- a new session -----------------------------------------------------------------------------------------------

    def _resubmit_locked(self, resumed: bool) -> Tuple[int, int, int]:
        """Replace the queue with everything a scheduler needs for what is unanswered; (tasks, graphs, objects).

        A new scheduler holds nothing: futures cancelled meanwhile are forgotten, results being fetched are computed
        again, and of the queue only a disconnect is kept (the rest is in what is resent). The same scheduler holds
        what it was sent: what is resent may be a copy (ignored), cancels and deletes are kept, and results being
        fetched are asked for again, not made again.

        What is kept of the queue goes first: a delete queued before the loss must not undo an object put again since
        (a later task needs it), and the objects sent again are exactly those the ledger says are needed now."""
        pending = self.pending
        extra: List[Outgoing] = []
        if resumed:
            kept: tuple = _KEPT_FOR_SAME
            for task_id, fetch in self.fetches.items():
                fetch.chunks = []
                extra.append(ObjectRequest(object_ids=[task_id]))
            cancelled = [task_id for task_id, future in pending.items() if future.done()]
            if cancelled:  # a cancel may have been lost with the connection
                extra.append(TaskCancel(task_ids=cancelled))
        else:
            kept = _KEPT_FOR_NEW
            for task_id, fetch in self.fetches.items():  # made again by the new scheduler
                pending[task_id] = fetch.future
                if fetch.held_objects:
                    self.held[task_id] = fetch.held_objects
            self.fetches.clear()
            for task_id, future in list(pending.items()):
                if future.done():  # cancelled by the user: the new scheduler need not hear of it
                    del pending[task_id]
                    held = self.held.pop(task_id, None)
                    if held:
                        self.ledger.release(held)
                    self._answered(task_id)
        unanswered = [task_id for task_id, future in pending.items() if not future.done()]
        items = [message for message in self.send_queue.items if type(message) in kept]
        fetching = set(self.fetches)  # the same scheduler's results, asked for again
        items.extend(resubmission(self.ledger.all_puts(), unanswered, self.messages, self.graphs, fetching))
        items.extend(extra)
        if self.disconnecting is not None and self.disconnecting not in items:
            items.append(self.disconnecting)  # it left on the lost connection: the new scheduler answers it
        self.send_queue.replace(items)
        self._wake()  # so that the IO thread's next turn starts at once and sends them
        graphs = {id(self.graphs[task_id]) for task_id in unanswered if task_id in self.graphs}
        tasks = sum(1 for task_id in unanswered if task_id not in self.graphs)
        return tasks, len(graphs), self.ledger.held_count()

    # ---- invariants, for tests ---------------------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise AssertionError if the records disagree; tests call it after every step, production never."""
        pending, fetches = self.pending, self.fetches
        assert not (set(pending) & set(fetches)), "a task both unanswered and being fetched"
        for records, name in ((self.messages, "message"), (self.retries, "retries"), (self.graphs, "graph")):
            stray = set(records) - set(pending) - set(fetches)
            assert not stray, f"a {name} kept for answered tasks {sorted(task_id.hex() for task_id in stray)}"
        stray_held = set(self.held) - set(pending)
        assert not stray_held, f"objects held for answered tasks {sorted(task_id.hex() for task_id in stray_held)}"
        for task_id, future in pending.items():
            assert future.task_id == task_id, "a future under another task's id"
            assert task_id in self.messages or task_id in self.graphs, f"task {task_id.hex()} cannot be resubmitted"
        for task_id, graph in self.graphs.items():
            assert graph.futures.get(task_id) is not None, "a graph record for a key it does not have"
        uses: Dict[bytes, int] = {}
        for held in list(self.held.values()) + [fetch.held_objects or [] for fetch in fetches.values()]:
            for object_id in held:
                uses[object_id] = uses.get(object_id, 0) + 1
        assert uses == self.ledger.uses(), f"objects held by tasks {uses} but counted {self.ledger.uses()}"
        if self.closed_reason is not None:
            assert not pending and not fetches, "a closed connection with unanswered tasks"
        if self.registered:
            assert self.handshaken, "registered before the handshake"
