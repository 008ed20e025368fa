"""Internal: the worker agent: the shell around WorkerCore (core.py), one per worker.

It owns what the core must not touch: the ZeroMQ socket to the scheduler, the processors' channels, shared
progress and output pipes, the fork server that starts processors (zygote.py), signals, psutil and the clock.
Everything happens on one thread around one poll of the scheduler socket, the processors' channels and output pipes,
the fork server's control socket and a signal wake-up socket. Each turn of the loop reads what is there (processors
first, so that results they sent beat a cancel that crosses them; of a processor, its reports, then its output pipes,
which then hold all that the reported tasks wrote, fed to the core before the reports), feeds it to the core with the
time, carries out the core's instructions in order and sends what the core has for the scheduler as one frame.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

import psutil
import zmq
from zmq.utils.monitor import recv_monitor_message

from scaler import config
from scaler.gc_tuning import tune_for_a_loop
from scaler.io.curve import ZapResponder, refusal_log, z85_keys
from scaler.io.data_fetch import DataFetcher
from scaler.io.data_server import DataServer, data_host
from scaler.io.limits import raise_open_files_limit
from scaler.io.local_data import LocalDataServer
from scaler.io.relay_link import RelayLink, follow_relay, relay_address
from scaler.io.shared_bytes import SharedBytes
from scaler.io.sockets import HANDSHAKE_REFUSALS, TcpKeepalive, create_dealer, make_identity, refusal_reason
from scaler.protocol import ProtocolError, decode_frame
from scaler.worker.core import EXIT_BROKEN, EXIT_OK, EXIT_SCHEDULER_LOST, WorkerCore
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
from scaler.worker.lifetime import parent_alive
from scaler.worker.memory import CgroupMaker, ProcessCgroup, pss_bytes, read_back, rss_bytes, spill
from scaler.worker.native_threads import describe_native_threads, native_thread_variables
from scaler.worker.outbox import Outbox
from scaler.worker.preload import preload_hook
from scaler.worker.processor_link import ProcessorLink
from scaler.worker.settings import WorkerSettings
from scaler.worker.watchdog import TurnCounter
from scaler.worker.zygote import ProcessorZygote, ZygoteGone, describe_wait_status

_MAX_FRAMES_PER_READ = 1000  # then the loop runs once before reading on, so results and heartbeats keep flowing
_FORK_TIMEOUT_SECONDS = 10.0  # the fork server answers in milliseconds; this only guards against a wedged one
_EXIT_STATUS_TIMEOUT_SECONDS = 2.0  # a dead processor is reaped at once; this only bounds the wait for its status
_DISCONNECT_LINGER_MS = 1000  # lets WorkerDisconnect leave before the socket closes, without hanging on a dead link


def run_worker(
    settings: WorkerSettings,
    name: str,
    parent_pid: Optional[int] = None,
    turns: Optional[TurnCounter] = None,
    replaces: str = "",
    on_ready: Optional[Callable[[], None]] = None,
) -> int:
    """Run one worker in the calling process until it stops; returns its exit code.

    Call it before this process creates any ZeroMQ context or thread: the processor fork server is forked first.
    `turns` counts the loop's turns for the launcher's watchdog (scaler/worker/watchdog.py); `replaces` says which
    lost worker this one replaces, for the scheduler; `on_ready` is called once, as it first connects to the scheduler
    (with a preload, once its first processor ran it).
    """
    threads = settings.native_threads
    thread_variables = native_thread_variables(threads, os.environ)
    logging.info("%s: %s", name, describe_native_threads(threads, thread_variables, os.environ))
    zygote = ProcessorZygote.start(preload_hook(settings.preload), thread_variables)
    agent = None
    try:
        agent = WorkerAgent(settings, name, zygote, parent_pid, turns, replaces, on_ready)
        return agent.run()
    finally:
        zygote.stop(timeout_seconds=1.0)
        if agent is not None and agent.cgroups is not None:
            agent.cgroups.close()  # its processors are reaped now: their cgroups can go


class WorkerAgent:
    def __init__(
        self,
        settings: WorkerSettings,
        name: str,
        zygote: ProcessorZygote,
        parent_pid: Optional[int],
        turns: Optional[TurnCounter] = None,
        replaces: str = "",
        on_ready: Optional[Callable[[], None]] = None,
    ) -> None:
        self._settings = settings
        self._on_ready = on_ready
        self._name = name
        self._zygote = zygote
        self._parent_pid = parent_pid
        self._turns = turns
        self._replaces = replaces
        self._data: Optional[DataServer] = None
        self._zap: Optional[ZapResponder] = None  # with CurveZMQ: who may connect to the data address
        self._local_data: Optional[LocalDataServer] = None  # the data address's socket for readers on this host
        self._relay_link: Optional[RelayLink] = None  # to the data relay, for peers that cannot reach the data address
        self._registrations = 0  # the core's, when the relay was last told of us
        self._fetching = False  # fetches from other workers under way: their sockets and deadlines are watched
        self._links: Dict[int, ProcessorLink] = {}  # by the core's processor number
        self._dealer: Optional[zmq.Socket] = None
        self._dealer_events: Optional[zmq.Socket] = None  # the dealer's monitor: tells when its connection closes
        self._outbox: Optional[Outbox] = None
        self._exit: Optional[Exit] = None
        self._crashed = False
        self._next_orphan_check = 0.0
        self._agent_process = psutil.Process()
        self.cgroups: Optional[CgroupMaker] = None  # a memory cgroup per processor (memory.py), if in force
        self._cgroup_of: Dict[int, ProcessCgroup] = {}  # by processor number
        self._spill_directory = ""  # the worker's own temporary directory, with a memory limit: spilled results

    # --- life cycle ---------------------------------------------------------------------------------------------------

    def run(self) -> int:
        self._wake_read, wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        wake_write.setblocking(False)
        signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda number, frame: None)  # the wake-up socket tells the loop which one came
        self._context = zmq.Context(io_threads=1)
        self._poller = zmq.Poller()
        self._poller.register(self._wake_read.fileno(), zmq.POLLIN)
        self._poller.register(self._zygote.fileno(), zmq.POLLIN)
        self._data = self._open_data_address()
        if self._data is not None:
            try:
                same_user_only = self._settings.curve_keys is not None
                self._local_data = LocalDataServer(self._data.address, self._poller, same_user_only)
            except OSError as error:  # not Linux (no abstract Unix sockets): readers here fetch through the network
                logging.info("%s: no local data socket (%s)", self._name, error)
        # held results of other workers, for our tasks
        self._fetcher = DataFetcher(self._context, self._poller, self._settings.curve_keys)
        self._core = WorkerCore(
            self._settings,
            self._name,
            socket.gethostname(),
            os.getpid(),
            time.monotonic(),
            self._replaces,
            self._data.address if self._data is not None else "",
        )
        # A quarter of the open-files limit (raised by scaler_cluster already) for the shared memory files of held
        # results; the rest for their copies handed to task processes, fetches in flight, sockets and libraries.
        open_files = raise_open_files_limit().soft
        self._core.cache.shared_quota = open_files // 4 if open_files else sys.maxsize
        self._set_up_memory_limit()
        # the processors, forked from the fork server before this, keep the defaults: the tasks they run are the user's
        tune_for_a_loop()
        try:
            self._execute()
            self._flush()
            while self._exit is None:
                self._run_once()
        except ZygoteGone as error:
            self._core.stop(EXIT_BROKEN, f"cannot start processors: {error}")
            self._exit = Exit(EXIT_BROKEN, str(error), False)
        except Exception:
            logging.exception("%s: crashed", self._name)
            self._crashed = True
            if self._outbox is not None:
                self._outbox.clear()  # what failed to go out once would fail again while closing
            self._core.take_outgoing()
            self._exit = Exit(EXIT_BROKEN, "crashed", False)
        finally:
            self._close(wake_write)
        return self._exit.code

    def _close(self, wake_write: socket.socket) -> None:
        if not self._crashed:
            self._flush()  # results of finished tasks still count; the core kept nothing if nobody listens
        for link in list(self._links.values()):
            self._kill(link)
        signal.set_wakeup_fd(-1)
        self._wake_read.close()
        wake_write.close()
        if self._data is not None:
            self._data.close()
        if self._zap is not None:
            self._zap.close()
        if self._local_data is not None:
            self._local_data.close()
        if self._relay_link is not None:
            self._relay_link.close()
        self._fetcher.close()
        if self._spill_directory:
            shutil.rmtree(self._spill_directory, ignore_errors=True)  # empty: spilled files are unnamed
        assert self._exit is not None  # the loop ends, or failed, with one
        self._close_dealer(linger=_DISCONNECT_LINGER_MS if self._exit.disconnect else 0)
        self._context.term()

    # --- the loop -----------------------------------------------------------------------------------------------------

    def _run_once(self) -> None:
        if self._turns is not None:
            self._turns.turn()
        core = self._core
        now = time.monotonic()
        deadline = core.next_deadline()
        if self._parent_pid is not None:
            deadline = min(deadline, self._next_orphan_check)
        if self._fetching:
            deadline = min(deadline, self._fetcher.next_deadline() or deadline)
        events = dict(self._poller.poll(math.ceil(max(0.0, deadline - now) * 1000)))
        now = time.monotonic()
        if self._wake_read.fileno() in events:
            self._on_signals()
        # Processors first: results they sent before a cancel crossed them beat the cancel.
        for link in list(self._links.values()):
            stdout_fd, stderr_fd = link.output.fds
            pipes_ready = stdout_fd in events or stderr_fd in events
            channel_events = events.get(link.fileno(), 0)
            if channel_events & zmq.POLLOUT:
                self._write_processor(link)
            if pipes_ready or channel_events & ~zmq.POLLOUT:
                self._read_processor(link, now, pipes_ready)
        if self._zygote.fileno() in events:
            self._zygote.read_exits()
            # Its exit, not only its end of file: children its task forked may keep the socket open.
            for link in list(self._links.values()):
                if self._zygote.has_exited(link.pid):
                    self._read_processor(link, now, pipes_ready=True)
                    self._processor_died(link, now)
        for link in self._links.values():
            core.observe(link.number, *link.progress.read(), now)
        # Before the scheduler's socket: once its connection closed, what it reads is from before, or from a new
        # scheduler that does not know this connection (ZeroMQ reconnects on its own), and goes with it.
        if self._dealer_events is not None and self._dealer_events in events:
            self._read_dealer_events(now)
        if self._dealer is not None and self._dealer in events:
            self._read_scheduler(now)
        if self._zap is not None and self._zap.socket in events:
            self._zap.answer_pending(now)
        if self._data is not None and self._data.sock in events:
            self._data.chunk_bytes = config.object_chunk_bytes(core.max_frame_bytes)
            self._data.serve(core.held_payload)
        if self._local_data is not None:
            self._local_data.on_events(events, core.held_payload)
        if self._relay_link is not None and self._relay_link.sock in events:
            self._relay_link.serve(core.held_payload)
        if self._fetching or self._fetcher.polled(events):  # answers, their end, or a holder gone
            self._read_fetches(events, now)
        if now >= deadline:  # a timer is due (the stimuli above dispatch on their own)
            core.tick(now)
        if self._parent_pid is not None and now >= self._next_orphan_check:
            self._next_orphan_check = now + config.DEFAULT_ORPHAN_CHECK_INTERVAL_SECONDS
            if not parent_alive(self._parent_pid):
                core.stop(EXIT_SCHEDULER_LOST, f"the cluster process {self._parent_pid} is gone")
        self._execute()
        self._flush()
        core.stalled(time.monotonic() - now, now)

    def _on_signals(self) -> None:
        try:
            received = self._wake_read.recv(64)
        except BlockingIOError:
            return
        for signum in received:
            if signum == signal.SIGTERM:
                # Retire: the scheduler moves the queued tasks and waits for the running one. Repeated SIGTERMs
                # change nothing (a process group may get one from its manager and one from scaler_cluster); the
                # launcher stops its workers at once with SIGINT.
                self._core.retire(self._settings.retire_timeout_seconds, "received SIGTERM", time.monotonic())
            elif signum == signal.SIGINT:
                self._core.stop(EXIT_OK, "received SIGINT", disconnect=True)

    def _read_scheduler(self, now: float) -> None:
        messages: List[object] = []
        assert self._dealer is not None  # read only while connected
        for _ in range(_MAX_FRAMES_PER_READ):
            try:
                frame = self._dealer.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            try:
                messages += decode_frame(frame)
            except ProtocolError as error:
                self._core.receive_malformed(str(error), now)
        if messages:
            self._core.receive(messages, now)

    def _read_dealer_events(self, now: float) -> None:
        dropped = False
        assert self._dealer_events is not None  # read only while connected
        while True:
            try:
                event = recv_monitor_message(self._dealer_events, zmq.NOBLOCK)
            except zmq.Again:
                break
            if event["event"] & HANDSHAKE_REFUSALS:  # final: connecting anew would be refused again, in a loop
                self._core.refused(refusal_reason(event["event"], "worker", "--curve-server-key"), now)
                return
            dropped = dropped or event["event"] == zmq.EVENT_DISCONNECTED
        if dropped:
            self._core.connection_dropped(now, self._outbox.largest if self._outbox is not None else 0)

    def _read_processor(self, link: ProcessorLink, now: float, pipes_ready: bool) -> None:
        if link.number not in self._links:
            return
        reports = link.reader.read_available()
        # After the reports: the processor wrote the output of the tasks they answer before it sent them. Only if
        # there may be some: reading empty pipes costs two system calls per report.
        for report in reports:
            if report.streamed:
                pipes_ready = True
        output = link.read_output(pipes_ready)
        self._unwatch_closed_pipes(link)
        if output:
            self._core.processor_output(link.number, output, now)
        for report in reports:
            self._core.processor_report(link.number, report, now)
        if link.reader.closed:
            self._processor_died(link, now)

    def _write_processor(self, link: ProcessorLink) -> None:
        try:
            link.write()
        except OSError:
            return  # the processor is gone: the poll sees its end of file
        if not link.writing:
            self._poller.register(link.fileno(), zmq.POLLIN)

    def _processor_died(self, link: ProcessorLink, now: float) -> None:
        if self._links.pop(link.number, None) is None:
            return
        self._core.observe(link.number, *link.progress.read(), now)  # its last word on which task it ran
        self._unwatch(link)
        link.close_after_death()
        how = describe_wait_status(self._zygote.wait_exit(link.pid, _EXIT_STATUS_TIMEOUT_SECONDS))
        memory_peak = None
        group = self._cgroup_of.pop(link.number, None)
        if group is not None:
            if group.oom_kills():  # the kernel killed it at its cgroup's limit
                memory_peak = group.peak_bytes()
            assert self.cgroups is not None  # groups are made by it
            self.cgroups.release(group)
        self._core.processor_died(link.number, how, now, memory_peak)

    # --- the core's instructions --------------------------------------------------------------------------------------

    def _execute(self) -> None:
        instructions = self._core.take_instructions()
        while instructions:  # a memory sample is answered at once, and the core may have more to do then
            self._execute_some(instructions)
            instructions = self._core.take_instructions()

    def _execute_some(self, instructions: List[Any]) -> None:
        link: Optional[ProcessorLink]  # one started, or one to kill
        for instruction in instructions:
            kind = type(instruction)
            if kind is HandTasks:
                self._order(instruction.number, ProcessorLink.hand, instruction.tasks, instruction.shared)
            elif kind is DropTasks:
                self._order(instruction.number, ProcessorLink.drop, instruction.task_ids)
            elif kind is SendHeartbeat:
                self._send_heartbeat(instruction)
            elif kind is StartProcessor:
                self._flush()  # what is settled leaves first: a fork takes a while, and a wedged fork server forever
                group = self._make_cgroup(instruction.number)
                forked = self._zygote.fork_processor(_FORK_TIMEOUT_SECONDS, group.procs_path if group else "")
                link = ProcessorLink(instruction.number, forked, self._settings.task_output_limit_bytes)
                self._links[link.number] = link
                self._poller.register(link.fileno(), zmq.POLLIN)
                for fd in link.output.fds:
                    self._poller.register(fd, zmq.POLLIN)
                logging.debug("%s: processor %d started as pid %d", self._name, link.number, link.pid)
            elif kind is KillProcessor:
                link = self._links.get(instruction.number)
                if link is not None:
                    self._kill(link)
            elif kind is EndParking:
                self._order(instruction.number, ProcessorLink.end_parking)
            elif kind is ForgetObjects:
                self._order(instruction.number, ProcessorLink.forget, instruction.object_ids)
            elif kind is GiveSpares:
                self._order(instruction.number, ProcessorLink.give_spares, instruction.spares)
            elif kind is FetchData:
                self._fetch(instruction)
            elif kind is AcceptDataKeys:
                if self._zap is not None:
                    self._zap.authorized_keys = z85_keys(instruction.keys)
            elif kind is SampleMemory:
                self._sample_memory(instruction)
            elif kind is SpillHeld or kind is ReadBackHeld:
                self._move_held(instruction)
            elif kind is AllowMemory:
                self._allow_memory(instruction)
            elif kind is Connect:
                self._connect()
            elif kind is Exit:
                self._exit = instruction

    def _order(self, number: int, send, *arguments) -> None:
        link = self._links.get(number)
        if link is None:
            return
        try:
            send(link, *arguments)
        except OSError:
            return  # the processor is gone: the poll sees its end of file next, and the core recovers its tasks then
        if link.writing:  # the rest goes as the channel finds room, while the loop goes on reading
            self._poller.register(link.fileno(), zmq.POLLIN | zmq.POLLOUT)

    def _kill(self, link: ProcessorLink) -> None:
        del self._links[link.number]
        self._unwatch(link)
        link.kill()
        self._zygote.ignore_exit(link.pid)
        group = self._cgroup_of.pop(link.number, None)
        if group is not None:
            assert self.cgroups is not None  # groups are made by it
            self.cgroups.release(group)  # once the zygote reaped it: at a later release, or at exit

    # --- memory (memory.py) -------------------------------------------------------------------------------------------

    def _set_up_memory_limit(self) -> None:
        """Choose how the memory limit is enforced, and say so."""
        core = self._core
        if not core.memory_limit:
            return
        limit = f"{config.size_text(core.memory_limit)} ({self._settings.memory_limit})"
        self._spill_directory = tempfile.mkdtemp(prefix=f"scaler-worker-{os.getpid()}-")
        wanted = self._settings.memory_enforcement
        reason = "--memory-enforcement watchdog"
        if wanted != "watchdog":
            self.cgroups, reason = CgroupMaker.probe(f"scaler-{os.getpid()}", core.memory_limit)
        if self.cgroups is not None:
            self.cgroups.remove_stale()
            core.memory_enforcement = "cgroup"
            logging.info(
                "%s: memory limit %s, enforced by a memory cgroup per task process, %s, and the watchdog",
                self._name, limit, self.cgroups.description,
            )  # fmt: skip
            return
        if wanted == "cgroup":
            core.stop(EXIT_BROKEN, f"--memory-enforcement cgroup, but no memory cgroup can be made here: {reason}")
            return
        logging.info(
            "%s: memory limit %s, enforced by the watchdog (task processes sampled every %g s; no cgroup: %s)",
            self._name, limit, config.DEFAULT_MEMORY_SAMPLE_SECONDS, reason,
        )  # fmt: skip

    def _make_cgroup(self, number: int) -> Optional[ProcessCgroup]:
        if self.cgroups is None:
            return None
        try:
            group = self.cgroups.make(str(number))
        except OSError as error:
            logging.warning("%s: processor %d runs without a memory cgroup: %s", self._name, number, error)
            return None
        self._cgroup_of[number] = group
        return group

    def _allow_memory(self, instruction: AllowMemory) -> None:
        group = self._cgroup_of.get(instruction.number)
        if group is None:
            return
        try:
            group.set_limit(self._core.memory_limit + instruction.extra_bytes)
        except OSError as error:  # below what the kernel can reclaim now: it stays higher until the next change
            logging.debug("%s: cgroup of processor %d: %s", self._name, instruction.number, error)

    def _move_held(self, instruction) -> None:
        """Spill held results to the worker's directory, or read them back (memory.py); tell the core what failed."""
        failed: List[bytes] = []
        for object_id in instruction.object_ids:
            payload = self._core.cache.held_payload(object_id)
            if type(payload) is not SharedBytes:
                continue  # freed meanwhile
            try:
                spill(payload, self._spill_directory) if type(instruction) is SpillHeld else read_back(payload)
            except OSError as error:
                logging.warning("%s: could not move held result %s: %s", self._name, object_id.hex(), error)
                failed.append(object_id)
        if failed:
            spilling = type(instruction) is SpillHeld
            self._core.held_not_moved(failed if spilling else [], [] if spilling else failed)

    def _sample_memory(self, instruction: SampleMemory) -> None:
        usage: Dict[int, int] = {}
        pids: Dict[int, int] = {}
        for number in instruction.numbers:
            group = self._cgroup_of.get(number)
            if group is not None:  # what the kernel's limit counts: one read
                usage[number] = group.usage_bytes()
            elif number in self._links:
                pids[number] = self._links[number].pid
        if pids:
            links = self._links  # their spare files are their memory too, which no mapping shows (spares.py)
            by_rss = {number: rss_bytes(pid) + links[number].progress.spare() for number, pid in pids.items()}
            if sum(by_rss.values()) + sum(usage.values()) >= instruction.exact_above:  # RSS counts shared pages
                # in full: PSS shares them out, and leaves out held results kept mapped
                by_rss = {
                    number: pss_bytes(pid, links[number].progress.kept()) + links[number].progress.spare()
                    for number, pid in pids.items()
                }
            usage.update(by_rss)
        self._core.memory_sampled(usage, time.monotonic())

    def _unwatch(self, link: ProcessorLink) -> None:
        self._poller.unregister(link.fileno())
        for fd in link.output.fds:
            self._poller.register(fd, 0)  # unregisters it, if it still is

    def _unwatch_closed_pipes(self, link: ProcessorLink) -> None:
        """A pipe at its end (every writer closed it: a task closed the processor's end) would poll readable forever."""
        for fd, is_open in zip(link.output.fds, link.output.open):
            if not is_open:
                self._poller.register(fd, 0)

    def _fetch(self, instruction: FetchData) -> None:
        now = time.monotonic()
        if self._fetcher.reachable(instruction.address, now, instruction.holder_key):
            self._fetcher.fetch(instruction.address, instruction.object_id, now, instruction.holder_key)
            self._fetching = True
        else:
            self._core.data_fetched(instruction.object_id, None, now)

    def _read_fetches(self, events: Dict, now: float) -> None:
        """What holders sent, and the fetches that heard nothing for too long. A large result fetched through the
        network goes into shared memory once here, so the processor that reads it gets its descriptor, not a copy
        through the channel; one from a holder on this host is that holder's shared memory already."""
        fetcher = self._fetcher
        core = self._core
        for object_id, payload, _ in fetcher.ready(events, now):
            if (
                payload is not None
                and type(payload) is not SharedBytes
                and len(payload) > config.DEFAULT_INLINE_LIMIT_BYTES
            ):
                payload = SharedBytes.create(payload)
            core.data_fetched(object_id, payload, now)
        self._fetching = fetcher.next_deadline() is not None

    def _follow_relay(self) -> None:
        """Registered (again) with a scheduler: use its data relay, and tell the relay where this worker serves."""
        port = self._core.relay_port
        address = relay_address(self._settings.address, port) if port else None
        self._fetcher.relay = address
        self._relay_link = follow_relay(
            self._relay_link,
            address,
            self._context,
            self._poller,
            self._data.address if self._data is not None else None,
            self._core.max_frame_bytes,
            self._settings.curve_keys,
        )

    def _open_data_address(self) -> Optional[DataServer]:
        """Where this worker serves the results it holds; None (they go through the scheduler) for a scheduler on
        ipc://. With CurveZMQ, it accepts nobody until the scheduler said which keys (AcceptDataKeys)."""
        host = data_host(self._settings.address)
        if host is None:
            return None
        curve = self._settings.curve_keys
        if curve is not None and self._zap is None:  # bound first: without it, libzmq would let any key in
            self._zap = ZapResponder(self._context, warnings=refusal_log(f"{self._name}: "))
            self._poller.register(self._zap.socket, zmq.POLLIN)
        try:
            server = DataServer(self._context, host, curve, self._zap)
        except zmq.ZMQError as error:
            logging.warning("%s: no data address on %s (%s): results go through the scheduler", self._name, host, error)
            return None
        self._poller.register(server.sock, zmq.POLLIN)
        logging.info("%s: data address %s%s", self._name, server.address, " (CurveZMQ)" if curve is not None else "")
        return server

    def _connect(self) -> None:
        """A new socket and identity: whatever the old socket still queued is dropped, never sent to a scheduler
        that does not know us."""
        self._close_dealer(linger=0)
        if self._on_ready is not None:
            on_ready, self._on_ready = self._on_ready, None
            on_ready()
        identity = make_identity("W")
        settings = self._settings
        events = zmq.EVENT_DISCONNECTED | (HANDSHAKE_REFUSALS if settings.curve_keys is not None else 0)
        self._dealer, self._dealer_events = create_dealer(
            self._context, settings.address, identity, events, settings.curve_keys, TcpKeepalive.of(settings)
        )
        self._outbox = Outbox(self._dealer)
        self._poller.register(self._dealer, zmq.POLLIN)
        self._poller.register(self._dealer_events, zmq.POLLIN)
        self._core.connecting(identity.decode(), time.monotonic())
        logging.info("%s: connecting to %s as %s", self._name, self._settings.address, identity.decode())

    def _close_dealer(self, linger: int) -> None:
        if self._dealer is None:
            return
        self._poller.unregister(self._dealer)
        self._poller.unregister(self._dealer_events)
        self._dealer.disable_monitor()
        assert self._dealer_events is not None  # made with the dealer
        self._dealer_events.close(linger=0)
        self._dealer.close(linger=linger)
        self._dealer = self._dealer_events = None

    def _send_heartbeat(self, instruction: SendHeartbeat) -> None:
        heartbeat = instruction.heartbeat
        agent = self._agent_process
        heartbeat.agent_cpu = agent.cpu_percent(None)
        heartbeat.agent_rss = agent.memory_info().rss
        link = self._links.get(instruction.active)
        if link is not None:
            heartbeat.processor_cpu, heartbeat.processor_rss = link.usage()
        assert self._outbox is not None  # the core sends heartbeats once connected
        self._outbox.add(heartbeat)

    def _flush(self) -> None:
        outgoing = self._core.take_outgoing()
        if self._outbox is None:
            return
        if self._core.max_frame_bytes != self._outbox.frame_limit:  # announced by the scheduler it registered with
            self._outbox.frame_limit = self._core.max_frame_bytes
            self._outbox.payload_budget = config.object_chunk_bytes(self._core.max_frame_bytes)
            self._fetcher.max_frame_bytes = self._core.max_frame_bytes
        if self._core.registrations != self._registrations:
            self._registrations = self._core.registrations
            self._follow_relay()
        add = self._outbox.add
        for message, payload_bytes in outgoing:
            add(message, payload_bytes)
        self._outbox.flush()
