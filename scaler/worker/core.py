"""Internal: the worker's sans-IO core: decoded messages, processor reports and the time in; messages and commands out.

No sockets, processes, psutil or clocks here. The shell (agent.py) feeds the stimuli: `receive` (messages from the
scheduler), `processor_report`, `processor_output` (what tasks with streamOutput wrote), `observe` (a processor's
shared progress: which task it started and finished), `processor_died`, `connection_dropped`, `tick`, `stop`; and
carries out, in order, what `take_instructions` returns (see instructions.py), then sends what `take_outgoing`
returns as one frame. Each task has one state (state.py); every change is checked against state.TRANSITIONS.

What the worker does: it registers with Hello and heartbeats; queues the tasks it is sent and fetches the objects
they need, each once (cached while used, evicted after the retention time); feeds them to its processor, several
at a time while they are known to be short; answers each with one TaskResult, preceded by TaskOutput messages of
what it wrote if it asked for them (task_output.py); answers cancels, balance requests and Goodbye. Nested tasks: a
task that waits on a future "parks" its processor: the core takes back what it had handed that processor ahead, and
from then on feeds another one (a spare, or a fresh fork), so the children a parent waits for never queue behind it.
Tasks submitted from tasks run newest first (task_queue.py), which keeps the number of parked processors near the
nesting depth. A parked processor finishes its task and becomes a spare.

Task policies: the queue runs the highest Task.priority first (task_queue.py). A task with a timeoutMs has a clock
that starts when it starts running, which is when it becomes the first task of its processor's pipe (or, if the
processor had not started it by then, when it is seen started): time parked counts. When the clock runs out (`tick`
at the `now` next_deadline() gave), the task is stopped as a cancel stops it (its processor killed and replaced) and
answered timedOut. The worker says so in its Hello (taskPolicies).

Memory (docs/guide/memory.md), with a limit set: the core asks the shell for its processors' memory (SampleMemory)
every MEMORY_SAMPLE_SECONDS while a task runs (every heartbeat otherwise), and adds the results it holds. Past the
stop fraction it stops the running task using the most (answered failed, MemoryLimitError; its processor replaced,
the tasks handed after it queued again); past the pause fraction it starts no new task, and says so in its heartbeats
to a scheduler that understands it, until the sum falls below again. Past the spill fraction it has the shell move held
results to disk (SpillHeld), least recently used first, and back into memory (ReadBackHeld) when one is used while
there is room again. A processor the kernel killed at the limit of its
memory cgroup (the shell reads the cgroup's counter) fails its task with MemoryLimitError too.

Preload (preload.py), with one set: every processor runs it before its first task and says how that went in its first
report. The worker connects only once its first processor has; a preload that fails stops the worker, with
EXIT_PRELOAD_FAILED before it registered (the cluster stops), with EXIT_BROKEN after (its tasks go to other workers).

A lost scheduler is a state, not an exit: when the connection closes (a scheduler killed or restarted), or when
nothing was heard for the scheduler's peer timeout (after which it has dropped this worker anyway), the core forgets
its tasks (killing the processors that run them, keeping the others), connects again under a new identity and
registers as a new worker, retrying with backoff; it exits only when nothing was heard for the death timeout. The
results it holds for the cluster stay: its Hello lists them (heldResults), and a restarted scheduler answers the tasks
clients resubmit with them rather than running them again; the rest it is told to drop (ObjectDelete).

Retirement (`retire`, on SIGTERM): the worker asks the scheduler to take it out of the pool (WorkerRetire), hands back
its queued tasks when asked (BalanceRequest), runs the rest, and exits on Goodbye(retired). If the scheduler does not
say so within the deadline (plus a grace), or is lost meanwhile, it exits at once: a retiring worker never registers
again.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Set, Tuple

import cloudpickle

from scaler import config
from scaler.drop_streak import DropStreak
from scaler.errors import MemoryLimitError, ProcessorDiedError, ScalerError, where_failed
from scaler.io.curve_keys import raw_key
from scaler.io.shared_bytes import SharedBytes, as_buffer
from scaler.protocol import (
    PROTOCOL_VERSION,
    ActorRelease,
    ArgumentKind,
    BalanceRequest,
    BalanceResponse,
    DataKeys,
    Encoded,
    FunctionPeak,
    Goodbye,
    HeartbeatEcho,
    HeldResult,
    Hello,
    HelloReply,
    ObjectDelete,
    ObjectKind,
    ObjectPut,
    ObjectRequest,
    ObjectResponse,
    Resource,
    Role,
    Task,
    TaskCancel,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerHeartbeat,
    WorkerRetire,
    heartbeat_flags,
)
from scaler.protocol.dispatch import handler_table
from scaler.rate_limit import LimitedLog
from scaler.worker.actors import ActorHosting
from scaler.worker.instructions import (
    AcceptDataKeys,
    AllowMemory,
    Connect,
    DropTasks,
    EndParking,
    Exit,
    FetchData,
    ForgetObjects,
    GiveSpares,
    HandTasks,
    KillProcessor,
    ReadBackHeld,
    SampleMemory,
    SendHeartbeat,
    SpillHeld,
    StartProcessor,
)
from scaler.worker.invariants import check_invariants
from scaler.worker.objects import ObjectCache
from scaler.worker.processor_messages import (
    RESULT_DELAY_SECONDS,
    OutputChunk,
    ProcessorReport,
    ProcessorResult,
    ProcessorTask,
    preload_failure,
)
from scaler.worker.settings import WorkerSettings
from scaler.worker.state import (
    ACTIVE,
    ACTOR_PROCESSOR,
    CANCELED,
    CONNECTED,
    CONNECTING,
    DONE,
    HANDED,
    MAX_SPARE_PROCESSORS,
    PARKED,
    PARKED_PROCESSOR,
    READY,
    SPARE,
    SPARE_IDLE_SECONDS,
    WAITING,
    ProcessorState,
    WorkerTask,
)
from scaler.worker.success_results import SuccessResults
from scaler.worker.task_output import TaskOutputBuffer
from scaler.worker.task_queue import TaskQueue

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_SCHEDULER_LOST = 1  # death timeout, or the launcher that started us is gone
EXIT_REFUSED = 2  # the scheduler refused our Hello (protocol version) or our CurveZMQ key
EXIT_BROKEN = 3  # the worker can no longer start processors
EXIT_PRELOAD_FAILED = 4  # its first processor could not run the preload: the worker never registered (preload.py)
_MAX_ERROR_TEXT = 64 * 1024  # characters of a failed task's traceback sent; the middle of a longer one is left out

RECONNECT_FIRST_SECONDS = 1.0  # after a lost scheduler, Hello again this long after the first one, doubling...
RECONNECT_MAX_SECONDS = 10.0  # ...up to this (ZeroMQ itself reconnects the socket meanwhile)
# Waiting for a scheduler, the worker says so this long after it began waiting, then each time it has waited three times
# as long (5 s, 15 s, 45 s...), at least once per WAITING_LOG_MAX_SECONDS: often at first, rarely for a long wait.
WAITING_LOG_FIRST_SECONDS = 5.0
WAITING_LOG_MAX_SECONDS = 300.0
CANCELED_CHECK_SECONDS = 0.02  # how often progress is checked for a canceled task that started all the same
# Short successful results wait in the core while more are about to come (a processor runs short tasks it was handed):
# they then leave together, in frames of a hundred or more instead of a few dozen, which costs the scheduler and this
# agent less per result. At most this many, and this long; a lone task's result, or the last of a map, leaves at once.
HOLD_RESULTS_AT_MOST = 256
HOLD_RESULTS_SECONDS = RESULT_DELAY_SECONDS
# A processor parking or unparking is heartbeated at once (parked tasks lend their slots at the scheduler), but at most
# once per this: 5 ms with the default 1 s interval. A burst of parks (a parent mapping over children, many parents
# blocking together) would otherwise send one heartbeat each, spending the heartbeats a second the scheduler takes from
# all peers (--heartbeats-per-second) on one worker; 5 ms is below a short task's run, so slots are lent as soon.
PARK_HEARTBEAT_FLOOR_SECONDS = config.DEFAULT_HEARTBEAT_INTERVAL_SECONDS / 200
# A retiring worker waits this much longer than the deadline it gave the scheduler, whose Goodbye(retired) normally
# comes first: its own deadline only guards against a scheduler that stopped answering.
RETIRE_GRACE_SECONDS = config.DEFAULT_RETIRE_GRACE_SECONDS

_BEFORE_CONNECTED = (HelloReply.WHICH, Goodbye.WHICH, DataKeys.WHICH)  # read on a connection not accepted yet
MEMORY_SAMPLE_SECONDS = config.DEFAULT_MEMORY_SAMPLE_SECONDS  # with a memory limit, while a task runs
MAX_PEAKS_PER_HEARTBEAT = 64  # function peaks a heartbeat carries at most; the rest go with the next ones
STALL_SECONDS = 1.0  # a turn of the shell's loop this long is a stall (see stalled)
SPILL_BYTES_AT_ONCE = 256 * 1024 * 1024  # held results moved to disk per sample at most: the agent's loop turns

_SPARES_PER_ORDER = 16  # files given back to a processor in one order (spares.py keeps as many at most)
# Smaller results' files are not given back: writing over one saves microseconds, and a fan-in of thousands of them
# would pass thousands of descriptors back for a task process that keeps 16
_SPARE_MIN_BYTES = 1024 * 1024
_SUCCESS = TaskStatus.success
_FAILED = TaskStatus.failed
_INLINE_LIMIT = config.DEFAULT_INLINE_LIMIT_BYTES
_INLINE = ArgumentKind.inline
_OBJECT_REF = ArgumentKind.object_ref


class WorkerCore(ActorHosting):
    def __init__(
        self,
        settings: WorkerSettings,
        name: str,
        hostname: str,
        pid: int,
        now: float,
        replaces: str = "",
        data_address: str = "",
    ) -> None:
        """`name` prefixes the core's log lines ("Worker[0]"); identities come and go with connections."""
        self.settings = settings
        self.name = name
        self._hostname = hostname
        self._pid = pid
        self._replaces = replaces  # said in the first Hello only: a worker registering again replaces nobody
        # where the shell serves the results this worker holds ("": it has no data socket, and puts them instead)
        self.data_address = data_address
        self.holds_results = False  # the scheduler takes held results (HelloReply.holdsOnWorkers) and we can serve
        # with CurveZMQ, the scheduler sent the keys our data address accepts and was told ours (DataKeys), on this
        # connection: only then can others fetch here, so only then are results held
        self._data_keys = False
        self.tasks: Dict[bytes, WorkerTask] = {}
        self.queue = TaskQueue()
        self.cache = ObjectCache(settings.object_retention_seconds)
        self.processors: Dict[int, ProcessorState] = {}
        self.active: Optional[ProcessorState] = None  # the one tasks are handed to
        self.parked: List[ProcessorState] = []
        self.spares: List[ProcessorState] = []
        self.durations: Dict[bytes, float] = {}  # function id -> recent run time (moving average), seconds
        self.connection = CONNECTING
        self._hello_sent = False  # on the connection now: the scheduler may have registered us, unanswered yet
        self.identity = ""  # our name on the current connection
        self.registrations = 0  # accepted Hellos: more than one means we registered again after losing a scheduler
        self.heartbeat_interval = settings.heartbeat_interval_seconds
        self.lost_after = settings.death_timeout_seconds  # the scheduler's peer timeout, once it told us
        self.lag_us = 0
        self.output_forwarded = False  # the scheduler forwards TaskOutput: only then is streamOutput honoured
        self.max_frame_bytes = config.DEFAULT_MAX_FRAME_BYTES  # the scheduler's, from its HelloReply
        self.relay_port = 0  # the data relay's, from its HelloReply (0: none); the shell connects to it
        self._drops = DropStreak()
        self.last_heard = now
        self.malformed = 0
        # What the scheduler, or the tasks it sends, make us warn about: a few lines per kind, then a summary.
        self.warnings = LimitedLog(logger, prefix=f"{name}: ")
        self.exit_code: Optional[int] = None
        self.retiring_until: Optional[float] = None  # set by `retire`: exit at the latest then
        self._now = now
        self._next_heartbeat = now
        self._parked_reported = 0  # parked processors as the last heartbeat said
        self._last_heartbeat = float("-inf")  # when the last heartbeat was sent: parking ones wait for the floor
        self._next_garbage_collect = now + settings.garbage_collect_interval_seconds
        self._next_connect: Optional[float] = None  # when to say Hello again on a new connection
        self._reconnect_delay = RECONNECT_FIRST_SECONDS
        self._waiting_since = now  # when the worker last began waiting for a scheduler to answer its Hello
        self._next_waiting_log = now + WAITING_LOG_FIRST_SECONDS
        self._to_request: Set[bytes] = set()
        self._requested: Set[bytes] = set()  # asked for, not (completely) received yet
        self._taking: Set[bytes] = set()  # results of a retiring worker being fetched, to hold (ObjectRequest.takeFrom)
        self._outgoing: List[Tuple[object, int]] = []  # (message or Encoded message, payload bytes)
        self._success_results = SuccessResults()
        self._held_results = 0  # short successful results in _outgoing, all of it, held back by take_outgoing
        self._held_since: Optional[float] = None  # when take_outgoing first held them
        self.outputs: Dict[bytes, TaskOutputBuffer] = {}  # tasks with streamOutput that wrote something, by id
        # tasks with a timeout in a pipe (handed or parked, not canceled), by id; those whose clock runs have a deadline
        self.timed: Dict[bytes, WorkerTask] = {}
        # memory (docs/guide/memory.md): the limit in bytes (0: none) and the sums that pause and stop
        self.memory_limit = config.parse_size(settings.memory_limit) if settings.memory_limit else 0
        self._spill_bytes = int(self.memory_limit * settings.memory_spill_fraction)
        self._pause_bytes = int(self.memory_limit * settings.memory_pause_fraction)
        self._stop_bytes = int(self.memory_limit * settings.memory_stop_fraction)
        self.memory_used = 0  # at the last sample: its processors (PSS, or RSS while far below) and held results
        self.memory_paused = False
        self.spilled: Dict[bytes, int] = {}  # held results on disk (or on their way there): their sizes, by id
        self.spilled_bytes = 0
        # function id -> the most a processor was seen to use while running its tasks; those that rose since the last
        # heartbeat go in it (WorkerHeartbeat.functionPeaks), for the scheduler to learn from
        self.function_peaks: Dict[bytes, int] = {}
        self._peaks_to_report: Dict[bytes, int] = {}
        # with cgroups: held results in memory by the processor that wrote them (the kernel charges them to its
        # cgroup), and what each processor's cgroup must allow beyond the limit for them; changed ones are told
        self._charged_to: Dict[bytes, Tuple[int, int]] = {}  # object id -> (processor number, bytes)
        # Held results in shared memory that no process but their writer was handed: their files go back to it once
        # they are freed (worker/spares.py). Object id -> (the writer's number, the held SharedBytes).
        self._reusable: Dict[bytes, Tuple[int, SharedBytes]] = {}
        self._allowances: Dict[int, int] = {}
        self._allowances_changed: Set[int] = set()
        self.memory_enforcement = "watchdog"  # or "cgroup": what the shell set up (it says so at start)
        self.scheduler_pauses = False  # the scheduler understands MEMORY_PAUSED (HelloReply.memoryPause)
        self._next_memory_sample = now
        # With a preload (preload.py): the processors that have not yet said how it went; the worker connects once the
        # first one has, so a preload that fails stops it before it takes any task
        self.preloading: Set[int] = set()
        self.awaiting_preload = settings.preload is not None
        self._instructions: List[object] = [] if self.awaiting_preload else [Connect()]
        self._processor_count = 0
        self._init_actors()
        self.active = self._start_processor()
        self._handlers = handler_table(
            (
                (HelloReply, self._on_hello_reply),
                (HeartbeatEcho, self._on_heartbeat_echo),
                (Task, self._on_task),
                (TaskCancel, self._on_task_cancel),
                (ObjectResponse, self._on_object_response),
                (DataKeys, self._on_data_keys),
                (ObjectDelete, self._on_object_delete),
                (ObjectRequest, self._on_object_request),
                (BalanceRequest, self._on_balance_request),
                (ActorRelease, self._on_actor_release),
                (Goodbye, self._on_goodbye),
            )
        )

    # --- stimuli --------------------------------------------------------------------------------------------------

    def connecting(self, identity: str, now: float) -> None:
        """The shell opened the connection a Connect asked for, under `identity`: say Hello on it."""
        self._now = now
        self.identity = identity
        self._hello_sent = True
        self._data_keys = False
        self._outgoing.append(
            (
                Hello(
                    protocol_version=PROTOCOL_VERSION,
                    role=Role.worker,
                    name=identity,
                    hostname=self._hostname,
                    pid=self._pid,
                    capacity=self.settings.queue_size,
                    previous_registrations=self.registrations,  # the scheduler logs workers that survived one
                    resources=[
                        Resource(name=name, amount=amount)
                        for name, amount in config.parse_resources(self.settings.resources).items()
                    ],
                    task_policies=True,  # the queue runs in priority order, timeouts are enforced
                    replaces="" if self.registrations else self._replaces,
                    data_address=self.data_address,
                    fetches_from_holders=bool(self.data_address),  # one that serves data fetches it too
                    takes_handoffs=bool(self.data_address),  # and may hold what a retiring worker held
                    # registering again: what it still holds, for the tasks clients resubmit to a restarted scheduler
                    held_results=[HeldResult(object_id=key, size=size) for key, size in self.cache.held_sizes()],
                    memory_limit=self.memory_limit,
                    actor_slots=self.settings.actor_slots,
                    actors=self.hosted_actors(),  # registering again: the actors it still hosts
                ),
                0,
            )
        )

    def receive(self, messages: list, now: float) -> None:
        """Messages decoded from one frame of the scheduler."""
        self._now = now
        self.last_heard = now
        handlers = self._handlers
        for message in messages:
            if self.exit_code is not None:
                return
            handler = handlers[message.WHICH]
            if handler is None or not (self.connection == CONNECTED or message.WHICH in _BEFORE_CONNECTED):
                logger.debug("%s: ignored %s", self.name, type(message).__name__)
                continue
            handler(message)
        self._dispatch()

    def connection_dropped(self, now: float, largest_frame_bytes: int = 0) -> None:
        """The connection to the scheduler closed (it died or restarted): whatever we send on it now would reach a
        scheduler that does not know us, so register again at once, on a new connection. `largest_frame_bytes`: of
        the frames sent on it (a scheduler drops a peer whose frame is over its limit: see drop_streak.py)."""
        self._now = now
        if self.exit_code is not None:
            return
        self._drops.sent(largest_frame_bytes)
        stop = self._drops.dropped(now, self.settings.address)
        if stop is not None:
            self._exit(EXIT_BROKEN, stop)
            return
        if self.connection == CONNECTED:
            self._lose_scheduler("the connection to the scheduler closed")
        else:
            self._connect_again()  # our Hello may have gone with it

    def refused(self, reason: str, now: float) -> None:
        """The scheduler refused this worker's handshake (its CurveZMQ key): final, so the worker leaves, saying why."""
        self._now = now
        self._exit(EXIT_REFUSED, reason)

    def receive_malformed(self, reason: str, now: float) -> None:
        self.last_heard = now  # the scheduler is there, even if this frame was garbled
        self.malformed += 1
        if self.malformed == 1:
            self.warnings.log(
                "malformed frame",
                now,
                "%s: dropped a malformed frame from the scheduler (further ones counted): %s",
                self.name,
                reason,
            )

    def observe(self, number: int, started: int, done: int, now: Optional[float] = None) -> None:
        """Processor `number`'s shared progress: the seq of the task it started last and of the one it finished."""
        processor = self.processors.get(number)
        if processor is None:
            return
        processor.started = started
        processor.done = done
        if self.timed:
            running = processor.running()
            if running is not None and running.task_id in self.timed and not running.deadline:
                self._start_clock(running, self._now if now is None else now)  # started later than expected
        if processor.canceled:
            running = processor.running()
            if running is not None and running.state == CANCELED:
                self._cancel_running(processor, running)  # it started before our drop order reached it
                self._dispatch()

    def processor_report(self, number: int, report: ProcessorReport, now: float) -> None:
        self._now = now
        processor = self.processors.get(number)
        if processor is None:
            return  # killed meanwhile: what it says no longer counts
        if number in self.preloading:  # its first report: how its preload went
            self._preloaded(processor, preload_failure(report))
            return
        if report.results:
            if processor.role == ACTOR_PROCESSOR:
                self._on_actor_results(processor, report.results)
            else:
                self._on_results(processor, report.results)
        for task_id in report.dropped:
            # Only a drop we ordered: a task of that id in the pipe is otherwise a newer hand-off that must run.
            task = processor.pipe.get(task_id)
            if task is not None and task.state == CANCELED:
                self._take_from_pipe(processor, task)
                processor.canceled -= 1
                self._forget(task, "dropped")
        if report.blocked is not None:
            self._park(processor, report.blocked)
        if processor.role == PARKED_PROCESSOR and not processor.pipe:
            self._unpark(processor)
        self._dispatch()
        if number in self.processors:
            # Evictions that waited for the tasks handed before them, and that no task handed now took along: all
            # answered, they go now, not with a next task that may be long in coming (a parked processor's, a
            # spare's), as what the processor keeps of them (a mapping of a freed or spilled result) holds memory the
            # worker no longer counts.
            self._forget_if_idle(processor)

    def processor_output(self, number: int, chunks: List[OutputChunk], now: float) -> None:
        """What processor `number`'s tasks with streamOutput wrote (capture.py). The shell reads it after the
        processor's reports and feeds it before them, so a task's output always precedes its result."""
        self._now = now
        processor = self.processors.get(number)
        if processor is None:
            return
        outputs = self.outputs
        for seq, stream, data, dropped in chunks:
            task = processor.task_with_seq(seq)
            if task is None or task.state == CANCELED or not task.task.stream_output:
                continue  # answered already
            buffer = outputs.get(task.task_id)
            if buffer is None:
                buffer = outputs[task.task_id] = TaskOutputBuffer(task.task_id)
            buffer.add(stream, data, dropped, now)
        self._send_output(now)

    def processor_died(self, number: int, how: str, now: float, memory_peak: Optional[int] = None) -> None:
        """Processor `number` ended on its own (the shell reaped it and observed its last progress). `memory_peak`:
        the kernel killed it at its memory cgroup's limit, and this is the most the cgroup held (0 if unknown)."""
        self._now = now
        processor = self.processors.get(number)
        if processor is None:
            return
        if processor.role == ACTOR_PROCESSOR:
            if memory_peak is not None:
                how = f"the kernel stopped it at the worker's memory limit (its memory cgroup, {memory_peak} bytes)"
            during = " while running the preload" if number in self.preloading else ""
            self._lose_actor(processor, f"its process died ({how}){during}", kill=False)
            self._dispatch()
            return
        was_active = processor is self.active
        if number in self.preloading:
            self._preload_failed(f"its task process died with {how} while running the preload", memory_peak)
        self._remove_processor(processor, kill=False)
        running = processor.running()
        if running is None:
            self.warnings.log(
                "processor died",
                now,
                "%s: processor %d died with %s between tasks, starting a new one",
                self.name,
                number,
                how,
            )
        elif running.state == CANCELED:
            self._take_from_pipe(processor, running)
            self._forget(running, "processor died")
        elif memory_peak is not None:
            self._take_from_pipe(processor, running)
            error = MemoryLimitError(self.memory_limit, memory_peak, "the kernel (memory cgroup)", self.identity)
            self.warnings.log("over memory limit", now, "%s: task %s: %s", self.name, running.task_id.hex(), error)
            self._answer(running, "over memory limit", TaskStatus.failed, cloudpickle.dumps(error), str(error))
            self._mark_over_limit(memory_peak)
        else:
            self._take_from_pipe(processor, running)
            text = f"processor died with {how} while running task {running.task_id.hex()}"
            self.warnings.log("processor died", now, "%s: %s, starting a new processor", self.name, text)
            self._answer(
                running, "processor died", TaskStatus.failed, cloudpickle.dumps(ProcessorDiedError(text)), text
            )
        self._recover_pipe(processor)
        if was_active:
            self.active = self._start_processor()
        self._dispatch()

    def stalled(self, seconds: float, now: float) -> None:
        """One turn of the shell's loop took `seconds` (a task message of a gigabyte encoded, a swapped-out heap): it
        read nothing from the scheduler meanwhile, nor sent the heartbeats the scheduler answers, so that time is not
        the scheduler's silence (as the scheduler forgives its own stalls)."""
        if seconds < STALL_SECONDS:
            return
        self.last_heard += seconds
        self.warnings.log(
            "stalled",
            now,
            "%s: busy for %.1fs in one step: the scheduler's silence counted without it",
            self.name,
            seconds,
        )

    def tick(self, now: float) -> None:
        """Timers: the scheduler's silence, heartbeats, reconnection, spares, object retention."""
        self._now = now
        self.warnings.flush(now)
        if self.retiring_until is not None and now >= self.retiring_until:
            self._exit(EXIT_OK, "no go-ahead from the scheduler within the retirement deadline: leaving now", True)
            return
        if self.awaiting_preload:  # the wait for a scheduler begins once the first processor preloaded
            self.last_heard = self._waiting_since = now
            self._next_waiting_log = now + WAITING_LOG_FIRST_SECONDS
        silent = now - self.last_heard
        if silent >= self.settings.death_timeout_seconds:
            if self.registrations:
                reason = f"nothing heard from the scheduler for {self.settings.death_timeout_seconds:g}s"
            else:
                reason = f"no answer from {self.settings.address} within {self.settings.death_timeout_seconds:g}s"
            self._exit(EXIT_SCHEDULER_LOST, reason)
            return
        if self.connection == CONNECTED:
            if silent >= self.lost_after:
                self._lose_scheduler(f"nothing heard from the scheduler for {silent:.1f}s")
            elif now >= self._next_heartbeat or (
                len(self.parked) != self._parked_reported and now >= self._last_heartbeat + PARK_HEARTBEAT_FLOOR_SECONDS
            ):
                # parked tasks lend their slots at the scheduler: it hears of them now (or once the floor since the
                # last heartbeat passed), not an interval later
                self._send_heartbeat()
                self._next_heartbeat = now + self.heartbeat_interval
        else:
            if now >= self._next_waiting_log:
                self._log_waiting(now)
            if self._next_connect is not None and now >= self._next_connect:
                logger.debug("%s: no answer to Hello yet, connecting again", self.name)
                self._connect_again()
        for spare in [spare for spare in self.spares if now - spare.idle_since > SPARE_IDLE_SECONDS]:
            self._remove_processor(spare, kill=True)
        if self.outputs:
            self._send_output(now)
        if self.timed:
            self._expire_timeouts(now)
        if self.memory_limit and now >= self._next_memory_sample:
            self._sample_memory(now)
        if now >= self._next_garbage_collect:
            self._forget_objects(self.cache.evict_unused(now))
            self._next_garbage_collect = now + self.settings.garbage_collect_interval_seconds
        self._dispatch()

    def stop(self, code: int, reason: str, disconnect: bool = False) -> None:
        """Leave (a signal, the launcher gone, the processors impossible to start)."""
        self._exit(code, reason, disconnect)

    def retire(self, deadline_seconds: float, reason: str, now: float) -> None:
        """Leave the pool without losing or repeating a task: ask the scheduler (WorkerRetire), which takes back the
        queued tasks, lets the running ones finish within `deadline_seconds`, then says Goodbye(retired). Not
        registered, or with no deadline, there is nothing to hand over: exit at once. Asked again: no change."""
        self._now = now
        if self.exit_code is not None or self.retiring_until is not None:
            return
        if self.connection != CONNECTED or deadline_seconds <= 0:
            self._exit(EXIT_OK, f"{reason}: leaving at once (not registered, or no retirement deadline)", True)
            return
        self.retiring_until = now + deadline_seconds + RETIRE_GRACE_SECONDS
        deadline_ms = min(int(deadline_seconds * 1000), 2**32 - 1)
        self._outgoing.append((WorkerRetire(reason=reason, deadline_ms=deadline_ms), 0))
        logger.info(
            "%s: %s: retiring, %d task(s) to finish or hand back within %gs", self.name, reason, len(self.tasks),
            deadline_seconds,
        )  # fmt: skip

    def next_deadline(self) -> float:
        """When `tick` has something to do at the latest."""
        deadline = min(self.last_heard + self.settings.death_timeout_seconds, self._next_garbage_collect)
        if self.retiring_until is not None:
            deadline = min(deadline, self.retiring_until)
        if self.connection == CONNECTED:
            deadline = min(deadline, self._next_heartbeat, self.last_heard + self.lost_after)
            if len(self.parked) != self._parked_reported:
                deadline = min(deadline, max(self._now, self._last_heartbeat + PARK_HEARTBEAT_FLOOR_SECONDS))
        else:
            deadline = min(deadline, self._next_waiting_log)
            if self._next_connect is not None:
                deadline = min(deadline, self._next_connect)
        if self.spares:
            deadline = min(deadline, min(spare.idle_since for spare in self.spares) + SPARE_IDLE_SECONDS)
        if any(processor.canceled for processor in self.processors.values()):
            deadline = min(deadline, self._now + CANCELED_CHECK_SECONDS)
        if self.outputs:
            deadline = min(deadline, min(buffer.due() for buffer in self.outputs.values()))
        if self.timed:  # a few: the tasks with a timeout in pipes
            deadline = min(deadline, min(task.deadline or deadline for task in self.timed.values()))
        if self._held_since is not None:
            deadline = min(deadline, self._held_since + HOLD_RESULTS_SECONDS)
        if self.memory_limit:
            deadline = min(deadline, self._next_memory_sample)
        return deadline

    # --- outputs --------------------------------------------------------------------------------------------------

    def take_outgoing(self) -> List[Tuple[object, int]]:
        """Messages for the scheduler since the last call, with the payload bytes each carries (for framing); none
        while only short results are there and more are about to come (_hold_results)."""
        outgoing = self._outgoing
        if outgoing and self._hold_results(outgoing):
            return []
        self._held_results = 0
        self._held_since = None
        to_request = self._to_request
        if to_request:
            to_request -= self._requested
            if to_request:
                self._requested |= to_request
                outgoing.append((ObjectRequest(object_ids=list(to_request)), 0))
            self._to_request = set()
        self._outgoing = []
        return outgoing

    def _hold_results(self, outgoing: List[Tuple[object, int]]) -> bool:
        """Whether to keep `outgoing` a little longer: it holds nothing but short successful results (their Encoded
        runs; anything else sent after them releases them, so the order of messages never changes), fewer than
        HOLD_RESULTS_AT_MOST, held less than HOLD_RESULTS_SECONDS, and more results are about to follow: a processor
        was handed tasks expected to take less than that together, or has finished one it has not reported yet (its
        report comes within its own delay bound). A lone task, or the last of a map, leaves at once: the pipe is empty.
        """
        if self._held_results >= HOLD_RESULTS_AT_MOST or self._to_request or self.connection != CONNECTED:
            return False
        if self.exit_code is not None or self.retiring_until is not None:
            return False
        for message, _ in outgoing:
            if type(message) is not Encoded:
                return False
        for processor in self.processors.values():
            pipe = processor.pipe
            if (
                pipe
                and processor.role != ACTOR_PROCESSOR
                and (  # an actor's calls are answered one by one
                    processor.pipe_expected_seconds < HOLD_RESULTS_SECONDS
                    or next(iter(pipe.values())).seq <= processor.done
                )
            ):
                break
        else:
            return False
        if self._held_since is None:
            self._held_since = self._now
            return True
        return self._now < self._held_since + HOLD_RESULTS_SECONDS

    def objects_asked(self) -> Set[bytes]:
        """Object ids requested from the scheduler, or to be, and not received yet."""
        return self._requested | self._to_request

    def take_instructions(self) -> List[Any]:
        if self._allowances_changed:
            for number in sorted(self._allowances_changed):
                if number in self.processors:
                    self._instructions.append(AllowMemory(number, self._allowances.get(number, 0)))
            self._allowances_changed.clear()
        instructions = self._instructions
        self._instructions = []
        return instructions

    # --- the scheduler --------------------------------------------------------------------------------------------

    def _on_hello_reply(self, reply: HelloReply) -> None:
        if self.connection == CONNECTED:
            return
        if not reply.accepted:
            self._exit(EXIT_REFUSED, f"scheduler refused this worker: {reply.reason}")
            return
        self.connection = CONNECTED
        self._next_connect = None
        self._reconnect_delay = RECONNECT_FIRST_SECONDS
        self.registrations += 1
        if reply.heartbeat_interval_ms:  # the scheduler times peers out by its own interval, so it decides
            self.heartbeat_interval = reply.heartbeat_interval_ms / 1000
        if reply.peer_timeout_ms:
            self.lost_after = reply.peer_timeout_ms / 1000
        self.output_forwarded = reply.forwards_task_output
        self.max_frame_bytes = reply.max_frame_bytes or config.DEFAULT_MAX_FRAME_BYTES  # 0: an older scheduler's
        self._drops.registered(self._now)
        curve_ready = self.settings.curve_keys is None or self._data_keys
        self.holds_results = reply.holds_on_workers and bool(self.data_address) and curve_ready
        self.relay_port = reply.relay_port
        if not (self.holds_results and reply.adopts_held_results):  # an older scheduler: nobody would free them
            self._forget_objects(self.cache.drop_held())
        self.scheduler_pauses = reply.memory_pause
        self._next_heartbeat = self._now
        logger.info(
            "%s: %s %s as %s, capacity %d, heartbeat every %gs",
            self.name,
            "connected to" if self.registrations == 1 else "registered again, as a new worker, with",
            self.settings.address,
            self.identity,
            self.settings.queue_size,
            self.heartbeat_interval,
        )

    def _on_heartbeat_echo(self, echo: HeartbeatEcho) -> None:
        self.lag_us = max(0, int(self._now * 1_000_000) - echo.sent_at_us)
        # The scheduler stretches the cadence as its peers grow in number (0: an older scheduler, which never does).
        if echo.heartbeat_interval_ms:
            interval = echo.heartbeat_interval_ms / 1000
            if interval != self.heartbeat_interval:
                self.heartbeat_interval = interval
                self._next_heartbeat = min(self._next_heartbeat, self._now + interval)
        if echo.peer_timeout_ms:
            self.lost_after = echo.peer_timeout_ms / 1000

    def _on_goodbye(self, goodbye: Goodbye) -> None:
        if goodbye.retired:
            self._outgoing = []  # the scheduler has forgotten us: what we would still send settles nothing
            self._exit(EXIT_OK, goodbye.reason)
            return
        if goodbye.reconnect and self.retiring_until is not None:
            self._lose_scheduler(f"scheduler said goodbye: {goodbye.reason}")
            return
        if goodbye.reconnect:  # a scheduler that does not know us (restarted), or stopped from outside (an upgrade)
            if self.connection == CONNECTED:
                self._lose_scheduler(f"scheduler said goodbye: {goodbye.reason}")
            return
        self._exit(EXIT_OK, f"scheduler said goodbye: {goodbye.reason}")

    def _lose_scheduler(self, why: str) -> None:
        """The scheduler is gone (its connection closed), or dropped us (nothing heard for its peer timeout). Forget
        its tasks and register again on a new connection: a restarted scheduler, or the same one, takes us as a new
        worker. A retiring worker exits instead: its tasks are lost with the scheduler's state either way (their
        clients resubmit them), and it was leaving."""
        if self.retiring_until is not None:
            self._outgoing = []  # nobody waits for it
            self._exit(EXIT_OK, f"{why} while retiring: leaving now, its {len(self.tasks)} task(s) run elsewhere")
            return
        logger.warning(
            "%s: %s: %d task(s) dropped, registering again (exit if nothing is heard for %gs)",
            self.name,
            why,
            len(self.tasks),
            self.settings.death_timeout_seconds,
        )
        for processor in [*self.parked, *([self.active] if self.active is not None else [])]:
            if processor.pipe:  # their results would go to a scheduler that no longer waits for them
                self._remove_processor(processor, kill=True)
                for task in list(processor.pipe.values()):
                    self._take_from_pipe(processor, task)
                    self._forget(task, "scheduler lost")
        for task in list(self.queue):
            self._forget(task, "scheduler lost")
        if self.actors:
            self._forget_waiting_actor_calls()
        self.queue = TaskQueue()
        self._to_request = set()
        self._requested = set()
        self._taking = set()
        self._outgoing = []
        # The results held here are kept and listed in the next Hello (heldResults): a restarted scheduler answers
        # the tasks clients resubmit with them; one that knows them already, or does not take them, says to drop them.
        if self.active is None:
            self.active = self.spares.pop() if self.spares else self._start_processor()
            self.active.role = ACTIVE
        self.connection = CONNECTING
        self._hello_sent = False
        self._reconnect_delay = RECONNECT_FIRST_SECONDS
        self._waiting_since = self._now
        self._next_waiting_log = self._now + WAITING_LOG_FIRST_SECONDS
        self._connect_again()

    def _log_waiting(self, now: float) -> None:
        """Still no scheduler: say so, how long, where, and when the worker gives up; next time after three times the
        wait (capped)."""
        since = self._waiting_since
        waited = now - since
        logger.warning(
            "%s: still waiting for the scheduler at %s after %.0fs (exiting in %.0fs if none answers)",
            self.name,
            self.settings.address,
            waited,
            max(0.0, self.last_heard + self.settings.death_timeout_seconds - now),
        )
        self._next_waiting_log = since + min(3 * waited, waited + WAITING_LOG_MAX_SECONDS)

    def _connect_again(self) -> None:
        self._instructions.append(Connect())
        self._next_connect = self._now + self._reconnect_delay
        self._reconnect_delay = min(RECONNECT_MAX_SECONDS, self._reconnect_delay * 2)

    def _exit(self, code: int, reason: str, disconnect: bool = False) -> None:
        if self.exit_code is not None:
            return
        self.exit_code = code
        self.warnings.flush(self._now, force=True)
        (logger.info if code == EXIT_OK else logger.error)("%s: exiting: %s", self.name, reason)
        # Said Hello, unanswered yet: the scheduler may have registered us all the same, and would wait for our
        # heartbeats until its timeout. A WorkerDisconnect behind the Hello tells it not to.
        registered = self.connection == CONNECTED or self._hello_sent
        if not registered or code == EXIT_SCHEDULER_LOST:
            self._outgoing = []  # nobody listens
        elif disconnect:
            if self.connection != CONNECTED:
                self._outgoing = [item for item in self._outgoing if type(item[0]) is Hello]
            self._outgoing.append((WorkerDisconnect(reason=reason), 0))
        self._instructions.append(Exit(code, reason, disconnect and registered))

    def _send_heartbeat(self) -> None:
        active = self.active
        active_running = 0
        queued = len(self.queue)
        if active is not None:
            active_running = 1 if active.running() is not None else 0
            queued += sum(1 for task in active.pipe.values() if task.state == HANDED) - active_running
        running = active_running + len(self.parked)  # a parked task is still running: it waits on its children
        self._parked_reported = len(self.parked)
        self._last_heartbeat = self._now
        flags = (
            (heartbeat_flags.PROCESSOR_INITIALIZED if active is not None else 0)
            | (heartbeat_flags.HAS_TASK if running or queued else 0)
            | (heartbeat_flags.TASK_LOCK if active_running else 0)
            | (heartbeat_flags.MEMORY_PAUSED if self.memory_paused and self.scheduler_pauses else 0)
        )
        heartbeat = WorkerHeartbeat(
            sent_at_us=int(self._now * 1_000_000),
            queued=queued,
            lag_us=self.lag_us,
            flags=flags,
            running=running,
            interval_ms=round(self.heartbeat_interval * 1000),  # so the scheduler knows when to expect the next one
            spilled_bytes=self.spilled_bytes,
        )
        if self._peaks_to_report:
            reported = list(self._peaks_to_report.items())[:MAX_PEAKS_PER_HEARTBEAT]
            heartbeat.function_peaks = [FunctionPeak(function_id=key, peak_bytes=peak) for key, peak in reported]
            for key, _ in reported:
                del self._peaks_to_report[key]
        self._instructions.append(SendHeartbeat(heartbeat, active.number if active is not None else -1))

    # --- tasks ----------------------------------------------------------------------------------------------------

    def _on_task(self, message: Task) -> None:
        if message.actor_id:
            self._on_actor_task(message)
            return
        if message.task_id in self.tasks:
            self.warnings.log(
                "task received twice",
                self._now,
                "%s: ignored task %s, received twice",
                self.name,
                message.task_id.hex(),
            )
            return
        self.queue.add(self._new_task(message))

    def _new_task(self, message: Task) -> WorkerTask:
        """The task of a Task message, known from now on; the objects it lacks are asked for."""
        needs = [message.function_id]
        if message.serializer_id:
            needs.append(message.serializer_id)
        for argument in message.args:
            if argument.kind != _INLINE:
                needs.append(argument.data)
        missing = self.cache.pin(needs)
        # The worker never forwards a Task's bytes, nor reads its dependencies or resources: they go now, while they
        # are in the CPU's caches, not with the task once it is done, when a full queue (a thousand tasks) has pushed
        # them out (freeing them then cost 0.5 us per task: bench/throughput/worker_core.py --queued 1000, core stage).
        message.raw = message.dependencies = message.resources = None  # type: ignore[assignment]  # freed, unread
        task = WorkerTask(message, tuple(needs), missing)
        self.tasks[task.task_id] = task
        if missing:
            self._to_request |= missing
        return task

    def _on_task_cancel(self, cancel: TaskCancel) -> None:
        drops: Dict[int, List[bytes]] = {}
        for task_id in cancel.task_ids:
            task = self.tasks.get(task_id)
            if task is None:
                self._outgoing.append((TaskResult(task_id=task_id, status=TaskStatus.not_found), 0))
                continue
            if task.task.actor_id:
                self._cancel_actor_task(task)
                continue
            state = task.state
            if state == WAITING or state == READY:
                self.queue.remove(task)
                self._answer(task, "cancel", TaskStatus.canceled)
            elif state == PARKED:
                assert task.processor is not None  # parked and handed tasks have one
                self._cancel_running(task.processor, task)
            elif state == HANDED:
                processor = task.processor
                assert processor is not None
                if task.seq <= processor.done:
                    continue  # it finished: its result is on its way, and answers the cancel
                if task.seq == processor.started:
                    self._cancel_running(processor, task)
                    continue
                # Handed ahead, not started: answered now, dropped by the processor before its turn (it reads orders
                # between tasks), or killed should it start before the order arrives (see observe).
                self._send_result(task, TaskStatus.canceled)
                self._stop_clock(task)
                task.move("cancel", CANCELED)
                processor.canceled += 1
                drops.setdefault(processor.number, []).append(task_id)
            # CANCELED: answered already
        for number, task_ids in drops.items():
            self._instructions.append(DropTasks(number, task_ids))

    def _on_balance_request(self, request: BalanceRequest) -> None:
        taken = self.queue.take_newest(request.count)
        for task in taken:
            self._forget(task, "balance")
        self._outgoing.append((BalanceResponse(task_ids=[task.task_id for task in taken]), 0))

    def _on_results(self, processor: ProcessorState, results: List[ProcessorResult]) -> None:
        """A report's results, in the order they ran. One loop with its lookups made once, not a call per result:
        this runs once per task."""
        pipe = processor.pipe
        durations = self.durations
        add_success = self._success_results.add
        for result in results:
            task_id, succeeded, payload, error_text, duration_us = result[:5]
            task = pipe.pop(task_id, None)
            if task is None:
                continue  # taken back meanwhile (a parking), or from before a restart of this worker's connection
            # as _take_from_pipe does (reset when empty so float drift never accumulates)
            processor.pipe_expected_seconds = processor.pipe_expected_seconds - task.expected_seconds if pipe else 0.0
            task.processor = None
            if self.timed:
                self._stop_clock(task)
                self._start_head_clock(processor)  # the processor went on with the next task
            if task.state == CANCELED:
                processor.canceled -= 1
                self._forget(task, "result")  # it ran before our drop order reached the processor; answered already
                if type(payload) is SharedBytes:
                    self._not_held(processor, task_id)
                continue
            message = task.task
            function_id = message.function_id
            previous = durations.get(function_id)
            seconds = duration_us * 1e-6
            durations[function_id] = seconds if previous is None else 0.8 * previous + 0.2 * seconds
            if succeeded and len(payload) <= _INLINE_LIMIT and not message.profiling and not self.outputs:
                # the common case, spelled out: a small value, no profile, no output to send first; it leaves with
                # the report's other such results
                add_success(task_id, payload)
                self._forget(task, "result")
                continue
            self._take_success_results()  # the results before this one go first
            status = _SUCCESS if succeeded else TaskStatus.failed
            self._answer(task, "result", status, payload, error_text, result)
            if type(payload) is SharedBytes:
                if not (succeeded and self.holds_results):
                    self._not_held(processor, task_id)
                elif self.memory_enforcement == "cgroup":
                    self._charge(task_id, processor.number, len(payload))
                elif len(payload) >= _SPARE_MIN_BYTES and self.cache.held_payload(task_id) is payload:
                    # (not under a cgroup: a file given back would keep pages the core no longer allows its writer;
                    # nor kept as bytes instead, objects.py)
                    self._reusable[task_id] = (processor.number, payload)
        self._take_success_results()

    def _not_held(self, processor: ProcessorState, task_id: bytes) -> None:
        """A large result its processor wrote is not held here (canceled, or sent to the scheduler): the processor
        drops the object it kept for the graph nodes it may run next (TaskRunner._made), which will never come."""
        processor.forget.append(task_id)
        self._forget_if_idle(processor)

    def _take_success_results(self) -> None:
        """Queue the short results gathered by _on_results. A report answers at most its processor's pipe (at most
        config.DEFAULT_PREFETCH_TASKS tasks), each result under the inline limit; the outbox splits what is held of
        several reports into frames of its size."""
        results = self._success_results
        self._held_results += results.count
        batch = results.take()
        if batch is not None:
            self._outgoing.append(batch)

    def _answer(
        self,
        task: WorkerTask,
        stimulus: str,
        status: TaskStatus,
        payload: bytes = b"",
        error_text: str = "",
        profile: Optional[ProcessorResult] = None,
    ) -> None:
        self._send_result(task, status, payload, error_text, profile)
        self._forget(task, stimulus)

    def _send_result(
        self,
        task: WorkerTask,
        status: TaskStatus,
        payload: bytes = b"",
        error_text: str = "",
        profile: Optional[ProcessorResult] = None,
    ) -> None:
        """The one TaskResult of a task, after its output and its payload as an object if it is large."""
        task_id = task.task_id
        if status == _FAILED:  # the client shows where: scaler_top lists workers by identity
            error_text = where_failed(task_id.hex(), self.identity) + error_text
        if self.outputs:
            buffer = self.outputs.pop(task_id, None)
            if buffer is not None:
                buffer.finish(self._outgoing)
        size = len(payload)
        in_object = False
        held = 0
        if len(error_text) > _MAX_ERROR_TEXT:  # a traceback with a huge repr in it: it must fit a frame
            cut = _MAX_ERROR_TEXT // 2
            error_text = (
                f"{error_text[:cut]}\n[... {len(error_text) - 2 * cut} characters left out ...]\n{error_text[-cut:]}"
            )
        if size > config.DEFAULT_INLINE_LIMIT_BYTES:
            if status != _SUCCESS and size > config.object_chunk_bytes(self.max_frame_bytes):
                # Failures stay inline (clients read them from the TaskResult); one this big could not be encoded.
                too_large = RuntimeError(f"the task's exception was too large to send ({size} bytes serialized)")
                payload = cloudpickle.dumps(too_large)
                size = len(payload)
            elif status == _SUCCESS:
                if self.holds_results:  # kept here, served to whoever needs it: only its size goes to the scheduler
                    self._hold(task_id, payload, self._now)
                    held = size
                else:
                    self._put_result_object(task_id, payload)
                in_object = True
                payload = b""
                size = 0
        result = TaskResult(
            task_id=task_id, status=status, payload=payload, in_object=in_object, error_text=error_text, held_bytes=held
        )
        if profile is not None and task.task.profiling:
            result.duration_us = profile.duration_us
            result.cpu_time_us = profile.cpu_time_us
            result.peak_memory = profile.peak_memory
        if task.task.actor_id and self._actor_answered(task, result, size + len(error_text)):
            return
        self._outgoing.append((result, size + len(error_text)))

    def _put_result_object(self, task_id: bytes, payload: bytes) -> None:
        """A large result, as ObjectPut chunks with the task's id, to go before its TaskResult."""
        payload = as_buffer(payload)  # a held result in shared memory: its chunks are views of it
        chunk_bytes = config.object_chunk_bytes(self.max_frame_bytes)
        chunk_count = max(1, -(-len(payload) // chunk_bytes))
        for index in range(chunk_count):
            chunk = payload[index * chunk_bytes : (index + 1) * chunk_bytes] if chunk_count > 1 else payload
            put = ObjectPut(
                object_id=task_id,
                kind=ObjectKind.result,
                payload=chunk,
                chunk_index=index,
                chunk_count=chunk_count,
                total_size=len(payload),
            )
            self._outgoing.append((put, len(chunk)))

    def _forget(self, task: WorkerTask, stimulus: str) -> None:
        task.move(stimulus, DONE)
        del self.tasks[task.task_id]
        dropped = self.cache.unpin(task.needs, self._now)
        if dropped:
            self._forget_objects(dropped)
        if self.outputs:
            self.outputs.pop(task.task_id, None)  # not answered (balanced away, scheduler lost): nobody to tell

    def _send_output(self, now: float) -> None:
        for buffer in self.outputs.values():
            buffer.take(now, self._outgoing)

    # --- objects --------------------------------------------------------------------------------------------------

    def _on_object_response(self, response: ObjectResponse) -> None:
        object_id = response.object_id
        if response.found and response.holder_address:  # held by another worker: fetched there directly
            self._instructions.append(FetchData(response.holder_address, object_id, response.holder_public_key))
            return
        if not response.found:
            self._requested.discard(object_id)
            self.cache.discard_partial(object_id)
            for task in self.queue.object_unavailable(object_id):
                self._object_not_found(task, object_id)
            if self.actors:
                self._actor_object_unavailable(object_id, lambda task: self._object_not_found(task, object_id))
            return
        try:
            complete = self.cache.add_chunk(
                object_id, response.payload, response.chunk_index, response.chunk_count, self._now
            )
        except ValueError as error:
            self.warnings.log("bad object chunk", self._now, "%s: dropped a bad object chunk: %s", self.name, error)
            return
        if complete:
            self._requested.discard(object_id)
            for task in self.queue.object_arrived(object_id):
                task.move("object arrived", READY)
            if self.actors:
                self._actor_object_arrived(object_id)

    def _object_not_found(self, task: WorkerTask, object_id: bytes) -> None:
        error = ScalerError(f"object {object_id.hex()} needed by task {task.task_id.hex()} was not found")
        self._answer(task, "object not found", TaskStatus.failed, cloudpickle.dumps(error), str(error))

    def _on_data_keys(self, message: DataKeys) -> None:
        """With CurveZMQ, just before the HelloReply: the keys our data address is to accept. We answer with the key
        it serves under, which the scheduler hands those who fetch here."""
        keys = self.settings.curve_keys
        if keys is None or not self.data_address:
            return
        self._instructions.append(AcceptDataKeys(frozenset(message.authorized_keys)))
        self._outgoing.append((DataKeys(public_key=raw_key(keys.public_key)), 0))
        self._data_keys = True

    def data_fetched(self, object_id: bytes, payload: Any, now: float) -> None:
        """A FetchData ended: with the result's bytes (bytes-like), or None when its holder did not answer in time or
        no longer holds it: then the scheduler relays it (and makes it again first, if it was lost). A result taken
        from a retiring worker is held from now on, and the scheduler told whether it is."""
        self._now = now
        if object_id in self._taking:
            self._taking.discard(object_id)
            if payload is not None:
                self._hold(object_id, payload, now)
            else:  # the retiring worker left first; it may have been made again here meanwhile, and be held
                payload = self.cache.held_payload(object_id)
            if payload is not None:
                response = ObjectResponse(
                    object_id=object_id, found=True, kind=ObjectKind.result, chunk_count=0, total_size=len(payload)
                )
            else:
                response = ObjectResponse(object_id=object_id, found=False)
            self._outgoing.append((response, 0))
        if object_id not in self._requested:
            return  # no task needs it any more
        if payload is None:
            self._outgoing.append((ObjectRequest(object_ids=[object_id], via_scheduler=True), 0))
            return
        self.cache.add_chunk(object_id, payload, 0, 1, now)
        self._requested.discard(object_id)
        for task in self.queue.object_arrived(object_id):
            task.move("object arrived", READY)
        if self.actors:
            self._actor_object_arrived(object_id)
        self._dispatch()

    def _on_object_request(self, request: ObjectRequest) -> None:
        """The scheduler relays results this worker holds to a peer that cannot fetch them here: upload them. Or,
        with `takeFrom`, a retiring worker hands results over: fetch them from it, to hold them here."""
        if request.take_from:
            for object_id in request.object_ids:
                if not self.holds_results:  # nowhere to serve them from: an older scheduler would not ask
                    self._outgoing.append((ObjectResponse(object_id=object_id, found=False), 0))
                elif object_id not in self._taking:
                    self._taking.add(object_id)
                    self._instructions.append(FetchData(request.take_from, object_id, request.take_from_key))
            return
        for object_id in request.object_ids:
            payload = self.held_payload(object_id)
            if payload is None:
                self._outgoing.append((ObjectResponse(object_id=object_id, found=False), 0))
            else:
                self._put_result_object(object_id, payload)

    def held_payload(self, object_id: bytes) -> Optional[bytes]:
        """For the shell's data socket: the bytes of a result held here, or None if it is not (any more)."""
        if self.spilled:
            self._used_held(object_id)
        return self.cache.held_payload(object_id)

    def _used_held(self, object_id: bytes) -> None:
        """A held result is read: the most recently used now; read back into memory if it was spilled and fits."""
        self.cache.used(object_id, self._now)
        size = self.spilled.get(object_id)
        if size is not None and self.memory_used + size < self._spill_bytes:
            self._unspilled(object_id)
            self.memory_used += size
            self._instructions.append(ReadBackHeld([object_id]))

    def _on_object_delete(self, delete: ObjectDelete) -> None:
        self._forget_objects(self.cache.delete_for_scheduler(delete.object_ids))

    def _forget_objects(self, object_ids: List[bytes]) -> None:
        if not object_ids:
            return
        if self.spilled:
            for object_id in object_ids:
                self._unspilled(object_id)
        if self._charged_to:
            for object_id in object_ids:
                self._uncharge(object_id)
        self._forget_in_processors(object_ids)
        if self._reusable:
            self._give_back(object_ids)
        for object_id in object_ids:
            self.durations.pop(object_id, None)
            if self.function_peaks:
                self.function_peaks.pop(object_id, None)
                self._peaks_to_report.pop(object_id, None)

    def _give_back(self, object_ids: List[bytes]) -> None:
        """Give the files of these freed results to the processors that wrote them, if no other process ever read
        them: those processors write their next results over them (spares.py). Sent after the evictions, which drop
        the processors' own mappings of them; a processor writes over a file only once nothing there maps it."""
        spares: Dict[int, List[Tuple[bytes, SharedBytes]]] = {}
        for object_id in object_ids:
            written = self._reusable.pop(object_id, None)
            if written is None:
                continue
            number, payload = written
            if not payload.lent and number in self.processors and object_id not in self.cache:
                spares.setdefault(number, []).append((object_id, payload))
        for number, given in spares.items():
            for start in range(0, len(given), _SPARES_PER_ORDER):
                self._instructions.append(GiveSpares(number, given[start : start + _SPARES_PER_ORDER]))

    def _forget_in_processors(self, object_ids: List[bytes]) -> None:
        """Processors drop what they kept of these objects: their deserialized copies, the results they made, their
        mappings of shared results (which would keep the memory of a freed or spilled result in use)."""
        for processor in self.processors.values():
            processor.forget.extend(object_ids)
            self._forget_if_idle(processor)

    def _forget_if_idle(self, processor: ProcessorState) -> None:
        """Send the processor its evictions now if it is idle: no task it was handed will run after the order. A busy
        one drops them with its next task, as tasks handed before may still use them."""
        if processor.forget and not processor.pipe:
            self._instructions.append(ForgetObjects(processor.number, self._take_forget(processor)))

    def _take_forget(self, processor: ProcessorState) -> List[bytes]:
        """The evictions to send the processor now, no longer counted as held there: forgetting goes first on both
        sides, so that an object fetched again is sent again."""
        forget = processor.forget
        if forget:
            processor.forget = []
            forgotten = set(forget)
            processor.held = {key for key in processor.held if key[1] not in forgotten}
        return forget

    # --- processors -----------------------------------------------------------------------------------------------

    def _start_processor(self) -> ProcessorState:
        self._processor_count += 1
        processor = ProcessorState(self._processor_count)
        self.processors[processor.number] = processor
        if self.settings.preload is not None:
            self.preloading.add(processor.number)
        self._instructions.append(StartProcessor(processor.number))
        return processor

    def _remove_processor(self, processor: ProcessorState, kill: bool) -> None:
        """Forget a processor wherever it is (active, parked or spare); its pipe is left for the caller."""
        del self.processors[processor.number]
        self.preloading.discard(processor.number)
        if self._allowances:
            self._allowances.pop(processor.number, None)
        if processor is self.active:
            self.active = None
        elif processor.role == PARKED_PROCESSOR:
            self.parked.remove(processor)
        elif processor.role == SPARE:
            self.spares.remove(processor)
        if kill:
            self._instructions.append(KillProcessor(processor.number))

    def _preloaded(self, processor: ProcessorState, failure: Optional[str]) -> None:
        """A processor ran the preload: it returned (`failure` None), or raised with this traceback."""
        self.preloading.discard(processor.number)
        if failure is not None:
            self._preload_failed(f"it raised:\n{failure.rstrip()}")
        elif self.awaiting_preload and self.exit_code is None:
            self.awaiting_preload = False
            # the wait for a scheduler starts now: a preload may take longer than the death timeout
            self.last_heard = self._waiting_since = self._now
            self._next_waiting_log = self._now + WAITING_LOG_FIRST_SECONDS
            self._instructions.append(Connect())
        self._dispatch()

    def _preload_failed(self, why: str, memory_peak: Optional[int] = None) -> None:
        """A processor could not run the preload: the worker cannot run tasks as its user meant them to run. Before
        registering, it exits with EXIT_PRELOAD_FAILED (the cluster stops); later, with EXIT_BROKEN, and the scheduler
        gives its tasks to other workers."""
        if memory_peak is not None:
            why += f" (the kernel stopped it at the memory limit, {config.size_text(self.memory_limit)})"
        reason = f"the preload {self.settings.preload} failed in a task process: {why}"
        if self.awaiting_preload:
            self._exit(EXIT_PRELOAD_FAILED, reason)
        else:
            self._exit(EXIT_BROKEN, reason, disconnect=True)

    def _take_from_pipe(self, processor: ProcessorState, task: WorkerTask) -> None:
        del processor.pipe[task.task_id]
        # Reset when empty so float drift never accumulates.
        processor.pipe_expected_seconds = (
            processor.pipe_expected_seconds - task.expected_seconds if processor.pipe else 0.0
        )
        task.processor = None
        if self.timed:
            self._stop_clock(task)  # out of the pipe: should it run again, it gets a new timeout

    def _recover_pipe(self, processor: ProcessorState) -> None:
        """Tasks handed to a processor that is gone (or parked) and not running them: back to the head of the line."""
        back = []
        for task in list(processor.pipe.values()):
            self._take_from_pipe(processor, task)
            if task.state == CANCELED:
                processor.canceled -= 1
                self._forget(task, "taken back")
            else:
                task.move("taken back", READY)
                back.append(task)
        self.queue.put_back(back)

    def _cancel_running(
        self,
        processor: ProcessorState,
        task: WorkerTask,
        stimulus: str = "cancel running",
        status: TaskStatus = TaskStatus.canceled,
        error_text: str = "",
        payload: bytes = b"",
    ) -> None:
        """Stop a running task the only way there is: kill its processor (the active one is replaced). A timeout
        (`stimulus` "timed out") stops it the same way, answered with its own status."""
        was_active = processor is self.active
        self._remove_processor(processor, kill=True)
        if status == TaskStatus.canceled:  # a timeout is logged by _expire_timeouts
            logger.info("%s: canceled running task %s, its processor killed", self.name, task.task_id.hex())
        self._take_from_pipe(processor, task)
        if task.state == CANCELED:
            processor.canceled -= 1
            self._forget(task, stimulus)
        else:
            self._answer(task, stimulus, status, payload, error_text)
        self._recover_pipe(processor)
        if was_active:
            self.active = self._start_processor()

    # --- timeouts -------------------------------------------------------------------------------------------------

    def _start_clock(self, task: WorkerTask, now: float) -> None:
        task.deadline = now + task.task.timeout_ms / 1000

    def _stop_clock(self, task: WorkerTask) -> None:
        if self.timed.pop(task.task_id, None) is not None:
            task.deadline = 0.0

    def _start_head_clock(self, processor: ProcessorState) -> None:
        """The first task of the pipe that is not canceled runs now (or is about to): its clock starts, if it has one
        and it has not started yet."""
        for task in processor.pipe.values():
            if task.state != CANCELED:
                if not task.deadline and task.task_id in self.timed:
                    self._start_clock(task, self._now)
                return

    def _expire_timeouts(self, now: float) -> None:
        for task in [task for task in self.timed.values() if task.deadline and task.deadline <= now]:
            if task.task_id not in self.timed:
                continue  # stopped with another one's processor: back in the queue
            processor = task.processor
            assert processor is not None  # timed tasks are handed or parked
            if task.seq <= processor.done:
                continue  # it finished in time: its result is on its way
            if task.state == HANDED and processor.started < task.seq:
                task.deadline = 0.0  # not started yet (its processor is slow to start): observe starts its clock
                continue
            seconds = task.task.timeout_ms / 1000
            text = f"task {task.task_id.hex()} ran longer than its timeout of {seconds:g} s: stopped, process replaced"
            self.warnings.log("task timed out", now, "%s: %s", self.name, text)
            self._cancel_running(processor, task, "timed out", TaskStatus.timed_out, text)

    # --- memory ---------------------------------------------------------------------------------------------------

    def _sample_memory(self, now: float) -> None:
        busy = self.memory_paused or any(processor.pipe for processor in self.processors.values())
        self._next_memory_sample = now + (MEMORY_SAMPLE_SECONDS if busy else self.heartbeat_interval)
        exact_above = min(self._spill_bytes, self._pause_bytes, self._stop_bytes) - self._held_in_memory()
        self._instructions.append(SampleMemory(list(self.processors), exact_above))

    def memory_sampled(self, usage: Dict[int, int], now: float) -> None:
        """The memory of processors (by number, in bytes) that a SampleMemory asked for: stop the task using the most
        when the worker is past its stop threshold; pause or resume at the pause threshold."""
        self._now = now
        held = self._held_in_memory()
        usage = {number: used for number, used in usage.items() if number in self.processors}
        self._note_function_peaks(usage)
        total = held + sum(usage.values())
        if total >= self._spill_bytes and held:
            spilling = self._spill(total - self._spill_bytes)
            held -= spilling
            total -= spilling
        if total >= self._stop_bytes and held < self._stop_bytes:
            # The largest first: a spare or an idle processor that kept its memory goes without failing a task. Held
            # results alone past the threshold are not the tasks' doing: the worker pauses, and stops none.
            for number, used in sorted(usage.items(), key=lambda item: -item[1]):
                processor = self.processors.get(number)
                if processor is None or total < self._stop_bytes:
                    break
                total -= used
                self._stop_for_memory(processor, used, total + used)
        self.memory_used = total
        paused = total >= self._pause_bytes
        if paused != self.memory_paused:
            self.memory_paused = paused
            logger.info(
                "%s: memory %s (%.1f MB of a %.1f MB limit): %s",
                self.name,
                "above the pause threshold" if paused else "below the pause threshold again",
                total / 1e6,
                self.memory_limit / 1e6,
                "paused, no new task starts" if paused else "resumed",
            )
            if self.connection == CONNECTED:
                self._send_heartbeat()  # the scheduler moves queued tasks away, or sends some again, now
                self._next_heartbeat = now + self.heartbeat_interval
            if paused:
                self._next_memory_sample = min(self._next_memory_sample, now + MEMORY_SAMPLE_SECONDS)
        self._dispatch()

    def _note_function_peaks(self, usage: Dict[int, int]) -> None:
        """What each running task's processor uses now counts toward its function's peak."""
        peaks = self.function_peaks
        for number, used in usage.items():
            running = self.processors[number].running()
            if running is None:
                continue
            function_id = running.task.function_id
            if used > peaks.get(function_id, 0):
                peaks[function_id] = self._peaks_to_report[function_id] = used

    def _charge(self, object_id: bytes, number: int, size: int) -> None:
        """A held result processor `number` wrote: its cgroup must allow that much more (AllowMemory)."""
        if type(self.cache.held_payload(object_id)) is not SharedBytes:
            return  # put to the scheduler, not held; or held as bytes, in the agent's memory (objects.py)
        self._charged_to[object_id] = (number, size)
        self._allowances[number] = self._allowances.get(number, 0) + size
        self._allowances_changed.add(number)

    def _uncharge(self, object_id: bytes) -> None:
        """A held result was freed: its pages no longer count in its writer's cgroup. Not when it is spilled: the
        processor that wrote it may still have its memfd open (it keeps its last result's), and the pages with it."""
        charged = self._charged_to.pop(object_id, None)
        if charged is not None:
            number, size = charged
            if number in self._allowances:  # else its processor is gone, and what its cgroup allows with it
                self._allowances[number] -= size
                self._allowances_changed.add(number)

    def _mark_over_limit(self, peak: int) -> None:
        """The TaskResult just answered failed past the memory limit: say so, for the scheduler, which retries it only
        on a worker with a larger limit."""
        result = self._outgoing[-1][0]
        assert type(result) is TaskResult  # _send_result appends it last
        result.memory_limit = self.memory_limit
        result.peak_memory = peak

    def _held_in_memory(self) -> int:
        return self.cache.held_bytes() - self.spilled_bytes

    def _spill(self, wanted: int) -> int:
        """Have the shell move held results to disk, least recently used first, until `wanted` bytes (at most
        SPILL_BYTES_AT_ONCE, so that the agent's loop turns meanwhile: the next sample goes on); the bytes chosen."""
        chosen: List[bytes] = []
        total = 0
        spilled = self.spilled
        for object_id in self.cache.held_least_recently_used():
            if total >= wanted or total >= SPILL_BYTES_AT_ONCE:
                break
            payload = self.cache.held_payload(object_id)
            if object_id in spilled or type(payload) is not SharedBytes:
                continue  # on disk already, or small bytes in the agent's own memory
            size = len(payload)
            chosen.append(object_id)
            spilled[object_id] = size
            self.spilled_bytes += size
            total += size
        if chosen:
            self._instructions.append(SpillHeld(chosen))
            self._forget_in_processors(chosen)  # their mappings would keep the memory spilling gives back
            if total < wanted:
                self._next_memory_sample = min(self._next_memory_sample, self._now + MEMORY_SAMPLE_SECONDS)
        return total

    def held_not_moved(self, spills: List[bytes], read_backs: List[bytes]) -> None:
        """The shell could not carry out these moves of SpillHeld and ReadBackHeld (a full disk, no memory): those
        results stay where they were."""
        for object_id in spills:
            self._unspilled(object_id)
        for object_id in read_backs:
            payload = self.cache.held_payload(object_id)
            if payload is not None and object_id not in self.spilled:
                self.spilled[object_id] = len(payload)
                self.spilled_bytes += len(payload)

    def _hold(self, object_id: bytes, payload: Any, now: float) -> None:
        """Hold a result. A copy of the same id may still be here: deleted by the scheduler but pinned by a task that
        has not let it go, then made again (or taken) under that id. The new copy replaces it, in memory: the old
        one's spilling and memory charge go with it."""
        if object_id in self.cache:
            self._unspilled(object_id)
            self._uncharge(object_id)
        self.cache.hold(object_id, payload, now)

    def _unspilled(self, object_id: bytes) -> None:
        size = self.spilled.pop(object_id, None)
        if size is not None:
            self.spilled_bytes -= size

    def _stop_for_memory(self, processor: ProcessorState, used: int, total: int) -> None:
        """The worker is past its stop threshold: replace `processor`, failing its running task if it has one."""
        if self.awaiting_preload and processor.number in self.preloading:  # another would load as much
            self._preload_failed(f"its task process used {used / 1e6:.1f} MB, past the memory stop threshold")
            return
        if processor.role == ACTOR_PROCESSOR:
            error = MemoryLimitError(self.memory_limit, used, "the worker's watchdog", self.identity)
            self._lose_actor(processor, f"its process went past the worker's memory limit: {error}", kill=True)
            return
        running = processor.running()
        if running is None or running.state == CANCELED:
            logger.info(
                "%s: processor %d holds %.1f MB while the worker is past its memory stop threshold: replaced",
                self.name,
                processor.number,
                used / 1e6,
            )
            if running is not None:
                self._cancel_running(processor, running)
                return
            was_active = processor is self.active
            self._remove_processor(processor, kill=True)
            self._recover_pipe(processor)
            if was_active:
                self.active = self._start_processor()
            return
        error = MemoryLimitError(self.memory_limit, used, "the worker's watchdog", self.identity)
        text = f"{error} (the worker held {total / 1e6:.1f} MB in all)"
        self.warnings.log("over memory limit", self._now, "%s: task %s: %s", self.name, running.task_id.hex(), text)
        self._cancel_running(
            processor, running, "over memory limit", TaskStatus.failed, str(error), cloudpickle.dumps(error)
        )
        self._mark_over_limit(used)

    def _park(self, processor: ProcessorState, task_id: bytes) -> None:
        """The processor's running task waits on a future: take back what it was handed ahead, feed another one."""
        task = processor.pipe.get(task_id)
        if processor is not self.active or task is None:
            return  # not the processor tasks are handed to (cannot happen: only it runs tasks it was handed)
        if task.state == CANCELED:
            self._cancel_running(processor, task)  # it started before our drop order reached it
            return
        deadline = task.deadline
        self._take_from_pipe(processor, task)
        self._recover_pipe(processor)  # the results of the tasks before it came with the report
        processor.pipe[task_id] = task
        processor.pipe_expected_seconds = task.expected_seconds
        task.processor = processor
        if task.task.timeout_ms:  # its clock goes on while it is parked
            self.timed[task_id] = task
            task.deadline = deadline or self._now
        task.move("blocked", PARKED)
        self._instructions.append(EndParking(processor.number))
        processor.role = PARKED_PROCESSOR
        self.parked.append(processor)
        logger.debug("%s: task %s waits on a future, parked processor %d", self.name, task_id.hex(), processor.number)
        if self.spares:
            self.active = self.spares.pop()
            self.active.role = ACTIVE
        else:
            self.active = self._start_processor()

    def _unpark(self, processor: ProcessorState) -> None:
        """A parked processor's task is done: it becomes a spare, or goes if there are enough."""
        self.parked.remove(processor)
        processor.role = SPARE
        processor.idle_since = self._now
        self.spares.append(processor)
        if len(self.spares) > MAX_SPARE_PROCESSORS:
            self._remove_processor(self.spares[0], kill=True)

    def _dispatch(self) -> None:
        """Hand ready tasks to the processor: one if it is idle, more while their expected run time is short.

        Tasks in the pipe cannot be balanced away, so a function is trusted to be short only once it was seen to be.
        """
        if self.actors and self.exit_code is None:
            self._dispatch_actors()
        processor = self.active
        if processor is None or self.exit_code is not None or self.memory_paused:
            return
        pipe = processor.pipe
        queue = self.queue
        durations = self.durations
        budget = config.DEFAULT_PREFETCH_SECONDS
        room = config.DEFAULT_PREFETCH_TASKS - len(pipe)
        planned_seconds = processor.pipe_expected_seconds
        handed: List[ProcessorTask] = []
        shared: List[SharedBytes] = []
        while room > 0:
            task = queue.first_ready()
            if task is None:
                break
            expected = durations.get(task.task.function_id, budget)
            if expected > budget:
                expected = budget
            if (pipe or handed) and planned_seconds + expected > budget:
                break
            queue.pop_ready()
            task.move("dispatch", HANDED)
            processor.handed_count += 1
            task.seq = processor.handed_count
            task.processor = processor
            task.expected_seconds = expected
            planned_seconds += expected
            pipe[task.task_id] = task
            handed.append(self._processor_task(task, processor, shared))
            if task.task.timeout_ms:
                self.timed[task.task_id] = task
            room -= 1
        if handed:
            if self.timed:
                self._start_head_clock(processor)
            if self.memory_limit:  # a task runs: its memory is watched closely from now on, not at the idle pace
                self._next_memory_sample = min(self._next_memory_sample, self._now + MEMORY_SAMPLE_SECONDS)
            processor.pipe_expected_seconds = planned_seconds
            instructions = self._instructions
            last = instructions[-1] if instructions else None
            if type(last) is HandTasks and last.number == processor.number:
                last.tasks.extend(handed)  # one message to the processor per turn of the shell's loop
                last.shared.extend(shared)
            else:
                instructions.append(HandTasks(processor.number, handed, shared))

    def _processor_task(self, task: WorkerTask, processor: ProcessorState, shared: List[SharedBytes]) -> ProcessorTask:
        """The task as its processor reads it; a shared payload of a graph result (held here, or fetched) stands as
        its size, appended to `shared`, whose descriptors go beside (channel.ProcessorOrders.shared)."""
        forget = self._take_forget(processor)
        message = task.task
        serializer_id = message.serializer_id
        # In the order the processor's channel reads the descriptors of shared payloads: serializer, function, then
        # each argument (channel._from_wire).
        serializer_payload = self._payload_for(processor, b"", serializer_id) if serializer_id else None
        if type(serializer_payload) is SharedBytes:  # a large object fetched from its client: its memory, mapped
            shared.append(serializer_payload)
            serializer_payload = serializer_payload.size
        function_payload = self._payload_for(processor, serializer_id, message.function_id)
        if type(function_payload) is SharedBytes:
            shared.append(function_payload)
            function_payload = function_payload.size
        # Plain tuples of ProcessorArgument's and ProcessorTask's shapes: marshalled as they are (channel.py), which
        # NamedTuples could not be.
        arguments = []
        for argument in message.args:
            kind = argument.kind
            if kind == _INLINE:
                arguments.append((argument.name, b"", argument.data, False))
            elif kind == _OBJECT_REF:
                payload = self._payload_for(processor, serializer_id, argument.data)
                if type(payload) is SharedBytes:
                    shared.append(payload)
                    payload = payload.size
                    if self._reusable:
                        self._read_by(argument.data, processor)
                arguments.append((argument.name, argument.data, payload, True))
            else:  # a graph result is used by one task or a few: not worth a deserialized copy in the processor
                if self.spilled:
                    self._used_held(argument.data)
                payload = self.cache.get(argument.data)
                if type(payload) is SharedBytes:
                    shared.append(payload)
                    payload = payload.size
                    if self._reusable:
                        self._read_by(argument.data, processor)
                arguments.append((argument.name, argument.data, payload, False))
        return (  # type: ignore[return-value]
            task.seq,
            task.task_id,
            serializer_id,
            serializer_payload,
            message.function_id,
            function_payload,
            arguments,
            message.profiling,
            forget,
            message.stream_output and self.output_forwarded,  # an older scheduler would drop TaskOutput's frames
        )

    def _read_by(self, object_id: bytes, processor: ProcessorState) -> None:
        """A held result is handed to a processor: one other than its writer makes its file not reusable."""
        written = self._reusable.get(object_id)
        if written is not None and written[0] != processor.number:
            del self._reusable[object_id]

    def _payload_for(self, processor: ProcessorState, serializer_id: bytes, object_id: bytes) -> Optional[bytes]:
        """The object's bytes, or None when this processor already has them (to deserialize with that serializer)."""
        key = (serializer_id, object_id)
        if key in processor.held:
            return None
        processor.held.add(key)
        return self.cache.get(object_id)

    # --- invariants -----------------------------------------------------------------------------------------------

    def validate(self) -> None:
        """Check every invariant (invariants.py); tests call this after every step, production never does."""
        check_invariants(self)
