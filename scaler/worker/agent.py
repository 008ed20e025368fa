"""The worker agent: one per worker, the process that talks to the scheduler for its processor.

It registers with Hello, heartbeats, queues the tasks it is sent, fetches and caches the functions and objects they
need, feeds them one at a time to its processor (a separate process, see zygote.py) and sends the results back. It
answers cancels, balance requests and Goodbye, and exits when the scheduler has been silent for the death timeout.

Nested tasks: a task that waits on a future "parks" its processor (see processor.py). The agent takes back the tasks it
had handed that processor ahead, and from then on feeds another processor (a spare one, or a fresh fork), so that the
children the parent waits for never queue behind it: with every worker's processor parked, children still run. A
parked processor finishes its task and becomes a spare. Tasks submitted from tasks are run newest first (see
task_queue.py), which keeps the number of parked processors near the nesting depth rather than the tree's width.
Everything happens on one thread around one poll of the scheduler socket, the processor's channel, the fork server's
control socket and a signal wake-up socket, so no state is ever shared between threads.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

import cloudpickle
import psutil
import zmq

from scaler import config
from scaler.errors import ProcessorDiedError, ScalerError
from scaler.io.sockets import create_dealer, make_identity
from scaler.protocol import (
    PROTOCOL_VERSION,
    ArgumentKind,
    BalanceRequest,
    BalanceResponse,
    Goodbye,
    HeartbeatEcho,
    Hello,
    HelloReply,
    ObjectDelete,
    ObjectRequest,
    ObjectResponse,
    ProtocolError,
    Role,
    Task,
    TaskCancel,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerHeartbeat,
    decode_frame,
)
from scaler.worker.channel import ProcessorArgument, ProcessorResult, ProcessorTask
from scaler.worker.lifetime import parent_alive
from scaler.worker.objects import ObjectCache
from scaler.worker.outbox import Outbox
from scaler.worker.processor_link import ProcessorLink
from scaler.worker.settings import WorkerSettings
from scaler.worker.task_queue import QueuedTask, TaskQueue
from scaler.worker.zygote import ProcessorZygote, ZygoteGone, describe_wait_status

EXIT_OK = 0
EXIT_SCHEDULER_LOST = 1  # death timeout, or the launcher that started us is gone
EXIT_REFUSED = 2  # the scheduler refused our Hello (protocol version)
EXIT_BROKEN = 3  # the worker can no longer start processors

_MAX_FRAMES_PER_READ = 1000  # then the loop runs once before reading on, so results and heartbeats keep flowing
_FORK_TIMEOUT_SECONDS = 10.0  # the fork server answers in milliseconds; this only guards against a wedged one
_EXIT_STATUS_TIMEOUT_SECONDS = 2.0  # a dead processor is reaped at once; this only bounds the wait for its status
_DISCONNECT_LINGER_MS = 1000  # lets WorkerDisconnect leave before the socket closes, without hanging on a dead link
_BIT_PROCESSOR_INITIALIZED = 1  # heartbeat flags, shown as "ITL" by scaler_top
_BIT_HAS_TASK = 2  # a task is queued or running here
_BIT_TASK_LOCK = 4  # the processor is busy running a task
# Idle processors kept after parkings, so the next parking reuses one rather than forking a processor that has to
# connect its nested client and fetch functions again; a spare idle for a while goes.
_MAX_SPARE_PROCESSORS = 16
_SPARE_IDLE_SECONDS = 10.0


def run_worker(settings: WorkerSettings, name: str, parent_pid: Optional[int] = None) -> int:
    """Run one worker in the calling process until it stops; returns its exit code.

    Call it before this process creates any ZeroMQ context or thread: the processor fork server is forked first.
    """
    zygote = ProcessorZygote.start()
    try:
        return WorkerAgent(settings, name, zygote, parent_pid).run()
    finally:
        zygote.stop(timeout_seconds=1.0)


class WorkerAgent:
    def __init__(self, settings: WorkerSettings, name: str, zygote: ProcessorZygote, parent_pid: Optional[int]) -> None:
        self._settings = settings
        self._name = name
        self._zygote = zygote
        self._parent_pid = parent_pid
        self._identity = make_identity("W")
        self._cache = ObjectCache(settings.object_retention_seconds)
        self._queue = TaskQueue()
        self._to_request: Set[bytes] = set()
        self._requested: Set[bytes] = set()  # asked for, not (completely) received yet
        self._forget: List[bytes] = []  # evicted ids the processor should drop with the next task
        self._processor: Optional[ProcessorLink] = None  # the one tasks are handed to
        self._parked: List[ProcessorLink] = []  # each runs one task that waited on a future; handed nothing more
        self._spares: List[ProcessorLink] = []  # idle, formerly parked
        self._durations: Dict[bytes, float] = {}  # function id -> recent run time (moving average), seconds
        self._connected = False
        self._heartbeat_interval = settings.heartbeat_interval_seconds
        self._lag_us = 0
        self._last_heard = time.monotonic()
        self._next_heartbeat = 0.0
        self._next_garbage_collect = time.monotonic() + settings.garbage_collect_interval_seconds
        self._next_orphan_check = 0.0
        self._malformed_frames = 0
        self._exit_code: Optional[int] = None
        self._disconnect_reason = ""  # set when we leave on our own and should tell the scheduler
        self._agent_process = psutil.Process()
        self._handlers: Dict[type, Callable[[object], None]] = {
            HelloReply: self._on_hello_reply,
            HeartbeatEcho: self._on_heartbeat_echo,
            Task: self._on_task,
            TaskCancel: self._on_task_cancel,
            ObjectResponse: self._on_object_response,
            ObjectDelete: self._on_object_delete,
            BalanceRequest: self._on_balance_request,
            Goodbye: self._on_goodbye,
        }

    # --- life cycle ---------------------------------------------------------------------------------------------------

    def run(self) -> int:
        self._wake_read, wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        wake_write.setblocking(False)
        signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda number, frame: None)  # the wake-up socket tells the loop which one came
        self._context = zmq.Context(io_threads=1)
        self._dealer = create_dealer(self._context, self._settings.address, self._identity, self._settings.curve_keys)
        self._outbox = Outbox(self._dealer)
        self._poller = zmq.Poller()
        self._poller.register(self._dealer, zmq.POLLIN)
        self._poller.register(self._wake_read.fileno(), zmq.POLLIN)
        self._poller.register(self._zygote.fileno(), zmq.POLLIN)
        try:
            self._start_processor()
            self._outbox.add(
                Hello(
                    protocol_version=PROTOCOL_VERSION,
                    role=Role.worker,
                    name=self._identity.decode(),
                    hostname=socket.gethostname(),
                    pid=os.getpid(),
                    capacity=self._settings.queue_size,
                )
            )
            self._outbox.flush()
            logging.info("%s: connecting to %s as %s", self._name, self._settings.address, self._identity.decode())
            while self._exit_code is None:
                self._run_once()
        except ZygoteGone as error:
            self._stop(EXIT_BROKEN, f"cannot start processors: {error}")
        except Exception:
            logging.exception("%s: crashed", self._name)
            self._outbox.clear()  # what failed to go out once would fail again while closing
            self._stop(EXIT_BROKEN, "crashed")
        finally:
            self._close(wake_write)
        return self._exit_code

    def _stop(self, exit_code: int, reason: str, disconnect: bool = False) -> None:
        if self._exit_code is not None:
            return
        self._exit_code = exit_code
        if disconnect:
            self._disconnect_reason = reason
        log = logging.info if exit_code == EXIT_OK else logging.error
        log("%s: exiting: %s", self._name, reason)

    def _close(self, wake_write: socket.socket) -> None:
        linger = 0
        if self._connected and self._disconnect_reason:
            self._outbox.add(WorkerDisconnect(reason=self._disconnect_reason))
            linger = _DISCONNECT_LINGER_MS
        if self._connected and self._exit_code != EXIT_SCHEDULER_LOST:
            self._flush()  # results of finished tasks still count
        self._kill_all_processors()
        signal.set_wakeup_fd(-1)
        self._wake_read.close()
        wake_write.close()
        self._dealer.close(linger=linger)
        self._context.term()

    # --- the loop -----------------------------------------------------------------------------------------------------

    def _run_once(self) -> None:
        now = time.monotonic()
        timeout_seconds = max(0.0, self._next_deadline(now) - now)
        events = dict(self._poller.poll(math.ceil(timeout_seconds * 1000)))
        if self._wake_read.fileno() in events:
            self._on_signals()
        if self._dealer in events:
            self._read_scheduler()
        for processor in self._all_processors():
            if processor.fileno() in events:
                self._read_processor(processor)
        if self._zygote.fileno() in events:
            self._zygote.read_exits()
            # Its exit, not only its end of file: children its task forked may keep the socket open.
            for processor in self._all_processors():
                if self._zygote.has_exited(processor.pid):
                    self._read_processor(processor)
                    if self._is_registered(processor):
                        self._on_processor_died(processor)
        if self._exit_code is not None:
            return
        self._dispatch()
        self._run_timers(time.monotonic())
        self._flush()

    def _next_deadline(self, now: float) -> float:
        deadline = min(
            self._last_heard + self._settings.death_timeout_seconds,
            self._next_garbage_collect,
            now + config.DEFAULT_ORPHAN_CHECK_INTERVAL_SECONDS,
        )
        if self._connected:
            deadline = min(deadline, self._next_heartbeat)
        return deadline

    def _run_timers(self, now: float) -> None:
        if now - self._last_heard >= self._settings.death_timeout_seconds:
            if self._connected:
                reason = f"nothing heard from the scheduler for {self._settings.death_timeout_seconds:g}s"
            else:
                reason = f"no answer from {self._settings.address} within {self._settings.death_timeout_seconds:g}s"
            self._stop(EXIT_SCHEDULER_LOST, reason)
            return
        if self._connected and now >= self._next_heartbeat:
            self._send_heartbeat()
            self._next_heartbeat = now + self._heartbeat_interval
        self._retire_idle_spares(now)
        if now >= self._next_garbage_collect:
            self._forget_objects(self._cache.evict_unused(now))
            self._next_garbage_collect = now + self._settings.garbage_collect_interval_seconds
        if self._parent_pid is not None and now >= self._next_orphan_check:
            self._next_orphan_check = now + config.DEFAULT_ORPHAN_CHECK_INTERVAL_SECONDS
            if not parent_alive(self._parent_pid):
                self._stop(EXIT_SCHEDULER_LOST, f"the cluster process {self._parent_pid} is gone")

    def _on_signals(self) -> None:
        try:
            received = self._wake_read.recv(64)
        except BlockingIOError:
            return
        for signum in received:
            if signum in (signal.SIGTERM, signal.SIGINT):
                name = signal.Signals(signum).name
                self._stop(EXIT_OK, f"received {name}", disconnect=True)

    # --- from the scheduler -------------------------------------------------------------------------------------------

    def _read_scheduler(self) -> None:
        received_any = False
        for _ in range(_MAX_FRAMES_PER_READ):
            try:
                frame = self._dealer.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            received_any = True
            try:
                messages = decode_frame(frame)
            except ProtocolError as error:
                self._malformed_frames += 1
                if self._malformed_frames == 1:
                    logging.warning("%s: dropped a malformed frame from the scheduler: %s", self._name, error)
                continue
            for message in messages:
                if self._exit_code is not None:
                    return
                self._handle(message)
        if received_any:
            self._last_heard = time.monotonic()

    def _handle(self, message: object) -> None:
        handler = self._handlers.get(type(message))
        if handler is None or not (self._connected or isinstance(message, (HelloReply, Goodbye))):
            logging.debug("%s: ignored %s", self._name, type(message).__name__)
            return
        handler(message)

    def _on_hello_reply(self, reply: HelloReply) -> None:
        if self._connected:
            return
        if not reply.accepted:
            self._stop(EXIT_REFUSED, f"scheduler refused this worker: {reply.reason}")
            return
        self._connected = True
        if reply.heartbeat_interval_ms:  # the scheduler times peers out by its own interval, so it decides
            self._heartbeat_interval = reply.heartbeat_interval_ms / 1000
        logging.info(
            "%s: connected to %s, capacity %d, heartbeat every %gs",
            self._name,
            self._settings.address,
            self._settings.queue_size,
            self._heartbeat_interval,
        )

    def _on_heartbeat_echo(self, echo: HeartbeatEcho) -> None:
        self._lag_us = max(0, time.monotonic_ns() // 1000 - echo.sent_at_us)

    def _on_goodbye(self, goodbye: Goodbye) -> None:
        self._stop(EXIT_OK, f"scheduler said goodbye: {goodbye.reason}")

    def _on_task(self, task: Task) -> None:
        task_id = task.task_id
        if task_id in self._queue or any(task_id in processor.pipe for processor in self._all_processors()):
            logging.warning("%s: ignored task %s, received twice", self._name, task_id.hex())
            return
        needs = _objects_needed(task)
        self._cache.pin(needs)
        missing = {object_id for object_id in needs if object_id not in self._cache}
        self._queue.add(QueuedTask(task_id, task, needs, missing))
        self._to_request.update(missing)

    def _on_object_response(self, response: ObjectResponse) -> None:
        object_id = response.object_id
        if not response.found:
            self._requested.discard(object_id)
            self._cache.discard_partial(object_id)
            for queued in self._queue.object_unavailable(object_id):
                error = ScalerError(f"object {object_id.hex()} needed by task {queued.task_id.hex()} was not found")
                self._finish(queued, TaskStatus.failed, cloudpickle.dumps(error), str(error))
            return
        try:
            complete = self._cache.add_chunk(object_id, response.payload, response.chunk_index, response.chunk_count)
        except ValueError as error:
            logging.warning("%s: dropped a bad object chunk: %s", self._name, error)
            return
        if complete:
            self._requested.discard(object_id)
            self._queue.object_arrived(object_id)

    def _on_object_delete(self, delete: ObjectDelete) -> None:
        self._forget_objects(self._cache.delete(delete.object_ids))

    def _forget_objects(self, object_ids: List[bytes]) -> None:
        self._forget.extend(object_ids)  # the processor drops its copies with the next task it is handed
        for object_id in object_ids:
            self._durations.pop(object_id, None)

    def _on_task_cancel(self, cancel: TaskCancel) -> None:
        for processor in self._all_processors():
            if any(task_id in processor.pipe for task_id in cancel.task_ids):
                self._read_processor(processor)  # results sent already beat the cancel; we learn what has started
        processor = self._processor
        drops: List[bytes] = []
        for task_id in cancel.task_ids:
            queued = self._queue.remove(task_id)
            parked = next((parked for parked in self._parked if parked.started == task_id), None)
            if queued is not None:
                self._finish(queued, TaskStatus.canceled)
            elif parked is not None:
                self._cancel_running(parked, task_id)
            elif self._processor is not None and task_id in self._processor.pipe:
                if self._processor.started == task_id:
                    self._cancel_running(self._processor, task_id)
                elif task_id not in self._processor.canceled_ahead:
                    # Handed ahead, not started: answered now, dropped by the processor before its turn (it reads
                    # orders between tasks), or killed should it start before the order arrives.
                    self._finish(self._processor.pipe[task_id], TaskStatus.canceled)
                    drops.append(task_id)
            else:
                self._outbox.add(TaskResult(task_id=task_id, status=TaskStatus.not_found))
        if drops and self._processor is processor and processor is not None:
            try:
                processor.request_drops(drops)
            except OSError:
                pass  # the processor is gone: the poll sees its end of file next, and its pipe is recovered then

    def _on_balance_request(self, request: BalanceRequest) -> None:
        taken = self._queue.take_newest(request.count)
        for queued in taken:
            self._cache.unpin(queued.needs)
        self._outbox.add(BalanceResponse(task_ids=[queued.task_id for queued in taken]))

    # --- the processor ------------------------------------------------------------------------------------------------

    def _start_processor(self) -> None:
        pid, sock = self._zygote.fork_processor(_FORK_TIMEOUT_SECONDS)
        self._processor = ProcessorLink(pid, sock)
        self._poller.register(self._processor.fileno(), zmq.POLLIN)
        logging.debug("%s: processor %d started", self._name, pid)

    def _all_processors(self) -> List[ProcessorLink]:
        active = [self._processor] if self._processor is not None else []
        return active + self._parked + self._spares

    def _is_registered(self, processor: ProcessorLink) -> bool:
        return processor is self._processor or processor in self._parked or processor in self._spares

    def _unregister(self, processor: ProcessorLink) -> None:
        """Forget a processor wherever it is (active, parked or spare); the caller kills or closes it."""
        if processor is self._processor:
            self._processor = None
        elif processor in self._parked:
            self._parked.remove(processor)
        elif processor in self._spares:
            self._spares.remove(processor)
        self._poller.unregister(processor.fileno())

    def _kill(self, processor: ProcessorLink) -> None:
        self._unregister(processor)
        processor.kill()
        self._zygote.ignore_exit(processor.pid)

    def _kill_all_processors(self) -> None:
        for processor in self._all_processors():
            self._kill(processor)

    def _park(self, processor: ProcessorLink, task_id: bytes) -> None:
        """The processor's running task waits on a future: take back what it was handed ahead, feed another one."""
        if processor is not self._processor or processor.started != task_id:
            return  # not the processor tasks are handed to (cannot happen: only it runs tasks it was handed)
        ahead = [processor.take(other) for other in list(processor.pipe) if other != task_id]
        self._queue.put_back([queued for queued in ahead if queued is not None])
        try:
            processor.end_parking()
        except OSError:
            pass  # it is gone: the poll sees its end of file next
        self._parked.append(processor)
        logging.debug("%s: task %s waits on a future, parked processor %d", self._name, task_id.hex(), processor.pid)
        if self._spares:
            self._processor = self._spares.pop()
        else:
            self._processor = None
            self._start_processor()

    def _unpark(self, processor: ProcessorLink) -> None:
        """A parked processor's task is done: it becomes a spare, or goes if there are enough."""
        self._parked.remove(processor)
        processor.idle_since = time.monotonic()
        self._spares.append(processor)
        if len(self._spares) > _MAX_SPARE_PROCESSORS:
            self._kill(self._spares[0])

    def _retire_idle_spares(self, now: float) -> None:
        for spare in [spare for spare in self._spares if now - spare.idle_since > _SPARE_IDLE_SECONDS]:
            self._kill(spare)

    def _dispatch(self) -> None:
        """Hand ready tasks to the processor: one if it is idle, more while their expected run time is short.

        Tasks in the pipe cannot be balanced away, so a function is trusted to be short only once it was seen to be.
        """
        processor = self._processor
        if processor is None:
            return
        handed = []
        budget = config.DEFAULT_PREFETCH_SECONDS
        planned_seconds = processor.pipe_expected_seconds
        while len(processor.pipe) + len(handed) < config.DEFAULT_PREFETCH_TASKS:
            queued = self._queue.first_ready()
            if queued is None:
                break
            expected = min(self._durations.get(queued.task.function_id, budget), budget)
            if (processor.pipe or handed) and planned_seconds + expected > budget:
                break
            self._queue.pop_ready()
            queued.expected_seconds = expected
            planned_seconds += expected
            handed.append((queued, self._processor_task(queued.task, processor)))
        if handed:
            try:
                processor.hand(handed)
            except OSError:
                pass  # the processor is gone: the poll sees its end of file next, and its pipe is recovered then

    def _processor_task(self, task: Task, processor: ProcessorLink) -> ProcessorTask:
        # Forgetting goes first on both sides: an evicted object fetched again must be sent again.
        forget, self._forget = self._forget, []
        if forget:
            processor.forget(forget)
        serializer_id = task.serializer_id
        serializer_payload = None
        if serializer_id:
            serializer_payload = self._payload_for(processor, b"", serializer_id)
        arguments = []
        for argument in task.args:
            if argument.kind == ArgumentKind.inline:
                arguments.append(ProcessorArgument(argument.name, b"", argument.data, False))
            elif argument.kind == ArgumentKind.object_ref:
                payload = self._payload_for(processor, serializer_id, argument.data)
                arguments.append(ProcessorArgument(argument.name, argument.data, payload, True))
            else:  # a graph result is used by one task or a few: not worth a deserialized copy in the processor
                arguments.append(ProcessorArgument(argument.name, argument.data, self._cache.get(argument.data), False))
        return ProcessorTask(
            task.task_id,
            serializer_id,
            serializer_payload,
            task.function_id,
            self._payload_for(processor, serializer_id, task.function_id),
            arguments,
            task.profiling,
            forget,
        )

    def _payload_for(self, processor: ProcessorLink, serializer_id: bytes, object_id: bytes) -> Optional[bytes]:
        """The object's bytes, or None when this processor already has them (to deserialize with that serializer)."""
        payload = self._cache.get(object_id)
        key = (serializer_id, object_id)
        if key in processor.held:
            return None
        processor.held.add(key)
        return payload

    def _read_processor(self, processor: ProcessorLink) -> None:
        for report in processor.reader.read_available():
            if report.result is not None:
                self._on_processor_result(processor, report.result)
            for task_id in report.dropped:
                # Only a drop we ordered (the task canceled, and answered, then): a task of that id in the pipe is
                # otherwise a newer hand-off that must run and be answered.
                if task_id in processor.canceled_ahead:
                    processor.take(task_id)
            if report.started is not None:
                processor.started = report.started
            if report.blocked is not None:
                self._park(processor, report.blocked)
        if processor.reader.closed:
            self._on_processor_died(processor)
        elif processor.started is not None and processor.started in processor.canceled_ahead:
            self._cancel_running(processor, processor.started)  # it started before our drop order reached it

    def _on_processor_result(self, processor: ProcessorLink, result: ProcessorResult) -> None:
        queued = processor.take(result.task_id)
        if queued is None:
            return  # canceled while it waited in the pipe, and already answered
        function_id = queued.task.function_id
        seconds = result.duration_us / 1_000_000
        previous = self._durations.get(function_id)
        self._durations[function_id] = seconds if previous is None else 0.8 * previous + 0.2 * seconds
        status = TaskStatus.success if result.succeeded else TaskStatus.failed
        self._finish(queued, status, result.payload, result.error_text, result)
        if processor in self._parked and not processor.pipe:
            self._unpark(processor)

    def _cancel_running(self, processor: ProcessorLink, task_id: bytes) -> None:
        """Stop a running task the only way there is: kill its processor (the active one is replaced)."""
        was_active = processor is self._processor
        self._kill(processor)
        logging.info("%s: canceled running task %s, its processor killed", self._name, task_id.hex())
        queued = processor.take(task_id)
        if queued is not None:
            self._finish(queued, TaskStatus.canceled)
        self._recover_pipe(processor)
        if was_active:
            self._start_processor()

    def _on_processor_died(self, processor: ProcessorLink) -> None:
        was_active = processor is self._processor
        self._unregister(processor)
        processor.close_after_death()
        how = describe_wait_status(self._zygote.wait_exit(processor.pid, _EXIT_STATUS_TIMEOUT_SECONDS))
        running = processor.take(processor.started) if processor.started is not None else None
        if running is None:
            logging.warning(
                "%s: processor %d died with %s between tasks, starting a new one", self._name, processor.pid, how
            )
        else:
            message = f"processor died with {how} while running task {running.task_id.hex()}"
            logging.warning("%s: %s, starting a new processor", self._name, message)
            self._finish(running, TaskStatus.failed, cloudpickle.dumps(ProcessorDiedError(message)), message)
        self._recover_pipe(processor)
        if was_active:
            self._start_processor()

    def _recover_pipe(self, processor: ProcessorLink) -> None:
        """Tasks handed to a processor that is gone and never started them go back to the head of the queue."""
        unstarted = [processor.take(task_id) for task_id in list(processor.pipe)]
        self._queue.put_back([queued for queued in unstarted if queued is not None])

    # --- to the scheduler ---------------------------------------------------------------------------------------------

    def _finish(
        self,
        queued: QueuedTask,
        status: TaskStatus,
        payload: bytes = b"",
        error_text: str = "",
        profile: Optional[ProcessorResult] = None,
    ) -> None:
        """Send the one TaskResult of a task, as an object first if its result is large."""
        self._cache.unpin(queued.needs)
        task_id = queued.task_id
        if status != TaskStatus.success and len(payload) > config.DEFAULT_OBJECT_CHUNK_BYTES:
            # Failures stay inline (clients read them from the TaskResult); one this big could not be encoded.
            too_large = RuntimeError(f"the task's exception was too large to send ({len(payload)} bytes serialized)")
            payload = cloudpickle.dumps(too_large)
        in_object = status == TaskStatus.success and len(payload) > config.DEFAULT_INLINE_LIMIT_BYTES
        if in_object:
            self._outbox.add_result_object(task_id, payload)
            payload = b""
        result = TaskResult(task_id=task_id, status=status, payload=payload, in_object=in_object, error_text=error_text)
        if profile is not None and queued.task.profiling:
            result.duration_us = profile.duration_us
            result.cpu_time_us = profile.cpu_time_us
            result.peak_memory = profile.peak_memory
        self._outbox.add(result, len(payload))

    def _send_heartbeat(self) -> None:
        processor = self._processor
        processor_cpu, processor_rss = processor.usage() if processor is not None else (0.0, 0)
        active_running = 1 if processor is not None and processor.started is not None else 0
        queued = len(self._queue) + (len(processor.pipe) - active_running if processor is not None else 0)
        running = active_running + len(self._parked)  # a parked task is still running: it waits on its children
        flags = (
            (_BIT_PROCESSOR_INITIALIZED if processor is not None else 0)
            | (_BIT_HAS_TASK if running or queued else 0)
            | (_BIT_TASK_LOCK if active_running else 0)
        )
        self._outbox.add(
            WorkerHeartbeat(
                sent_at_us=time.monotonic_ns() // 1000,
                agent_cpu=self._agent_process.cpu_percent(None),
                agent_rss=self._agent_process.memory_info().rss,
                processor_cpu=processor_cpu,
                processor_rss=processor_rss,
                queued=queued,
                lag_us=self._lag_us,
                flags=flags,
                running=running,
            )
        )

    def _flush(self) -> None:
        to_request = self._to_request - self._requested
        self._to_request.clear()
        if to_request:
            self._requested.update(to_request)
            self._outbox.add(ObjectRequest(object_ids=list(to_request)))
        self._outbox.flush()


def _objects_needed(task: Task) -> Tuple[bytes, ...]:
    needs = [task.function_id]
    if task.serializer_id:
        needs.append(task.serializer_id)
    for argument in task.args:
        if argument.kind != ArgumentKind.inline:
            needs.append(argument.data)
    return tuple(needs)
