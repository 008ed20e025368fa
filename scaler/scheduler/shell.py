"""Internal: the scheduler's IO shell: ZeroMQ sockets, the event loop and timers around the sans-IO core.

The ROUTER socket's file descriptor is registered with the event loop (asyncio's own, or uvloop's); when it is
readable the shell drains every waiting frame without blocking, feeds the decoded messages to the core, then sends
what the core queued, one frame per peer. ZeroMQ's descriptor is edge triggered, so after every send the shell checks
ZMQ_EVENTS again and schedules another drain if input arrived meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import Callable, List, Optional, Tuple

import psutil
import zmq

from scaler.io.addresses import tcp_ports
from scaler.io.ipc_files import BoundIpcFile
from scaler.io.limits import budget_for, listen_backlog, raise_open_files_limit, size_context
from scaler.io.sockets import TcpKeepalive, create_publisher, create_router, is_loopback
from scaler.protocol import (
    MESSAGE_TYPES,
    ClientDisconnect,
    Counter,
    Goodbye,
    ProtocolError,
    SchedulerStatus,
    WorkerDisconnect,
    decode_frame_for_routing,
)
from scaler.scheduler.connections import ConnectionWatch
from scaler.scheduler.core import FINISHED_NAMES, SchedulerCore
from scaler.scheduler.relay_process import RelayProcess, relay_host
from scaler.scheduler.settings import SchedulerSettings
from scaler.scheduler.state import STATE_NAMES
from scaler.scheduler.warmup import should_warm_up, warm_up
from scaler.scheduler.zap import ZapHandler

logger = logging.getLogger(__name__)

# bound the work done per readable event, so timers and sends are not starved by a flood of input
_MAX_FRAMES_PER_DRAIN = 4096
_EVENTS_LOOKS = 2  # a drain asks ZMQ_EVENTS before its second frame only, then reads until zmq.Again
# pyzmq's flags are enum.Flag members, whose | and & cost an enum lookup each: plain ints on the hot path
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE_NOBLOCK = int(zmq.SNDMORE) | int(zmq.NOBLOCK)
_POLLIN = int(zmq.POLLIN)
_EVENTS = int(zmq.EVENTS)
_RCVMORE = int(zmq.RCVMORE)
_TICK_SECONDS = 0.1  # while the core holds tasks or retiring workers: balancing, placement, retirement deadlines
# Holding none, a tick only looks for silent peers and publishes the status (on time: the tick is booked for it). Ten
# wake-ups a second cost an idle scheduler more than its heartbeats (each one a cold start of the event loop, the core
# and pyzmq: 0.6 to 1 point of a core at 4,096 workers); a silent peer is then found up to 0.5 s after its timeout
# rather than 0.1 s, while no task waits on it. Well under the core's 1 s stall threshold.
_IDLE_TICK_SECONDS = 0.5
_MIN_TICK_SECONDS = 0.01  # a status due now is published this soon, not in a loop of timers at the same instant


class SchedulerShell:
    def __init__(
        self, settings: SchedulerSettings, parent_pid: Optional[int] = None, handle_signals: bool = True
    ) -> None:
        self.settings = settings
        self._parent_pid = parent_pid
        self._handle_signals = handle_signals  # False for the private scheduler of the JIT warm-up (warmup.py)
        self._stop_before_run: Optional[Tuple[str, bool]] = None  # stop() called before run(): it stops at once
        self.core = SchedulerCore(settings, time.monotonic())
        # every peer's connection is a file descriptor: as many as the hard limit allows, and ZeroMQ sized to match
        self.open_files = raise_open_files_limit()
        self.context = zmq.Context()
        size_context(self.context, self.open_files)
        curve = settings.curve_keys
        # the ZAP handler must be bound before any CURVE server socket exists, or libzmq has nobody to ask
        warnings = self.core.peer_warnings
        self._zap: Optional[ZapHandler] = (
            None if curve is None else ZapHandler(self.context, curve.authorized_keys, warnings)
        )
        keepalive = TcpKeepalive.of(settings)
        backlog = listen_backlog(self.open_files)
        # watched before they are bound: a peer accepted or refused as soon as they listen is counted and logged too
        self.router = create_router(self.context, None, settings.max_frame_bytes, curve, keepalive, backlog)
        self.monitor = create_publisher(self.context, None, curve, keepalive)
        router_watch = ConnectionWatch(
            self.router, "scheduler address", curve is not None, warnings, self._goodbyes, counted=True
        )
        self._watches = [router_watch]
        if curve is not None:
            self._watches.append(ConnectionWatch(self.monitor, "monitor address", True, warnings))
        self.router.bind(settings.address)
        self.monitor.bind(settings.monitor_address)
        self.budget = budget_for(self.router, "scheduler address", self.open_files, backlog)
        router_watch.count_in(self.budget)
        self._ipc_files = [BoundIpcFile.after_bind(self.router), BoundIpcFile.after_bind(self.monitor)]
        self._process = psutil.Process()
        self._process.cpu_percent()
        self._usage: Tuple[float, int] = (0.0, 0)  # the last CPU % and RSS read (see _own_usage)
        self._usage_failed = False
        self._stopped: Optional[asyncio.Future] = None
        self._next_status = 0.0
        self._drain_scheduled = False
        self._closed = False  # its sockets are closed: run() has ended
        self._ticker: Optional[asyncio.TimerHandle] = None
        self._ticker_idle = False  # the next tick was booked at the idle pace
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self.relay: Optional[RelayProcess] = None  # forked by run_scheduler, not for the JIT warm-up's scheduler

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._stopped = loop.create_future()
        fd = self.router.fileno()
        loop.add_reader(fd, self._on_readable)
        if self._zap is not None:
            self._zap.start(loop)
        for watch in self._watches:
            watch.start(loop)
        if self._handle_signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, self._on_signal, signum)
        if self._stop_before_run is not None:
            self.stop(*self._stop_before_run)
        self._loop = loop
        self._ticker = loop.call_later(_TICK_SECONDS, self._tick)
        self._on_readable()  # anything queued before the reader was registered
        logger.info("Scheduler: listening on %s", self.settings.address)
        logger.info("Scheduler: %s", self.budget.describe())
        try:
            await self._stopped
        finally:
            if self._ticker is not None:
                self._ticker.cancel()
            loop.remove_reader(fd)
            self._flush()
            self._closed = True
            self.budget.close()
            self.router.close(linger=500)  # give the final Goodbyes a chance to leave
            self.monitor.close()
            for watch in self._watches:
                watch.close(loop)
            if self._zap is not None:
                self._zap.close(loop)
            self.context.term()
            for ipc_file in self._ipc_files:
                if ipc_file is not None:
                    ipc_file.remove()
            logger.info("Scheduler: stopped")

    def _goodbyes(self) -> int:
        """Peers that left properly: they said so, or the scheduler dropped them and said Goodbye."""
        received = self.core.received_counts
        left = received[ClientDisconnect.WHICH] + received[WorkerDisconnect.WHICH]
        return left + self.core.sent_counts[Goodbye.WHICH]

    def stop(self, reason: str, reconnect: bool = False) -> None:
        if self._stopped is None:  # before run() began (a signal during the JIT warm-up; its private shell on an error)
            self._stop_before_run = (reason, reconnect)
            return
        if not self._stopped.done():
            logger.info("Scheduler: stopping: %s", reason)
            if not self.core.stopping:
                self.core.shutdown(reason, reconnect)
            self._stopped.set_result(None)

    def _on_signal(self, signum: int) -> None:
        # Stopped from outside (systemd, an upgrade): clients and workers wait for a scheduler to come back on the
        # address, unless this one belongs to the process that started it (SchedulerClusterCombo), which never does.
        self.stop(f"received {signal.Signals(signum).name}", reconnect=self._parent_pid is None)

    def _on_readable(self) -> None:
        self._drain_scheduled = False
        if self._closed:  # a drain scheduled before run() ended; the loop may go on (the JIT warm-up's does)
            return
        router = self.router
        core = self.core
        now = time.monotonic()
        frames = 0
        try:
            while frames < _MAX_FRAMES_PER_DRAIN:
                # Most drains at low load read one frame (a heartbeat, a small submit). Asking ZMQ_EVENTS whether
                # another waits costs a fifth of the zmq.Again an empty recv raises under PyPy (about 4 us vs 18 us);
                # a long drain (under load) asks once and pays that Again once, not a look per frame. Looking before
                # more frames helps drains of 2 to 8 and costs long ones (bench/drain_loop.py compares the ways).
                if 0 < frames < _EVENTS_LOOKS and not router.getsockopt(_EVENTS) & _POLLIN:  # type: ignore[operator]  # ZMQ_EVENTS is an int
                    break
                try:
                    peer = router.recv(_NOBLOCK)
                except zmq.Again:  # woken by a ZeroMQ command rather than input, or the end of a long drain
                    break
                payload = router.recv(_NOBLOCK)
                frames += 1
                if router.getsockopt(_RCVMORE):
                    while router.getsockopt(_RCVMORE):
                        router.recv()
                    core.receive_malformed(peer, "a message of more than one frame", now)
                    continue
                try:
                    messages = decode_frame_for_routing(payload)  # forwards Tasks' arguments unread
                except ProtocolError as error:
                    core.receive_malformed(peer, str(error), now)
                    continue
                core.receive(peer, messages, now)
        finally:
            sent = self._flush()
        # input that arrived after the last look: _flush looked again if it sent (sending can consume the edge);
        # otherwise the last look was the ZMQ_EVENTS or recv above, and anything later raises the edge anew
        if frames >= _MAX_FRAMES_PER_DRAIN or (not sent and router.getsockopt(_EVENTS) & _POLLIN):  # type: ignore[operator]  # ZMQ_EVENTS is an int
            self._schedule_drain()
        if self._ticker_idle and core.holds_work():  # work arrived: its timers (balancing...) at the busy pace
            self._book_tick(now)
        if self.core.stopping:
            self.stop("shutdown requested")

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled:
            self._drain_scheduled = True
            asyncio.get_running_loop().call_soon(self._on_readable)

    def _flush(self) -> bool:
        """Send what the core queued; True if anything was sent (ZMQ_EVENTS was then looked at again)."""
        outgoing = self.core.take_outgoing()
        if not outgoing:
            return False
        router = self.router
        for peer, chunks in outgoing.items():
            try:
                router.send(peer, _SNDMORE_NOBLOCK)
                router.send(chunks[0] if len(chunks) == 1 else b"".join(chunks), _NOBLOCK)
            except zmq.Again:
                logger.warning("dropped %d message(s) to %r: its queue is full", len(chunks), peer)
        # sending can consume the edge that announced new input; look again
        if router.getsockopt(_EVENTS) & _POLLIN:  # type: ignore[operator]  # ZMQ_EVENTS is an int
            self._schedule_drain()
        return True

    def _tick(self) -> None:
        """The core's timers, status and the parent check: a plain timer callback, as a task sleeping in a loop costs
        a future, a timer and two task steps per tick. The next tick is booked even if this one raises (logged by the
        loop), so one failure does not end them."""
        now = time.monotonic()
        try:
            self.core.tick(now)
            if now >= self._next_status:
                self._next_status = now + self.settings.status_interval_seconds
                self._publish_status()
            self._flush()
        finally:
            self._book_tick(now)
        if self.core.stopping:
            self.stop("shutdown requested")
        elif self._parent_pid is not None and os.getppid() != self._parent_pid:
            self.stop(f"the process that started it ({self._parent_pid}) exited")

    def _book_tick(self, now: float) -> None:
        """The next tick: in _TICK_SECONDS while the core holds work; otherwise in _IDLE_TICK_SECONDS, or at the next
        status if sooner."""
        idle = not self.core.holds_work()
        if idle:
            delay = max(_MIN_TICK_SECONDS, min(_IDLE_TICK_SECONDS, self._next_status - now))
        else:
            delay = _TICK_SECONDS
        if self._ticker is not None:
            self._ticker.cancel()
        assert self._loop is not None  # set by run()
        self._ticker = self._loop.call_later(delay, self._tick)
        self._ticker_idle = idle

    def _publish_status(self) -> None:
        try:
            self.monitor.send(self.core.encode_status(self.status()), zmq.NOBLOCK)
        except zmq.Again:
            pass

    def _own_usage(self) -> Tuple[float, int]:
        """The scheduler's CPU % and RSS; the last ones read when psutil cannot read /proc (out of descriptors: a
        scheduler at its open-files limit must still publish its status), said once until a read succeeds again."""
        try:
            with self._process.oneshot():
                self._usage = (self._process.cpu_percent(), self._process.memory_info().rss)
            self._usage_failed = False
        except (OSError, psutil.Error) as error:
            if not self._usage_failed:
                self._usage_failed = True
                logger.warning("Scheduler: cannot read its own CPU and memory (%s); the status repeats the last", error)
        return self._usage

    def status(self) -> SchedulerStatus:
        """The status but for the workers' rows, which the core keeps encoded (SchedulerCore.encode_status)."""
        core = self.core
        cpu, rss = self._own_usage()
        task_states = [Counter(name=name, value=count) for name, count in zip(STATE_NAMES, core.state_counts)]
        task_states += [Counter(name=name, value=count) for name, count in zip(FINISHED_NAMES, core.finished_counts)]
        demand = core.demand(time.monotonic())
        relayed = self.relay.counters() if self.relay is not None else (0, 0)
        return SchedulerStatus(
            time_us=int(time.time() * 1_000_000),
            cpu=cpu,
            rss=rss,
            task_states=task_states,
            sent=_counters(core.sent_counts),
            received=_counters(core.received_counts),
            function_tasks=[
                Counter(name=core.function_names.get(function_id, function_id.hex()[:12]), value=count)
                for function_id, count in core.function_tasks.items()
            ],
            clients=len(core.clients),
            malformed=core.malformed,
            completed_tasks=sum(core.finished_counts),
            tasks_waiting=demand.tasks_waiting,
            tasks_ready=demand.tasks_ready,
            tasks_assigned=demand.tasks_assigned,
            tasks_running=demand.tasks_running,
            worker_count=demand.workers,
            idle_workers=demand.idle_workers,
            worker_slots=demand.worker_slots,
            free_slots=demand.free_slots,
            oldest_ready_wait_us=int(demand.oldest_ready_wait * 1_000_000),
            registered_again=core.registered_again,
            tasks_needing_resources=demand.tasks_needing_resources,
            retried_tasks=core.retried_tasks,
            workers_lost=core.workers_lost,
            workers_replaced=core.workers_replaced,
            relayed_fetches=relayed[0],
            relayed_bytes=relayed[1],
            actors=core.actor_statuses(),
        )


def _counters(counts: list) -> list:
    return [Counter(name=MESSAGE_TYPES[which].__name__, value=n) for which, n in enumerate(counts) if n]


def new_event_loop(name: str) -> asyncio.AbstractEventLoop:
    if name == "uvloop":
        try:
            import uvloop
        except ImportError as error:
            raise ValueError("--event-loop uvloop needs uvloop installed (CPython only): pip install uvloop") from error
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _warm_up_jit(loop: asyncio.AbstractEventLoop, shell: SchedulerShell, seconds: float) -> None:
    """Warm the JIT (warmup.py) before `shell` serves; a SIGINT or SIGTERM meanwhile ends it and then stops `shell`."""
    received: List[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, received.append, signum)
    logger.info("Scheduler: warming up the JIT for %.1f s before serving", seconds)
    try:
        report = loop.run_until_complete(warm_up(seconds, SchedulerShell, lambda: bool(received)))
    except Exception:  # only speed is at stake: serve anyway, and say why the first tasks may be slower
        logger.exception("Scheduler: the JIT warm-up failed; serving without it")
    else:
        logger.info(
            "Scheduler: JIT warm-up, %d synthetic tasks in %.2f s (--jit-warmup 0 skips it)",
            report.tasks,
            report.seconds,
        )
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    if received:
        shell._on_signal(received[0])  # before run(): it stops as soon as it runs


def run_scheduler(
    settings: SchedulerSettings,
    on_listening: Optional[Callable[[], None]] = None,
    parent_pid: Optional[int] = None,
) -> None:
    """Run a scheduler in this process until it is stopped by a signal or an unprotected client.shutdown().

    `on_listening` is called once both sockets are bound. With `parent_pid`, the scheduler also stops once that
    process is no longer its parent (it died)."""
    relay = _start_relay(settings)  # forked first: before any socket, thread or event loop of ours exists
    loop = new_event_loop(settings.event_loop)
    asyncio.set_event_loop(loop)
    logger.info("use event loop: %s", settings.event_loop)
    shell = SchedulerShell(settings, parent_pid)
    if relay is not None:
        shell.relay = relay
        shell.core.relay_port = relay.port
    if should_warm_up(settings.jit_warmup_seconds):  # bound first: a busy address fails at once, not after it
        _warm_up_jit(loop, shell, settings.jit_warmup_seconds)
    if on_listening is not None:
        on_listening()
    logger.info("Scheduler: monitor address is %s", settings.monitor_address)
    if settings.curve_keys is not None:
        logger.info(
            "Scheduler: CurveZMQ on, %d authorized public key(s), public key %s",
            len(settings.curve_keys.authorized_keys),
            settings.curve_keys.public_key.decode(),
        )
    elif not is_loopback(settings.address):
        logger.warning(
            "Scheduler: %s is reachable from other hosts without CurveZMQ: whoever can connect can run code on every"
            " worker. Use --curve-secret-key and --curve-authorized-keys on a shared network (see README, Security)",
            settings.address,
        )
    logger.info(
        "Scheduler: pid %d, protected=%s, heartbeat %ss, worker timeout %ss, client timeout %ss",
        os.getpid(),
        settings.protected,
        settings.heartbeat_interval_seconds,
        settings.worker_timeout_seconds,
        settings.client_timeout_seconds,
    )
    try:
        loop.run_until_complete(shell.run())
    finally:
        if relay is not None:
            relay.stop()
        loop.close()


def _start_relay(settings: SchedulerSettings) -> Optional[RelayProcess]:
    """The data relay beside this scheduler (--relay), unless the scheduler is on ipc:// (its peers share a host).
    With CurveZMQ it serves under the scheduler's keys and accepts the same peers."""
    host = relay_host(settings.address)
    if not settings.relay or host is None:
        return None
    avoid = tcp_ports(settings.address, settings.monitor_address)
    return RelayProcess(host, settings.max_frame_bytes, settings.curve_keys, avoid)
