"""Internal: a client's connection to the scheduler: handshake, outgoing queue, unanswered tasks, reconnection and
disconnect.

User threads queue messages here under one lock; the IO thread (io_thread.py) takes them from the queue, sends them,
and calls the handlers below for what arrives. The same lock guards the object ledger, so that an object deleted by
the IO thread and put again by a user thread reach the scheduler in the order the lock decided. Several Clients may
share one connection (clients unpickled in a worker process).

A scheduler that is lost (its connection closed, or it said to register again) is waited for up to
`reconnect_seconds`, counted from the last message heard: the socket reconnects by itself, the client says Hello again,
and once a scheduler answers it resubmits everything unanswered under the same task ids (resubmission.py), objects
first. A new scheduler runs it all; the same scheduler, whose connection merely dropped (HelloReply.resumed), ignores
what it already holds. Each future still settles once: its entry leaves `_pending` with the first answer.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import itertools
import logging
import os
import socket
import threading
import time
import weakref
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set

from scaler.client import output
from scaler.client.future import ScalerFuture
from scaler.client.io_thread import IOThread
from scaler.client.ledger import ObjectLedger, ObjectNeed
from scaler.client.objects import ContentIds, LargeObject, Outgoing
from scaler.client.resubmission import resubmission
from scaler.client.results import CANCELED, SUCCESS, failure_of, profiling_info_of, settle_successes
from scaler.client.send_queue import SendQueue
from scaler.config import DEFAULT_CLIENT_DISCONNECT_TIMEOUT_SECONDS, DEFAULT_MAX_FRAME_BYTES
from scaler.errors import AuthenticationError, DisconnectedError, ProtocolVersionError, ScalerError, SchedulerGoneError
from scaler.io.curve_keys import CurvePeerKeys, raw_key
from scaler.io.shared_bytes import SharedBytes
from scaler.io.sockets import DEFAULT_KEEPALIVE, TcpKeepalive, check_resolvable, make_identity
from scaler.protocol import (
    PROTOCOL_VERSION,
    ActorRelease,
    ClientDisconnect,
    DataKeys,
    DisconnectReply,
    Goodbye,
    Hello,
    HelloReply,
    ObjectDelete,
    ObjectRequest,
    ObjectResponse,
    Role,
    TaskCancel,
    TaskOutput,
    TaskResult,
    encode,
)
from scaler.serializer import default_loads

logger = logging.getLogger(__name__)


class _ResultFetch:
    """A result the worker stored as an object, or holds: its chunks, arriving in ObjectResponses (relayed by the
    scheduler), or its bytes from its holder (scaler/io/data_fetch.py)."""

    __slots__ = ("future", "result", "chunks", "held_objects")

    def __init__(self, future: ScalerFuture, result: TaskResult, held_objects: Optional[List[bytes]]) -> None:
        self.future = future
        self.result = result
        self.chunks: List[bytes] = []
        # the objects its task read, kept until the result is here: it is made again from them if its holder is lost
        self.held_objects = held_objects


class Connection:
    """One client identity at the scheduler; raises TimeoutError or ProtocolVersionError if the handshake fails."""

    def __init__(
        self,
        address: str,
        timeout_seconds: float,
        curve: Optional[CurvePeerKeys] = None,
        keepalive: TcpKeepalive = DEFAULT_KEEPALIVE,
        reconnect_seconds: Optional[float] = None,
    ) -> None:
        self.address = check_resolvable(address)  # a host that does not exist fails now, not at the timeout
        # How long to wait for a lost scheduler to come back (0: do not wait); by default the client's timeout_seconds.
        self.reconnect_seconds = timeout_seconds if reconnect_seconds is None else reconnect_seconds
        # The one place that decides how long no scheduler may be heard (killed and not back, host lost, network cut)
        # before every pending future fails with SchedulerGoneError, a TimeoutError: the reconnect window, or
        # timeout_seconds when recovery is off; never the scheduler's own client timeout.
        self.scheduler_gone_after_seconds = self.reconnect_seconds or timeout_seconds
        self.registrations = 0  # sessions a scheduler accepted: more than one after a scheduler was lost
        self.identity = make_identity("C")
        self.content_ids = ContentIds(os.urandom(32))
        self.pid = os.getpid()
        self.closed_reason: Optional[str] = None  # set once: the connection is unusable from then on
        self.forwards_task_output = False  # the scheduler said it forwards TaskOutput (Client(stream_output=True))
        self.task_policies = False  # the scheduler honours Task.resources, priority, retries (client.options())
        self.actors = False  # the scheduler places actors (HelloReply.actors)
        self.owned_actors: Set[bytes] = set()  # actors created here and not released: a new scheduler hears of them

        self._lock = threading.Lock()
        self._send_queue = SendQueue()
        self._pending: Dict[bytes, ScalerFuture] = {}  # task id -> future, until the task is answered
        self._ledger = ObjectLedger()
        self._fetches: Dict[bytes, _ResultFetch] = {}  # IO thread only
        self._task_prefix = os.urandom(8)
        self._task_counter = itertools.count()
        self._hello_reply: concurrent.futures.Future = concurrent.futures.Future()
        self._disconnect_reply: Optional[concurrent.futures.Future] = None
        self._disconnecting: Optional[ClientDisconnect] = None  # sent again to a new scheduler while unanswered
        self._disconnect_lock = threading.Lock()

        self._hostname = socket.gethostname()
        self._io = IOThread(
            address,
            self.identity,
            self._hello,
            self._take_outgoing,
            {
                TaskResult: self._on_task_result,
                TaskOutput: self._on_task_output,
                ObjectResponse: self._on_object_response,
                ObjectRequest: self._on_upload_request,
                DataKeys: self._on_data_keys,
                HelloReply: self._on_hello_reply,
                DisconnectReply: self._on_disconnect_reply,
                Goodbye: self._on_goodbye,
            },
            self._on_encode_failure,
            self._on_silence,
            self._on_crash,
            curve,
            self._on_refused,
            self._on_lost,
            keepalive,
            {TaskResult: self._on_task_results},
        )
        self._io.on_data = self._on_data
        self._io.start()  # only now: its handlers use self._io
        self._handshake(timeout_seconds)
        _LIVE_CONNECTIONS.add(self)

    @property
    def lag_us(self) -> int:
        """The last heartbeat round trip to the scheduler."""
        return self._io.lag_us

    # ---- called from user threads ------------------------------------------------------------------------------------

    def new_task_id(self) -> bytes:
        # A random per-connection prefix and a counter: unique like random ids, at a fraction of the cost.
        return self._task_prefix + next(self._task_counter).to_bytes(8, "little")

    @staticmethod
    def task_number(task_id: bytes) -> int:
        """The counter of one of our task ids: 0, 1, 2... in the order this connection made them."""
        return int.from_bytes(task_id[8:], "little")

    def check_open(self) -> None:
        if self.closed_reason is not None:
            raise DisconnectedError(f"the client is disconnected ({self.closed_reason}): create a new Client")

    def send(
        self,
        needs: Iterable[ObjectNeed],
        messages: Sequence[Outgoing],
        futures: Sequence[ScalerFuture] = (),
        pin: Optional[bytes] = None,
    ) -> bool:
        """Queue `messages`, preceded by the objects in `needs` the scheduler lacks, and track `futures`.

        False, with nothing queued, if an object the scheduler lacks came without its ObjectPut (clear() deleted it
        since the caller cached its id): the caller serializes it again and retries.
        """
        with self._lock:
            self.check_open()
            puts = self._ledger.puts_for(needs)
            if puts is None:
                return False
            if pin is not None:
                self._ledger.pin(pin)
            pending = self._pending
            for future in futures:
                pending[future.task_id] = future
                if future._held_objects:
                    self._ledger.hold(future._held_objects)
            send_queue = self._send_queue
            wake = send_queue.add(puts) if puts else False
            wake = send_queue.add(messages) or wake
        if wake:  # after the lock: the IO thread, woken, takes it at once (it would wait for us otherwise)
            self._io.wake()
        return True

    def send_task(self, object_ids: Sequence[bytes], encoded: bytes, future: ScalerFuture) -> bool:
        """send() of one task, encoded by template, that holds no objects of its own, when the scheduler holds every
        object in `object_ids` (its function, a serializer): nothing to work out. False, with nothing queued, if it
        lacks one: use send()."""
        with self._lock:
            self.check_open()
            if not self._ledger.holds_all(object_ids):
                return False
            self._pending[future._task_id] = future
            wake = self._send_queue.add_task(encoded)
        if wake:
            self._io.wake()
        return True

    def holds_object(self, object_id: bytes) -> bool:
        """Whether an object sent with send_object is still held for this connection (clear() drops them all)."""
        return self._ledger.is_pinned(object_id)  # one set lookup: atomic, no lock needed

    def own_actor(self, actor_id: bytes) -> None:
        with self._lock:
            self.owned_actors.add(actor_id)

    def release_actor(self, actor_id: bytes) -> None:
        """Free an actor this connection created (its handle closed or collected); nothing if it is closed."""
        with self._lock:
            if actor_id not in self.owned_actors:
                return
            self.owned_actors.discard(actor_id)
            if self.closed_reason is None:
                self._queue_locked(ActorRelease(actor_ids=[actor_id], reason="its handle was closed"))

    def cancel_task(self, task_id: bytes) -> None:
        self.cancel_tasks([task_id])

    def cancel_tasks(self, task_ids: List[bytes]) -> None:
        if task_ids:
            with self._lock:
                if self.closed_reason is None:
                    self._queue_locked(TaskCancel(task_ids=task_ids))

    def clear(self) -> None:
        """Cancel every unanswered task and delete every object of this connection."""
        with self._lock:
            self.check_open()
            futures = list(self._pending.values())
            task_ids = list(self._pending)
            for future in futures:
                task_ids.extend(future._graph_task_ids or ())
            if task_ids:
                self._queue_locked(TaskCancel(task_ids=task_ids))
            object_ids = self._ledger.clear()
            if object_ids:
                self._queue_locked(ObjectDelete(object_ids=object_ids))
        for future in futures:
            future._cancel_locally()

    def close(self, shutdown_cluster: bool, timeout_seconds: float = DEFAULT_CLIENT_DISCONNECT_TIMEOUT_SECONDS) -> None:
        """Send ClientDisconnect and wait up to `timeout_seconds` for the answer (0: do not wait).

        A plain disconnect always closes. A shutdown raises ValueError (refused) or TimeoutError (no answer) and then
        leaves the connection open.
        """
        with self._disconnect_lock:
            if self.closed_reason is not None:
                if shutdown_cluster:
                    self.check_open()
                self._io.stop()
                return
            if self._io.is_current():  # a done callback: the IO thread cannot wait for its own answer
                if shutdown_cluster:
                    raise RuntimeError("shutdown() cannot be called from a future's done callback")
                timeout_seconds = 0
            elif not shutdown_cluster and not self._io.registered:
                timeout_seconds = 0  # waiting for a scheduler to come back: nobody would answer
            waiter: concurrent.futures.Future = concurrent.futures.Future()
            self._disconnect_reply = waiter
            with self._lock:
                self._disconnecting = ClientDisconnect(shutdown_cluster=shutdown_cluster)
                self._queue_locked(self._disconnecting)
            try:
                reply: Optional[DisconnectReply] = waiter.result(timeout_seconds) if timeout_seconds else None
            except concurrent.futures.TimeoutError:
                reply = None
            finally:
                self._disconnect_reply = None
            if shutdown_cluster:
                if reply is None:
                    raise TimeoutError(
                        f"the scheduler did not answer shutdown() within {timeout_seconds:.1f}s; "
                        "the client is still connected"
                    )
                if not reply.accepted:
                    raise ValueError(f"shutdown refused: {reply.reason or 'no reason given'}")
            elif reply is None and timeout_seconds:
                logger.warning(
                    "the scheduler did not answer disconnect() within %.1fs; closing anyway", timeout_seconds
                )
            self._terminate("cluster shut down" if shutdown_cluster else "disconnected")
            self._io.stop()

    @property
    def max_frame_bytes(self) -> int:
        """The scheduler's frame limit, as its HelloReply said."""
        return self._io.max_frame_bytes

    # ---- handshake and shutdown --------------------------------------------------------------------------------------

    def _hello(self) -> bytes:
        """The Hello to send now (IO thread): it says how often this client registered before."""
        hello = Hello(
            protocol_version=PROTOCOL_VERSION,
            role=Role.client,
            name=self.identity.decode(),
            hostname=self._hostname,
            pid=self.pid,
            previous_registrations=self.registrations,
            fetches_from_holders=True,  # large results come from the workers that hold them (scaler/io/data_fetch.py)
            data_address=self._io.data_address,  # where workers fetch the large objects it keeps
        )
        if self.registrations:  # a new scheduler learns which actors the workers report again are ours
            with self._lock:
                hello.actors = list(self.owned_actors)
        return encode(hello)

    def _handshake(self, timeout_seconds: float) -> None:
        try:
            reply: HelloReply = self._hello_reply.result(timeout_seconds)
        except concurrent.futures.TimeoutError:
            self._abandon("no answer to the handshake")
            raise TimeoutError(
                f"no answer from the scheduler at {self.address} within {timeout_seconds:.1f}s: "
                "is it running and reachable from here, and, with CurveZMQ, does it accept this client's key?"
            ) from None
        except BaseException:
            self._abandon("handshake failed")
            raise
        if not reply.accepted:
            self._abandon("refused by the scheduler")
            raise ProtocolVersionError(reply.reason or "the scheduler refused this client")
        self.forwards_task_output = reply.forwards_task_output
        self.task_policies = reply.task_policies
        self.actors = reply.actors

    def _abandon(self, reason: str) -> None:
        self._terminate(reason)
        self._io.stop()

    def _terminate(self, reason: str, error: Optional[BaseException] = None) -> None:
        """Mark the connection closed; unanswered futures fail with `error`, or are cancelled without one."""
        with self._lock:
            if self.closed_reason is None:
                self.closed_reason = reason
            futures = list(self._pending.values())
            self._pending.clear()
            futures.extend(fetch.future for fetch in self._fetches.values())
            self._fetches.clear()
        for future in futures:
            _answered(future)
            if error is None:
                future._cancel_locally()
            else:
                future._settle(error, True, None)
        _LIVE_CONNECTIONS.discard(self)

    # ---- the queue ---------------------------------------------------------------------------------------------------

    def _queue_locked(self, message: Outgoing) -> None:
        if self._send_queue.add_one(message):
            self._io.wake()

    def _queue(self, message: Outgoing) -> None:
        with self._lock:
            self._queue_locked(message)

    def _take_outgoing(self) -> List[Outgoing]:
        with self._lock:
            return self._send_queue.take()

    # ---- IO thread callbacks -----------------------------------------------------------------------------------------

    def _on_hello_reply(self, reply: HelloReply) -> None:
        io = self._io
        if io.registered:
            return  # the answer to a Hello sent again meanwhile
        if reply.accepted:  # set here, so that the loop's next poll already wakes for the first heartbeat
            io.silence_limit_seconds = self.scheduler_gone_after_seconds
            io.follow_cadence(reply.heartbeat_interval_ms)
            io.use_frame_limit(reply.max_frame_bytes or DEFAULT_MAX_FRAME_BYTES)  # 0: an older scheduler's default
            # an older scheduler is put large objects whole; with CurveZMQ, so is one that sent no DataKeys
            io.holds_on_clients = reply.holds_on_clients and (io.curve is None or io.data_keys)
            io.follow_relay(reply.relay_port)
            io.drops.registered(time.monotonic())
        if not self._hello_reply.done():  # the first handshake, which __init__ waits for
            if reply.accepted:
                self.registrations = 1
                io.registered = True
            self._hello_reply.set_result(reply)
            return
        if not reply.accepted:
            reason = f"the scheduler at {self.address} refused this client again: {reply.reason or 'no reason given'}"
            logger.warning("%s", reason)
            self._terminate(reason, SchedulerGoneError(reason))
            io.request_stop()
            return
        if not reply.resumed:
            self.registrations += 1
        self.task_policies = reply.task_policies  # tasks submitted from now on go to this scheduler
        self.actors = reply.actors
        with self._lock:
            counts = self._resubmit_locked(reply.resumed)
        io.registered = True
        logger.warning(
            "registered again with %s scheduler at %s: resubmitted %d task(s) and %d graph(s), with %d object(s)",
            "the same" if reply.resumed else "a new",
            self.address,
            *counts,
        )

    def _on_lost(self, reason: str) -> None:
        """IO thread: the scheduler is gone (its connection closed), or does not know this client any more."""
        if self.closed_reason is not None:
            return
        if not self.reconnect_seconds:
            logger.warning("%s: failing unfinished tasks (reconnect_seconds is 0)", reason)
            self._terminate(reason, SchedulerGoneError(reason))
            self._io.request_stop()
            return
        logger.warning(
            "%s: waiting up to %gs for a scheduler on that address; %d unfinished task(s) will be resubmitted",
            reason,
            self.scheduler_gone_after_seconds,
            len(self._pending) + len(self._fetches),
        )
        self._io.register_again()

    def _resubmit_locked(self, resumed: bool) -> tuple:
        """Replace the queue with everything a scheduler needs for what is unanswered; (tasks, graphs, objects).

        A new scheduler holds nothing: futures cancelled meanwhile are forgotten, results being fetched are computed
        again, and of the queue only a disconnect is kept (the rest is in what is resent). The same scheduler holds
        what it was sent: what is resent may be a copy (ignored), cancels and deletes are kept, and results being
        fetched are asked for again."""
        pending = self._pending
        extra: List[Outgoing] = []
        if resumed:
            kept: tuple = (TaskCancel, ObjectDelete, ActorRelease, ClientDisconnect)
            for task_id, fetch in self._fetches.items():
                fetch.chunks = []
                extra.append(ObjectRequest(object_ids=[task_id]))
            cancelled = [task_id for task_id, future in pending.items() if future.done()]
            if cancelled:  # a cancel may have been lost with the connection
                extra.append(TaskCancel(task_ids=cancelled))
        else:
            kept = (ActorRelease, ClientDisconnect)
            for task_id, fetch in self._fetches.items():
                pending[task_id] = fetch.future
            self._fetches.clear()
            for task_id, future in list(pending.items()):
                if future.done():  # cancelled by the user: the new scheduler need not hear of it
                    del pending[task_id]
                    if future._held_objects:
                        self._ledger.release(future._held_objects)
        objects = self._ledger.all_puts()
        futures = [future for future in pending.values() if not future.done()]
        items = resubmission(objects, futures)
        items.extend(extra)
        items.extend(message for message in self._send_queue.items if type(message) in kept)
        if self._disconnect_reply is not None and self._disconnecting is not None and self._disconnecting not in items:
            items.append(self._disconnecting)  # it left on the lost connection: the new scheduler answers it
        self._send_queue.replace(items)
        self._io.wake()  # so that the IO thread's next turn starts at once and sends them
        graphs = {id(future._graph) for future in futures if future._graph is not None}
        tasks = sum(1 for future in futures if future._graph is None)
        return tasks, len(graphs), self._ledger.held_count()

    def _on_disconnect_reply(self, reply: DisconnectReply) -> None:
        waiter = self._disconnect_reply
        if waiter is not None and not waiter.done():
            waiter.set_result(reply)

    def _on_goodbye(self, goodbye: Goodbye) -> None:
        reason = f"the scheduler said goodbye: {goodbye.reason or 'no reason given'}"
        waiter = self._disconnect_reply
        if goodbye.reconnect and self.reconnect_seconds and self._hello_reply.done() and waiter is None:
            # it restarted and does not know us, or it stops and another may take its place
            if self._io.registered:
                self._on_lost(reason)
            return  # else our Hello is on its way
        logger.warning("%s", reason)
        if waiter is not None and not waiter.done():
            waiter.set_result(DisconnectReply(accepted=True, reason=reason))  # the cluster is going away anyway
        self._terminate(reason, SchedulerGoneError(reason))
        self._io.request_stop()

    def _on_silence(self, reason: str) -> None:
        logger.warning("%s: failing unfinished tasks", reason)
        self._terminate(reason, SchedulerGoneError(reason))

    def _on_crash(self, error: Exception) -> None:
        self._terminate(f"client IO thread failed: {error!r}", ScalerError(f"client IO thread failed: {error!r}"))
        if not self._hello_reply.done():
            self._hello_reply.set_exception(error)

    def _on_refused(self, reason: str) -> None:
        """Before the handshake, a refusal is final: the connection gives up at once instead of at its timeout."""
        if not self._hello_reply.done():
            self._hello_reply.set_exception(AuthenticationError(f"{reason} (scheduler at {self.address})"))
            self._io.request_stop()

    def _on_encode_failure(self, message: Any, error: Exception) -> None:
        """`message` could not be sent (it did not encode, or its frame was over the scheduler's limit)."""
        task_id: Any = getattr(message, "task_id", None)  # None: not a task, nothing to pop
        with self._lock:
            future = self._pending.pop(task_id, None)
        if future is not None:
            _answered(future)
            failure = error if isinstance(error, ScalerError) else ScalerError(f"task could not be encoded: {error}")
            future._settle(failure, True, None)

    def _on_task_results(self, results: List[TaskResult]) -> None:
        """Results that came in one frame: those of plain successes (value inline, no objects to release) settle
        together, under one lock for the futures; any other goes through _on_task_result.

        A plain success leaves `_pending` without the connection's lock: it touches nothing else the lock guards, and
        a dict's get and pop are atomic. Holding the lock over the frame's loop made a lock convoy with a submitting
        thread: the interpreter hands the GIL to the submitting thread inside the loop now and then, which then
        blocks on the lock at once, and each such turn costs both threads two more GIL hand-offs.

        The plain successes go in two parallel lists, not a list of (future, result) pairs: a frame holds thousands of
        results, and a pair per result was that many more objects for the garbage collector (see send_queue.py)."""
        futures: List[ScalerFuture] = []
        plain: List[TaskResult] = []
        others = []
        pending = self._pending
        get = pending.get
        pop = pending.pop
        for result in results:
            if result.status == SUCCESS and not result.in_object:
                task_id = result.task_id
                future = get(task_id)
                if future is not None and not future._held_objects:
                    if pop(task_id, None) is future:  # else cancelled meanwhile, by clear() or a closing connection
                        futures.append(future)
                        plain.append(result)
                    continue
            others.append(result)
        for future, result in zip(futures, plain):
            _answered(future, result.payload)
        if output.labels:  # a streaming client's: no more output will come for these
            for result in plain:
                output.forget_task(result.task_id)
        settle_successes(futures, plain)
        for result in others:
            self._on_task_result(result)

    def _on_task_output(self, message: TaskOutput) -> None:
        output.on_task_output(message.task_id, message.stream, message.data, self.task_number(message.task_id))

    def _on_task_result(self, result: TaskResult) -> None:
        task_id = result.task_id
        if output.labels:
            output.forget_task(task_id)
        fetching = result.in_object and result.status == SUCCESS
        with self._lock:
            future = self._pending.pop(task_id, None)
            if future is not None and future._held_objects and not fetching:
                self._release_locked(future._held_objects)
        if future is None:
            if result.in_object:
                self._queue(ObjectDelete(object_ids=[task_id]))  # a result crossing a cancel still must be freed
            return
        status = result.status
        if status == SUCCESS:
            if not result.in_object:
                self._settle_success(future, result, result.payload)
            elif future.done():
                _answered(future)
                self._queue(ObjectDelete(object_ids=[task_id]))
                self._release(future._held_objects)
            else:
                self._fetches[task_id] = _ResultFetch(future, result, future._held_objects)
                self._queue(ObjectRequest(object_ids=[task_id]))
        elif status == CANCELED:
            _answered(future)
            future._cancel_locally()
        else:
            _answered(future)
            future._settle(failure_of(result, future._retries), True, profiling_info_of(future, result))

    def _on_object_response(self, response: ObjectResponse) -> None:
        object_id = response.object_id
        fetch = self._fetches.get(object_id)
        if fetch is None:
            return
        if not response.found:
            self._fetch_failed(object_id, f"the result of task {object_id.hex()} was lost")
            return
        if response.holder_address:  # held by a worker: fetched there, or relayed if that worker is out of reach
            data = self._io.data
            assert data is not None  # made by the IO thread, which runs this
            now = time.monotonic()
            key = response.holder_public_key
            if data.reachable(response.holder_address, now, key):
                data.fetch(response.holder_address, object_id, now, key)
            else:
                self._queue(ObjectRequest(object_ids=[object_id], via_scheduler=True))
            return
        if response.chunk_index == 0:
            fetch.chunks = []  # a relayed upload that started over (its holder was lost, the result made again)
        fetch.chunks.append(response.payload)
        if len(fetch.chunks) < response.chunk_count:
            return
        self._fetched(object_id, fetch.chunks[0] if len(fetch.chunks) == 1 else b"".join(fetch.chunks))

    def _on_data_keys(self, message: DataKeys) -> None:
        """IO thread, with CurveZMQ, just before a HelloReply: the keys our data address is to accept. We answer with
        the key it serves under, which the scheduler hands the workers that fetch here."""
        io = self._io
        if io.accept_data_keys(message.authorized_keys):
            assert io.curve is not None  # accept_data_keys says so
            self._queue(DataKeys(public_key=raw_key(io.curve.public_key)))

    def _on_upload_request(self, request: ObjectRequest) -> None:
        """IO thread: the scheduler relays objects this client keeps to a peer that cannot fetch them here (a worker
        of an older version, or one that cannot reach this client): their bytes, as ObjectPut chunks."""
        for object_id in request.object_ids:
            payload = self._io.served.get(object_id)
            if payload is None:  # deleted meanwhile
                self._queue(ObjectResponse(object_id=object_id, found=False))
            else:
                self._queue(LargeObject(object_id, 0, "", payload, upload=True))

    def _on_data(self, object_id: bytes, payload: Any, timed_out: bool) -> None:
        """IO thread: a fetch from a holder ended. Without the bytes (the holder could not be reached, or no longer
        holds it: lost, and made again meanwhile), the scheduler is asked to relay them; it answers once it has them."""
        if object_id not in self._fetches:
            return
        if payload is None:
            if timed_out:
                logger.warning(
                    "no answer from the worker holding the result of task %s: asking the scheduler to relay it",
                    object_id.hex(),
                )
            self._queue(ObjectRequest(object_ids=[object_id], via_scheduler=True))
            return
        self._fetched(object_id, payload)

    def _fetched(self, object_id: bytes, payload: Any) -> None:
        """`payload`: bytes-like (a view of a received message); a custom deserializer is given bytes, as promised."""
        fetch = self._fetches.pop(object_id)
        self._queue(ObjectDelete(object_ids=[object_id]))
        self._release(fetch.held_objects)
        if type(payload) is SharedBytes:  # from a holder on this host: its memory, mapped
            payload = payload.to_read(fetch.future._deserialize is default_loads)
        elif type(payload) is not bytes and fetch.future._deserialize is not default_loads:
            payload = bytes(payload)
        self._settle_success(fetch.future, fetch.result, payload)

    def _fetch_failed(self, object_id: bytes, reason: str) -> None:
        fetch = self._fetches.pop(object_id)
        self._release(fetch.held_objects)
        _answered(fetch.future)
        fetch.future._settle(ScalerError(reason), True, None)

    def _release(self, object_ids: Optional[List[bytes]]) -> None:
        if object_ids:
            with self._lock:
                self._release_locked(object_ids)

    def _release_locked(self, object_ids: List[bytes]) -> None:
        """The objects a task read are no longer needed by it: those no other task needs are deleted."""
        deleted = self._ledger.release(object_ids)
        if deleted and self.closed_reason is None:
            self._queue_locked(ObjectDelete(object_ids=deleted))

    def _settle_success(self, future: ScalerFuture, result: TaskResult, payload: bytes) -> None:
        _answered(future, payload)
        if future.done():
            return  # cancelled by the user: not worth deserializing
        try:
            value = future._deserialize(payload)
        except Exception as error:
            future._settle(error, True, None)
            return
        future._settle(value, False, profiling_info_of(future, result))


def _answered(future: ScalerFuture, payload: Optional[bytes] = None) -> None:
    """The scheduler answered: what a restarted one would need for the task is dropped. A graph key's successful
    result (`payload`) is kept by its graph while other nodes need it, in case they must run again."""
    graph = future._graph
    if graph is not None:
        if payload is not None:
            graph.answered(future._task_id, payload)
        future._graph = None
    future._message = None


_LIVE_CONNECTIONS: weakref.WeakSet[Connection] = weakref.WeakSet()


@atexit.register
def _disconnect_at_exit() -> None:
    """Tell the scheduler we are gone, so it cancels our tasks now rather than after the client timeout.

    Without waiting for its answer: an exiting process must not hang on a scheduler that is gone.
    """
    for connection in list(_LIVE_CONNECTIONS):
        if connection.pid != os.getpid():
            continue  # inherited through fork: its IO thread does not exist here
        try:
            connection.close(shutdown_cluster=False, timeout_seconds=0)
        except Exception:
            logger.debug("disconnect at exit failed", exc_info=True)


def _close_after_fork() -> None:
    """A forked child has the parent's connections but not their IO threads: using one must fail, not hang."""
    for connection in list(_LIVE_CONNECTIONS):
        # No lock: one may have been held by a parent thread at the fork, and would never be released here.
        connection.closed_reason = "inherited through fork: create a new Client in this process"
    _LIVE_CONNECTIONS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_after_fork)
