"""Internal: the processor: the process that runs user code, one task at a time, for its worker agent.

It lives apart from the agent so that a long CPU-bound task, a crash or a kill never stops the agent's heartbeats.
It keeps functions, serializers and objects deserialized between tasks, so a function is unpickled once per processor.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import cloudpickle

from scaler import config
from scaler import task_context as context
from scaler.errors import ResultSerializationError
from scaler.io.shared_bytes import SharedBytes
from scaler.logs import flush_logs
from scaler.serializer import DefaultSerializer, default_loads, dump_to_shared, known_large
from scaler.tracebacks import SERIALIZER_FILES, task_traceback
from scaler.worker.capture import OutputCapture
from scaler.worker.channel import MessageReader, SharedProgress, encode_shared, send_encoded, split_for_descriptors
from scaler.worker.heap import IDLE_SECONDS, Heap
from scaler.worker.lifetime import parent_alive
from scaler.worker.mapped_inputs import MappedInputs
from scaler.worker.processor_messages import (
    RESULT_DELAY_SECONDS,
    ProcessorArgument,
    ProcessorOrders,
    ProcessorReport,
    ProcessorResult,
    ProcessorTask,
)
from scaler.worker.profiling import CallProfile
from scaler.worker.spares import SpareFiles

# A result larger than this goes to the agent in shared memory (a SharedBytes): the agent holds results above the
# inline limit, and a copy through the channel would cost more than the memfd.
_SHARED_RESULT_BYTES = config.DEFAULT_INLINE_LIMIT_BYTES
# The large results a processor keeps as objects for the graph nodes it may run next (TaskRunner._made): at most
# this many, and this many bytes (the agent holds their bytes too, so they cost this much memory twice).
_MADE_COUNT = 8
_MADE_BYTES = 256 * 1024 * 1024
_MAPPED_COUNT = 32  # shared results kept mapped for the next task reading them (mapped_inputs.py)
_MAPPED_BYTES = 256 * 1024 * 1024
_NOTHING_LENT: Tuple[Tuple[int, int], ...] = ()  # what most tasks read of kept mappings; never added to
# A half-way report needs at least this many results: a handful of tasks is reported when it runs out.
_MIN_HALF_WAY_REPORT = 16
# The result flusher parks after finding nothing to watch this many delays in a row (see _Reporter).
_IDLE_WAKES_BEFORE_PARKING = 20
_SEQ, _TASK_ID, _STREAM_OUTPUT = 0, 1, 9  # in a ProcessorTask
_ValueKey = Tuple[bytes, bytes]  # (id of the serializer that deserialized it, object id)
_MISSING = object()


class _CloudpickleSerializer:
    """What an empty serializerId means."""

    # the client's default: plain values (most results) skip cloudpickle's costly Pickler set-up, same bytes
    serialize = staticmethod(DefaultSerializer.serialize)
    # pickle.loads itself: no Python frame per argument. Large payloads may be laid out with their buffers
    # (serializer.dump_with_buffers): those are read with default_loads (see _arguments and _value).
    deserialize = staticmethod(cloudpickle.loads)


_CLOUDPICKLE = _CloudpickleSerializer()


class _Serialized:
    """An object's bytes as the agent sent them, deserialized on first use."""

    __slots__ = ("payload",)

    def __init__(self, payload: bytes) -> None:
        self.payload = payload


class _LoadFailure:
    """Kept in place of an object that failed to deserialize: each task using it fails with that same error, since
    the agent sends an object's bytes to a processor only once."""

    __slots__ = ("error", "traceback")

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.traceback = error.__traceback__


def _ignore_sigterm() -> None:
    """Slurm (proctrack/linuxproc, cgroup) signals every process of a job step, and that SIGTERM retires the worker,
    whose running task must be allowed to finish: the processor ignores it. With a handler rather than SIG_IGN, which
    programs the task runs would inherit (exec resets handlers to the default, not SIG_IGN); and around each os.fork
    of the task (multiprocessing) the default is back, so a child ends on SIGTERM as it always would, even one
    signalled before it ran a line of Python (whose handler would have lost that signal)."""
    processor_pid = os.getpid()

    def on_sigterm(signum: int, frame: Any) -> None:
        if os.getpid() != processor_pid:  # a child forked on another thread, which kept this handler
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def set_handler(handler: Any) -> Callable[[], None]:
        def set_it() -> None:
            if threading.current_thread() is threading.main_thread():  # signal.signal works there only
                signal.signal(signal.SIGTERM, handler)

        return set_it

    signal.signal(signal.SIGTERM, on_sigterm)
    os.register_at_fork(before=set_handler(signal.SIG_DFL), after_in_parent=set_handler(on_sigterm))


def run_processor(
    sock: socket.socket, progress_fd: int, parent_pid: int, watch_parent: bool, capture: OutputCapture
) -> None:
    """Serve the agent on `sock` until it goes away: run its tasks in order, report their results in batches.

    `progress_fd`: the memory shared with the agent, where the processor writes which task it started and finished.
    `watch_parent`: poll for the parent's death from a thread, for systems without PR_SET_PDEATHSIG. Only then,
    because a thread here would make every os.fork() in user code warn (Python >= 3.12) and risk its locks.
    `capture`: sends what a task with streamOutput writes to fds 1 and 2 to the agent, ended before its result.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the agent decides when a processor stops, not Ctrl-C...
    _ignore_sigterm()  # ...nor a job manager's SIGTERM to every process of the job
    if watch_parent:
        threading.Thread(
            target=_exit_when_orphaned, args=(parent_pid,), name="scaler-orphan-check", daemon=True
        ).start()
    progress = SharedProgress(progress_fd)
    heap = Heap()  # keeps what tasks free for the next one, until idle
    runner = TaskRunner(progress.set_kept, progress.set_spare)
    reader = MessageReader(sock)
    reporter = _Reporter(sock)
    context.on_block = reporter.on_block
    pending: Deque[ProcessorTask] = deque()
    to_drop: Set[bytes] = set()
    orders_seen = 0
    after_parking: List[ProcessorOrders] = []  # read along with the end-of-parking order: new, handled as usual
    while True:
        if reporter.parked:
            # The agent took back every task sent before its end-of-parking order: answer at once, then skip them.
            # They are not reported dropped: the agent forgot them already and may hand them to us again, once we
            # are a spare, and a late "dropped" would then make it forget the new hand-off and discard its result.
            reporter.flush()
            for task in pending:
                runner.absorb(task)
            pending.clear()
            to_drop.clear()
            later = _skip_to_end_of_parking(reader, runner)
            if later is None:
                return
            after_parking = later
            reporter.parked = False
        # Orders are read between tasks only, and only when the agent says it posted some (in the shared memory: no
        # system call per task), so a drop reaches a task that is still pending or none at all; the agent learns
        # which from the progress we write.
        if pending or after_parking:
            orders = []
            posted = progress.orders_posted()
            if posted != orders_seen or reader.partial:
                orders_seen = posted
                orders = reader.read_available()
        else:
            reporter.flush()  # nothing left to run: what is unsent leaves now
            orders_seen = progress.orders_posted()
            orders = reader.wait(IDLE_SECONDS)
            if not orders and not reader.closed:  # idle a while: what was kept for the next tasks goes back
                heap.trim()
                runner.spares.release()
                orders = reader.wait()
        if reader.closed:
            return
        if after_parking:
            orders, after_parking = after_parking + orders, []
        for order in orders:
            if order.forget:  # sent only when every task handed before it was answered: none of them needs these
                runner.forget(order.forget)
            if order.spares:
                runner.spares.offer(order.spares)
            pending.extend(order.tasks)
            to_drop.update(order.drops)
        orders = []
        next_task: Any = None  # a ProcessorTask, indexed by position
        while pending and next_task is None:
            task = pending.popleft()
            task_id = task[_TASK_ID]
            if task_id in to_drop:
                # Absorbed in its turn, not earlier: its evictions must not reach tasks handed before it.
                runner.absorb(task)
                to_drop.discard(task_id)
                reporter.dropped(task_id)
            else:
                next_task = task
        if to_drop:  # a drop that arrived after its task ran means nothing
            to_drop.intersection_update(task[_TASK_ID] for task in pending)
        if next_task is None:
            continue
        reporter.before_task(len(pending))
        seq = next_task[_SEQ]
        progress.start(seq)
        if next_task[_STREAM_OUTPUT]:
            capture.begin(seq)
            result = runner.run(next_task)
            capture.end(seq)  # before its result leaves: the agent reads the output first
            progress.finish(seq)
            reporter.add(result, streamed=True)
        else:
            result = runner.run(next_task)
            progress.finish(seq)
            reporter.add(result)
        # Nothing of the task stays referenced while the loop waits for the next: its shared inputs and result would
        # keep their memory alive after the agent freed them.
        del result, next_task, task


class _Reporter:
    """Results wait here until the processor runs out of tasks or is half-way through many, or for
    RESULT_DELAY_SECONDS at most, then leave together. A task about to wait on a future (a nested task's, usually)
    parks its processor: it sends what waits and says so, and the agent takes back the tasks it handed ahead and
    starts them on another processor, so children never wait behind their blocked parent. A lock, because a task's
    own threads may wait on futures meanwhile, and the flusher thread sends results that have waited long enough.

    The flusher: results held while the next task runs would otherwise wait for its end, however long it runs (a
    function seen short may not be, this once). So when the processor starts a task with results waiting, a thread
    sends them should that one task run for RESULT_DELAY_SECONDS. Not once the oldest result is that old: a flood of
    short tasks, preempted now and then on a busy machine, would then send a report per delay and lose its batching;
    between tasks, the main thread sends results that old itself. The thread is started on first need only, that is
    once the agent hands this processor several tasks at once: a processor running long tasks one by one never has a
    second thread (which would make os.fork() in their code warn, on Python >= 3.12). While tasks keep coming it
    wakes once per delay, whatever their number and however often their results leave (each wake takes the GIL from
    the tasks), and waits for an event only once it found nothing waiting for _IDLE_WAKES_BEFORE_PARKING delays in a
    row: parking whenever a report had just left, as it did, meant an event to set and a thread to wake (with two
    GIL hand-offs) per report, and per report short tasks come a few dozen at a time (1.4 us of the processor's
    CPU per no-op task in bench/cpu_split.py)."""

    def __init__(self, sock: socket.socket, delay_seconds: float = RESULT_DELAY_SECONDS) -> None:
        self._sock = sock
        self._delay_seconds = delay_seconds
        self._lock = threading.Lock()  # the fields below; never held across a write
        self._send_lock = threading.Lock()  # taken before _lock: reports leave in the order they were taken
        self._results: List[ProcessorResult] = []
        self._shared: List[SharedBytes] = []  # the shared payloads of _results, in order
        self._dropped: List[bytes] = []
        self._oldest = 0.0  # when the oldest unsent result was added
        self._task_started = 0.0  # when the running task started, if results wait (what the flusher watches)
        self._armed = False  # the flusher watches the results waiting now
        self._flusher_wake: Optional[threading.Event] = None  # made with the flusher thread
        self._flusher_parked = False  # the flusher waits for _flusher_wake (else it sleeps at most one delay)
        self.parked = False
        self.streamed = False  # a task with streamOutput ran since the last report

    def add(self, result: ProcessorResult, streamed: bool = False) -> None:
        if type(result[2]) is SharedBytes:  # its descriptor travels beside the report, its size in its place
            shared = result[2]
            result = result._replace(payload=shared.size)
        else:
            shared = None
        with self._lock:
            if not self._results:
                self._oldest = time.monotonic()
            self._results.append(result)
            if shared is not None:
                self._shared.append(shared)
            if streamed:  # with its result, under the lock: the flusher may send it any time from now on
                self.streamed = True

    def dropped(self, task_id: bytes) -> None:
        with self._lock:
            self._dropped.append(task_id)

    def before_task(self, pending: int) -> None:
        """Before the next task: send once half of what we were handed is done (so the agent hands more while we
        run the rest, and we never idle waiting for it), or once the oldest result has waited long enough; if
        results still wait, the flusher sends them should the task outlast the delay."""
        results = len(self._results)
        if not results:
            return
        now = time.monotonic()
        if (results >= pending and results >= _MIN_HALF_WAY_REPORT) or now - self._oldest >= self._delay_seconds:
            self.flush()
            return
        self._task_started = now
        if not self._armed:
            self._arm()

    def flush(self) -> None:
        with self._send_lock:
            with self._lock:
                if not (self._results or self._dropped):
                    return
                report = self._take(None)
            self._write(report)

    def on_block(self) -> None:
        task_id = context.current_task_id
        if task_id is None or self.parked:
            return
        with self._send_lock:
            with self._lock:
                if self.parked:
                    return
                self.parked = True
                report = self._take(task_id)
            self._write(report)

    def _take(self, blocked: Optional[bytes]) -> List[Tuple[bytes, List[SharedBytes]]]:
        """The report of what waits, encoded (in several messages if it passes more descriptors than one may); called
        under _lock. The caller holds _send_lock and writes it after releasing _lock: the write may wait for the
        agent, and the task must not wait for the write to add a result (the agent reads reports while it writes
        orders, so a write always ends; see processor_link.py)."""
        report = ProcessorReport(self._results, self._dropped, blocked, self.streamed, self._shared)
        encoded = [encode_shared(message) for message in split_for_descriptors(report)]
        self._results = []
        self._shared = []
        self._dropped = []
        self._armed = False
        self.streamed = False
        return encoded

    def _write(self, encoded: List[Tuple[bytes, List[SharedBytes]]]) -> None:
        # Sent, a shared payload's descriptor is the agent's too: ours closes as the list goes.
        for body, shared in encoded:
            send_encoded(self._sock, body, shared)

    def _arm(self) -> None:
        with self._lock:
            if not self._results:
                return  # the flusher sent them meanwhile
            self._armed = True
            wake = self._flusher_parked
            self._flusher_parked = False
        if self._flusher_wake is None:
            self._flusher_wake = threading.Event()
            threading.Thread(target=self._flush_late, name="scaler-result-flusher", daemon=True).start()
        elif wake:
            self._flusher_wake.set()

    def _flush_late(self) -> None:
        """The flusher thread: send the waiting results once the task after them has run for the delay, unless the
        main thread sent them first; park once nothing waited for a while."""
        wake = self._flusher_wake
        assert wake is not None  # made before this thread starts
        idle_wakes = 0
        while True:
            with self._lock:
                due = self._armed and self._task_started + self._delay_seconds <= time.monotonic()
            if due:
                try:
                    self._flush_if_due()
                except OSError:
                    return  # the agent is gone; the main thread finds out on its own
                idle_wakes = 0
            with self._lock:
                if self._armed:
                    idle_wakes = 0
                    delay = max(0.0, self._task_started + self._delay_seconds - time.monotonic())
                elif idle_wakes < _IDLE_WAKES_BEFORE_PARKING:
                    # Armed before the next wake, it sees so then, before the task that started has run for the
                    # delay.
                    idle_wakes += 1
                    delay = self._delay_seconds
                else:
                    self._flusher_parked = True
                    delay = None
            if delay is None:
                wake.wait()  # _arm clears _flusher_parked and sets it
                wake.clear()
            else:
                time.sleep(delay)

    def _flush_if_due(self) -> None:
        """The flusher's send: the main thread may have sent the results, or armed for new ones, since it looked."""
        with self._send_lock:
            with self._lock:
                if not (self._armed and self._task_started + self._delay_seconds <= time.monotonic()):
                    return
                report = self._take(None)
            self._write(report)


def _skip_to_end_of_parking(reader: MessageReader, runner: TaskRunner) -> Optional[List[ProcessorOrders]]:
    """Skip the tasks ordered before the agent's end-of-parking order; returns the orders read after it, or None if
    the agent is gone.

    Skipped tasks are absorbed all the same: the agent counts what it sent with them as held here."""
    while True:
        orders = reader.wait()
        if reader.closed:
            return None
        for index, order in enumerate(orders):
            if order.end_of_parking:
                return orders[index + 1 :]
            if order.forget:
                runner.forget(order.forget)
            if order.spares:
                runner.spares.offer(order.spares)
            for task in order.tasks:
                runner.absorb(task)


def _exit_when_orphaned(parent_pid: int) -> None:
    stop = threading.Event()
    while not stop.wait(config.DEFAULT_ORPHAN_CHECK_INTERVAL_SECONDS):
        if not parent_alive(parent_pid):
            logging.error("processor: parent %d is gone, exiting", parent_pid)
            flush_logs()  # os._exit skips the flush at exit
            os._exit(1)


class TaskRunner:
    def __init__(
        self, say_kept: Optional[Callable[[int], None]] = None, say_spare: Optional[Callable[[int], None]] = None
    ) -> None:
        """`say_kept`: told the bytes of held results this processor keeps mapped whenever they change (before a task
        runs, and as they are forgotten), for the agent's memory samples, which leave them out; `say_spare`: told the
        bytes of its spare files (spares.py), which they add."""
        # Values are deserialized on first use, so absorbing a task that never runs costs no deserialization.
        self._values: Dict[_ValueKey, Any] = {}
        # The last large results this processor made, as the objects its tasks returned: a graph node placed here
        # next (the scheduler places nodes where their inputs are) reads its input as that object, not deserialized
        # from the shared memory the agent holds. Used once, then dropped; the bytes the agent holds stay the truth.
        # With each, the kept mappings its task was lent: an object may be a view of one, which a later task lent it
        # may have written to; then the object is not used.
        self._made: Dict[bytes, Tuple[Any, int, Tuple[Tuple[int, int], ...]]] = {}
        self._made_bytes = 0
        self._mapped = MappedInputs(_MAPPED_BYTES, _MAPPED_COUNT)
        self._lent: Sequence[Tuple[int, int]] = _NOTHING_LENT  # kept mappings the running task reads (_arguments)
        self._say_kept = say_kept
        self._kept_said = 0
        self.spares = SpareFiles(say_spare)  # files of freed results this processor wrote, to write results into

    def absorb(self, task: ProcessorTask) -> None:
        """Take what the agent sent with a task: its evictions, and the objects it now counts as held here."""
        _, _, serializer_id, serializer_payload, function_id, function_payload, arguments, _, forget, _ = task
        self._absorb_head(serializer_id, serializer_payload, function_id, function_payload, forget)
        self._hold_arguments(serializer_id, arguments)

    def _tell_kept(self) -> None:
        kept = self._mapped.kept_bytes()
        if kept != self._kept_said and self._say_kept is not None:
            self._say_kept(kept)
            self._kept_said = kept

    def forget(self, object_ids: Iterable[bytes]) -> None:
        """Drop the objects the agent evicted (the values of every serializer)."""
        forgotten = set(object_ids)
        self._mapped.forget(forgotten)
        self._tell_kept()
        if self._made:
            for object_id in forgotten & self._made.keys():
                self._made_bytes -= self._made.pop(object_id)[1]
        values = self._values
        for key in [key for key in values if key[1] in forgotten]:
            del values[key]
        self.spares.forgotten(forgotten)

    def _hold_arguments(self, serializer_id: bytes, arguments: List[ProcessorArgument]) -> None:
        values = self._values
        for _, object_id, payload, cacheable in arguments:
            if cacheable and payload is not None:
                values[(serializer_id, object_id)] = _Serialized(payload)

    def _absorb_head(
        self,
        serializer_id: bytes,
        serializer_payload: Optional[bytes],
        function_id: bytes,
        function_payload: Optional[bytes],
        forget: List[bytes],
    ) -> None:
        values = self._values
        if forget:
            self.forget(forget)
        if serializer_payload is not None:
            values[(b"", serializer_id)] = _Serialized(serializer_payload)
        if function_payload is not None:
            values[(serializer_id, function_id)] = _Serialized(function_payload)

    def run(self, task: ProcessorTask) -> ProcessorResult:
        # Tasks arrive as plain tuples of ProcessorTask's shape (channel.py): unpacked once, not read by name. What
        # absorb() takes is taken here too: the head only when there is one (rarely, after the first task of a
        # function), the arguments' objects as _arguments() reads them.
        _, task_id, serializer_id, serializer_bytes, function_id, function_bytes, arguments, profiling, forget, _ = task
        if forget or serializer_bytes is not None or function_bytes is not None:
            self._absorb_head(serializer_id, serializer_bytes, function_id, function_bytes, forget)
        try:
            # A serializer object is itself cloudpickled, hence keyed under the empty (cloudpickle) serializer id.
            serializer = self._value(_CLOUDPICKLE, b"", serializer_id) if serializer_id else _CLOUDPICKLE
            function = self._value(serializer, serializer_id, function_id)
            args, kwargs = self._arguments(serializer, serializer_id, arguments)
        except BaseException as error:  # noqa: B036 - a task's failure must never take the processor down
            self._hold_arguments(serializer_id, arguments)  # those after the one that failed: the agent counts them
            self._tell_kept()
            return _failure(task_id, error, 0, None, _LOADING)

        profile = CallProfile() if profiling else None
        context.current_task_id = task_id
        start = time.perf_counter_ns()
        try:
            if profile is None:
                value = function(*args, **kwargs)
            else:
                with profile:
                    value = function(*args, **kwargs)
            duration_us = (time.perf_counter_ns() - start) // 1000
        except BaseException as error:  # noqa: B036 - SystemExit/KeyboardInterrupt from a task are its failure
            return _failure(task_id, error, (time.perf_counter_ns() - start) // 1000, profile)
        finally:
            context.current_task_id = None
            if context.at_task_end:  # the task used a client it received: it says goodbye now, not at its timeout
                context.end_task()
        payload: Any
        try:
            if serializer is _CLOUDPICKLE and known_large(value, _SHARED_RESULT_BYTES):
                payload = dump_to_shared(value, self.spares.take())  # where the agent holds it: no copy between
                self._keep_made(task_id, value, payload.size)
            else:
                payload = serializer.serialize(value)
                if len(payload) > _SHARED_RESULT_BYTES:  # to the agent as a descriptor, not through the channel
                    payload = SharedBytes.create(payload, self.spares.take())
                elif payload.__class__ is not bytes:
                    payload = bytes(payload)
        except BaseException as error:  # noqa: B036 - an unserializable result is the task's failure
            return _result_failure(task_id, function, serializer, error, duration_us, profile)
        return _result(task_id, True, payload, "", duration_us, profile)

    def _arguments(
        self, serializer: Any, serializer_id: bytes, arguments: List[ProcessorArgument]
    ) -> Tuple[List[Any], Dict[str, Any]]:
        args: List[Any] = []
        kwargs: Dict[str, Any] = {}
        deserialize = serializer.deserialize
        lent: Any = _NOTHING_LENT  # where the kept mappings it reads are: a list of its own once it reads a shared one
        for name, object_id, payload, cacheable in arguments:
            if cacheable:
                if payload is not None:  # sent with this task: held here from now on
                    self._values[(serializer_id, object_id)] = _Serialized(payload)
                value = self._value(serializer, serializer_id, object_id)
            elif type(payload) is SharedBytes:  # a large graph result, from the agent's memory without a copy
                if lent is _NOTHING_LENT:
                    lent = []
                made = self._made.pop(object_id, None) if serializer is _CLOUDPICKLE else None
                if made is not None:
                    self._made_bytes -= made[1]
                    if made[2] and self._mapped.any_written(made[2]):
                        made = None  # it may view memory a task wrote since
                if made is not None:  # made here: the very object
                    value = made[0]
                    lent.extend(made[2])  # a view of it is a view of the mappings it may view
                elif serializer is _CLOUDPICKLE:
                    view = self._mapped.view(object_id, payload, lent)
                    self.spares.mapped(object_id, view)
                    value = default_loads(view)
                else:
                    value = deserialize(payload.to_read(False))
            elif serializer is _CLOUDPICKLE and len(payload) > _SHARED_RESULT_BYTES:  # relayed whole: maybe laid out
                value = default_loads(payload)
            else:  # inline data, or a graph result used by one task or a few: not worth keeping
                value = deserialize(payload)
            if name:
                kwargs[name] = value
            else:
                args.append(value)
        self._lent = lent
        if lent is not _NOTHING_LENT:  # before the function runs: the agent samples memory meanwhile
            self._tell_kept()
        return args, kwargs

    def _keep_made(self, task_id: bytes, value: Any, size: int) -> None:
        made = self._made
        made[task_id] = (value, size, tuple(self._lent))
        self._made_bytes += size
        while self._made_bytes > _MADE_BYTES or len(made) > _MADE_COUNT:  # the oldest go first
            self._made_bytes -= made.pop(next(iter(made)))[1]

    def _value(self, serializer: Any, serializer_id: bytes, object_id: bytes) -> Any:
        key = (serializer_id, object_id)
        value = self._values.get(key, _MISSING)
        if value is _MISSING:
            raise RuntimeError(f"object {object_id.hex()} was never sent to this processor")
        if type(value) is _Serialized:
            payload = value.payload
            if type(payload) is SharedBytes:  # a large object, in the memory its holder handed over
                payload = payload.to_read(serializer is _CLOUDPICKLE)
                if type(payload) is memoryview:  # a mapping, which the values made from it keep
                    self.spares.mapped(object_id, payload)
            try:
                value = default_loads(payload) if serializer is _CLOUDPICKLE else serializer.deserialize(payload)
            except Exception as error:
                value = _LoadFailure(error)
            self._values[key] = value
        if type(value) is _LoadFailure:
            raise value.error.with_traceback(value.traceback)
        return value


# Said before the traceback of a task that failed before its function ran
_LOADING = "while loading the task's function and arguments on the worker (is what they need installed there?):\n"


def _failure(
    task_id: bytes, error: BaseException, duration_us: int, profile: Optional[CallProfile], preface: str = ""
) -> ProcessorResult:
    """The task raised `error`: its traceback without Scaler's frames (the runner's, a nested client's)."""
    return _result(task_id, False, _pickle_exception(error), preface + task_traceback(error), duration_us, profile)


def _result_failure(
    task_id: bytes,
    function: Any,
    serializer: Any,
    error: BaseException,
    duration_us: int,
    profile: Optional[CallProfile],
) -> ProcessorResult:
    """The task returned a value that does not serialize: a ResultSerializationError, whose traceback keeps only the
    frames of the user's code (a __reduce__ that raised), not the serializer's."""
    name = getattr(function, "__qualname__", None) or type(function).__qualname__
    failure = ResultSerializationError(
        task_id.hex(),
        name if isinstance(name, str) else repr(function),
        f"{type(error).__qualname__}: {error}",
        "pickle" if serializer is _CLOUDPICKLE else "serialize",
    )
    text = task_traceback(error, SERIALIZER_FILES)
    return _result(task_id, False, _pickle_exception(failure), text, duration_us, profile)


def _pickle_exception(error: BaseException) -> bytes:
    try:
        payload = cloudpickle.dumps(error)
        cloudpickle.loads(payload)  # an exception may pickle yet fail to unpickle (a custom __init__ signature)
        return payload
    except Exception:
        try:
            description = repr(error)
        except Exception:
            description = type(error).__qualname__
        return cloudpickle.dumps(RuntimeError(f"{description} (the original exception could not be pickled)"))


def _result(
    task_id: bytes, succeeded: bool, payload: Any, error_text: str, duration_us: int, profile: Optional[CallProfile]
) -> ProcessorResult:
    # tuple.__new__ skips the NamedTuple's Python-level __new__, once per task
    if profile is None:
        return tuple.__new__(ProcessorResult, (task_id, succeeded, payload, error_text, duration_us, 0, 0))
    return ProcessorResult(
        task_id, succeeded, payload, error_text, profile.duration_us, profile.cpu_time_us, profile.peak_memory
    )
