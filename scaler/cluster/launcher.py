"""Internal: the cluster process: forks N workers, supervises them, and takes them all down with it.

Forking is safe here because the launcher never creates a ZeroMQ context, and its only other thread, the log writer
(scaler.logs), holds no lock a child could inherit (the child starts with log queues of its own); each worker forks
its own processor fork server before it creates its context. The whole tree dies with the launcher, even on
SIGKILL: every child sets PR_SET_PDEATHSIG (see scaler.worker.lifetime), forks happen on the main thread, and each
level also checks its parent pid as a fallback.

SIGTERM retires the workers (each asks the scheduler to take it out of the pool, see scaler/worker/core.py): the
launcher passes it on and waits for them up to their retirement deadline. A second SIGTERM, or SIGINT, stops them at
once (SIGINT to each); whatever is left after the shutdown timeout is killed.

The launcher also watches its workers' agents (watchdog.py): one whose loop has not turned for
--agent-stall-timeout is wedged; its stacks are logged, it is killed and a new worker starts in its place. While
stopping, an agent that has not turned its loop for a few seconds will not answer the signal: it is killed then, so
that a cluster stops within seconds even with a wedged worker. Workers that die on their own (killed by a signal,
crashed) are counted as lost, and not replaced: what killed one may kill the next.

With a preload (scaler/worker/preload.py), a worker registers only once its first task process ran it; one whose
preload failed exits with EXIT_PRELOAD_FAILED, and the launcher then stops the others and exits with that code: the
same preload would fail in every worker. `ready_fd`, if given (by `Cluster`), is told "ready" once every worker is
about to register, or closed without it if the cluster stops before.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import sys
import time
from typing import Callable, Dict, Optional

from scaler import config
from scaler.logs import flush_logs
from scaler.worker.agent import run_worker
from scaler.worker.core import EXIT_OK, EXIT_PRELOAD_FAILED, EXIT_REFUSED, EXIT_SCHEDULER_LOST
from scaler.worker.lifetime import die_with_parent, parent_alive
from scaler.worker.settings import WorkerSettings
from scaler.worker.watchdog import LoopTurns, StackPipe, Stall
from scaler.worker.zygote import describe_wait_status

# While stopping, a healthy agent turns its loop at once on the signal and then at least once a second: one that has
# not for this long will not stop on its own (the margin is for a loaded host, whose run queue may delay a process).
_STOPPING_STALL_SECONDS = 5.0
_STACKS_TIMEOUT_SECONDS = 2.0  # faulthandler answers in milliseconds; this bounds the wait for a dump that never comes
# The exit codes of a worker that decided to leave (scaler/worker/core.py); any other end of a worker the launcher
# did not ask for is a worker lost.
_CHOSEN_EXITS = (EXIT_OK, EXIT_SCHEDULER_LOST, EXIT_REFUSED)


class _Worker:
    """What the launcher knows of one worker process."""

    __slots__ = ("index", "stall", "stacks", "stopping")

    def __init__(self, index: int, stall: Stall, stacks: StackPipe) -> None:
        self.index = index
        self.stall = stall
        self.stacks = stacks
        self.stopping = False  # the launcher asked it to leave, or killed it: its end is no loss


class ClusterProcess:
    def __init__(
        self,
        settings: WorkerSettings,
        n_workers: int,
        shutdown_timeout_seconds: float = config.DEFAULT_CLUSTER_SHUTDOWN_TIMEOUT_SECONDS,
        exit_with_parent: bool = False,
        ready_fd: Optional[int] = None,
    ) -> None:
        if n_workers < 1:
            raise ValueError(f"n_workers must be >= 1, got {n_workers}")
        self._settings = settings
        self._n_workers = n_workers
        self._shutdown_timeout_seconds = shutdown_timeout_seconds
        self._parent_pid: Optional[int] = os.getppid() if exit_with_parent else None
        self._workers: Dict[int, _Worker] = {}  # by pid
        self._turns = LoopTurns(n_workers)
        self._exit_code = 0
        self._ready_fd = ready_fd
        self._ready_read = self._ready_write = -1  # a byte from each worker as it first connects, with ready_fd
        self._ready_workers = 0
        self._ended_workers = 0  # ready or not, none of these will say so any more
        self._preload_failed = False  # a worker could not run the preload at start
        self.lost = 0  # workers that died or wedged without being asked to leave
        self.replaced = 0  # workers started in place of wedged ones

    def run(self) -> int:
        """Start the workers and supervise them until a signal, the parent's death (with exit_with_parent) or the
        last worker's exit; returns the launcher's exit code."""
        self._wake_read, self._wake_write = os.pipe()
        for fd in (self._wake_read, self._wake_write):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self._wake_write, warn_on_full_buffer=False)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(signum, lambda number, frame: None)  # the wake-up pipe tells the loop which one came
        logging.info(
            "ClusterProcess: starting %d workers, heartbeat_interval_seconds=%g, object_retention_seconds=%g",
            self._n_workers,
            self._settings.heartbeat_interval_seconds,
            self._settings.object_retention_seconds,
        )
        if self._ready_fd is not None:
            self._ready_read, self._ready_write = os.pipe()
            os.set_blocking(self._ready_read, False)
        for index in range(self._n_workers):
            self._start_worker(index)
        try:
            return self._supervise()
        finally:
            self._close_ready()
            if self.lost:
                logging.warning("ClusterProcess: %s", self._losses())

    def _start_worker(self, index: int, replaces: str = "") -> int:
        sys.stdout.flush()  # or the child would print again whatever is still buffered here
        sys.stderr.flush()
        launcher_pid = os.getpid()
        stacks = StackPipe()
        pid = os.fork()
        if pid == 0:
            exit_code = 1
            try:
                signal.set_wakeup_fd(-1)
                os.close(self._wake_read)
                os.close(self._wake_write)
                for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
                    signal.signal(signum, signal.SIG_DFL)
                for other in self._workers.values():
                    other.stacks.close()
                stacks.in_child()
                die_with_parent(launcher_pid)
                exit_code = run_worker(
                    self._settings, f"Worker[{index}]", launcher_pid, self._turns.counter(index), replaces,
                    self._ready_callback(),
                )  # fmt: skip
            except BaseException:  # noqa: B036 - a worker reports its crash, then leaves without the launcher's cleanup
                logging.exception("Worker[%d] crashed", index)
            finally:
                flush_logs()  # os._exit skips the flush at exit; bounded, should nobody read the output
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(exit_code)
        stacks.in_parent()
        self._workers[pid] = _Worker(index, Stall(self._turns.read(index), time.monotonic()), stacks)
        logging.info("Worker[%d] started%s", index, f" (pid {pid}) in place of {replaces}" if replaces else "")
        return pid

    def _ready_callback(self) -> Optional[Callable[[], None]]:
        """In a worker, with ready_fd: what tells the launcher the worker is ready; the launcher's ends are closed."""
        if self._ready_fd is None or self._ready_write < 0:
            return None
        os.close(self._ready_fd)
        os.close(self._ready_read)
        write_end = self._ready_write

        def ready() -> None:
            os.write(write_end, b"r")

        return ready

    def _read_ready(self) -> None:
        self._ready_workers += len(_drain(self._ready_read))
        if self._ready_workers + self._ended_workers >= self._n_workers and self._ready_fd is not None:
            try:
                os.write(self._ready_fd, b"ready\n")
            except OSError:
                pass  # nobody waits for it any more
            self._close_ready()

    def _close_ready(self) -> None:
        for fd in (self._ready_fd, self._ready_read, self._ready_write):
            if fd is not None and fd >= 0:
                os.close(fd)
        self._ready_fd = None
        self._ready_read = self._ready_write = -1

    def _supervise(self) -> int:
        while self._workers:
            watched = [self._wake_read] + ([self._ready_read] if self._ready_read >= 0 else [])
            select.select(watched, [], [], config.DEFAULT_ORPHAN_CHECK_INTERVAL_SECONDS)
            signals = _drain(self._wake_read)
            self._reap()
            if self._ready_read >= 0 and not self._preload_failed:
                self._read_ready()
            if self._preload_failed:
                logging.error(
                    "ClusterProcess: the preload %s failed at start (the traceback is above): stopping the workers",
                    self._settings.preload,
                )
                self._stop_workers()
                return EXIT_PRELOAD_FAILED
            if not signals:
                self._end_stalled(self._settings.agent_stall_timeout_seconds, replace=True)
            if signal.SIGINT in signals:
                logging.info("ClusterProcess: received SIGINT, stopping workers")
                self._stop_workers()
                return 0
            if signal.SIGTERM in signals:
                self._retire_workers(repeated=signals.count(signal.SIGTERM) > 1)
                return 0
            if self._parent_pid is not None and not parent_alive(self._parent_pid):
                logging.error("ClusterProcess: parent %d is gone, stopping workers", self._parent_pid)
                self._stop_workers()
                return 1
        logging.info("ClusterProcess: all workers exited")
        return self._exit_code

    def _reap(self) -> None:
        while self._workers:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self._workers.clear()
                return
            if pid == 0:
                return
            worker = self._workers.pop(pid, None)
            if worker is None:
                continue
            worker.stacks.close()
            self._ended_workers += 1
            code = os.waitstatus_to_exitcode(wait_status)
            logging.log(
                logging.INFO if code == 0 else logging.WARNING,
                "Worker[%d] exited with %s",
                worker.index,
                describe_wait_status(wait_status),
            )
            if code == EXIT_PRELOAD_FAILED and not worker.stopping:
                self._preload_failed = True  # the cluster stops: not a loss
            elif not worker.stopping and code not in _CHOSEN_EXITS:
                self.lost += 1
                logging.warning("ClusterProcess: Worker[%d] lost: %s", worker.index, self._losses())
            if code != 0 and self._exit_code == 0:
                self._exit_code = code if code > 0 else 1

    def _end_stalled(self, timeout_seconds: float, replace: bool) -> None:
        """Kill the workers whose agent has not turned its loop for `timeout_seconds`, after logging their stacks;
        with `replace`, start another in the place of each."""
        now = time.monotonic()
        for pid, worker in list(self._workers.items()):
            seconds = worker.stall.seconds(self._turns.read(worker.index), now)
            if seconds < timeout_seconds:
                continue
            stacks = worker.stacks.stacks(pid, _STACKS_TIMEOUT_SECONDS).rstrip() or "(it wrote no stacks)"
            logging.error(
                "Worker[%d] (pid %d) is wedged: its agent has not turned its loop for %.1fs (--agent-stall-timeout"
                " %gs); killing it%s. Its stacks:\n%s",
                worker.index,
                pid,
                seconds,
                self._settings.agent_stall_timeout_seconds,
                " and starting another in its place" if replace else "",
                stacks,
            )
            worker.stopping = True
            _signal(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            del self._workers[pid]
            worker.stacks.close()
            self.lost += 1
            if replace:
                self.replaced += 1
                why = f"Worker[{worker.index}] pid {pid}: its agent stalled for {seconds:.1f}s"
                self._start_worker(worker.index, replaces=why)
            logging.warning("ClusterProcess: Worker[%d] lost: %s", worker.index, self._losses())

    def _losses(self) -> str:
        return f"{self.lost} worker(s) lost since start, {self.replaced} replaced"

    def _retire_workers(self, repeated: bool) -> None:
        """SIGTERM: every worker retires (finishes its running task, hands back its queue), within the deadline;
        another SIGTERM or a SIGINT meanwhile stops them at once."""
        if repeated:
            logging.info("ClusterProcess: received SIGTERM twice, stopping workers at once")
            self._stop_workers()
            return
        timeout = self._settings.retire_timeout_seconds
        logging.info(
            "ClusterProcess: received SIGTERM, retiring %d worker(s): running tasks have %gs to finish, queued ones go"
            " to other workers (SIGTERM again to stop them at once)", len(self._workers), timeout,
        )  # fmt: skip
        lost_before = self.lost
        for pid, worker in self._workers.items():
            worker.stopping = True
            _signal(pid, signal.SIGTERM)
        # the workers' own deadline is the scheduler's plus a grace; then they need a moment to leave
        deadline = time.monotonic() + timeout + config.DEFAULT_RETIRE_GRACE_SECONDS + self._shutdown_timeout_seconds
        if self._wait_for_workers(deadline, interrupt=True):
            logging.info("ClusterProcess: stopping the %d worker(s) still retiring at once", len(self._workers))
            self._stop_workers()
        elif self._workers:
            self._kill_left()
        elif self.lost == lost_before:
            logging.info("ClusterProcess: every worker retired")
        else:
            logging.info("ClusterProcess: the other workers retired")

    def _wait_for_workers(self, deadline: float, interrupt: bool) -> bool:
        """Reap workers until none is left or `deadline`; True if a SIGTERM or SIGINT came first (with `interrupt`)."""
        while self._workers and time.monotonic() < deadline:
            select.select([self._wake_read], [], [], min(0.1, max(0.0, deadline - time.monotonic())))
            signals = _drain(self._wake_read)
            self._reap()
            self._end_stalled(min(_STOPPING_STALL_SECONDS, self._settings.agent_stall_timeout_seconds), replace=False)
            if interrupt and self._workers and (signal.SIGTERM in signals or signal.SIGINT in signals):
                return True
        return False

    def _stop_workers(self) -> None:
        for pid, worker in self._workers.items():
            worker.stopping = True
            _signal(pid, signal.SIGINT)  # a worker leaves at once on SIGINT (SIGTERM would retire it)
        self._wait_for_workers(time.monotonic() + self._shutdown_timeout_seconds, interrupt=False)
        self._kill_left()

    def _kill_left(self) -> None:
        for pid, worker in list(self._workers.items()):
            logging.warning("Worker[%d] did not stop in time, killing it", worker.index)
            _signal(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            del self._workers[pid]
            worker.stacks.close()


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _drain(fd: int) -> bytes:
    received = b""
    try:
        while True:
            chunk = os.read(fd, 256)
            if not chunk:
                break
            received += chunk
    except BlockingIOError:
        pass
    return received
