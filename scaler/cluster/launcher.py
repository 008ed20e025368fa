"""The cluster process: forks N workers, supervises them, and takes them all down with it.

Forking is safe here because the launcher never creates a ZeroMQ context, and its only other thread, the log writer
(scaler.logs), holds no lock a child could inherit (the child starts with log queues of its own); each worker forks
its own processor fork server before it creates its context. The whole tree dies with the launcher, even on
SIGKILL: every child sets PR_SET_PDEATHSIG (see scaler.worker.lifetime), forks happen on the main thread, and each
level also checks its parent pid as a fallback.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import sys
import time
from typing import Dict, Optional

from scaler import config
from scaler.logs import flush_logs
from scaler.worker.agent import run_worker
from scaler.worker.lifetime import die_with_parent, parent_alive
from scaler.worker.settings import WorkerSettings
from scaler.worker.zygote import describe_wait_status


class ClusterProcess:
    def __init__(
        self,
        settings: WorkerSettings,
        n_workers: int,
        shutdown_timeout_seconds: float = config.DEFAULT_CLUSTER_SHUTDOWN_TIMEOUT_SECONDS,
        exit_with_parent: bool = False,
    ) -> None:
        if n_workers < 1:
            raise ValueError(f"n_workers must be >= 1, got {n_workers}")
        self._settings = settings
        self._n_workers = n_workers
        self._shutdown_timeout_seconds = shutdown_timeout_seconds
        self._parent_pid: Optional[int] = os.getppid() if exit_with_parent else None
        self._workers: Dict[int, int] = {}  # pid -> index
        self._exit_code = 0

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
        for index in range(self._n_workers):
            self._start_worker(index)
        return self._supervise()

    def _start_worker(self, index: int) -> None:
        sys.stdout.flush()  # or the child would print again whatever is still buffered here
        sys.stderr.flush()
        launcher_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            exit_code = 1
            try:
                signal.set_wakeup_fd(-1)
                os.close(self._wake_read)
                os.close(self._wake_write)
                for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
                    signal.signal(signum, signal.SIG_DFL)
                die_with_parent(launcher_pid)
                exit_code = run_worker(self._settings, f"Worker[{index}]", launcher_pid)
            except BaseException:  # noqa: B036 - a worker reports its crash, then leaves without the launcher's cleanup
                logging.exception("Worker[%d] crashed", index)
            finally:
                flush_logs()  # os._exit skips the flush at exit; bounded, should nobody read the output
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(exit_code)
        self._workers[pid] = index
        logging.info("Worker[%d] started", index)

    def _supervise(self) -> int:
        while self._workers:
            select.select([self._wake_read], [], [], config.DEFAULT_ORPHAN_CHECK_INTERVAL_SECONDS)
            signals = _drain(self._wake_read)
            self._reap()
            stop_signal = next((signum for signum in signals if signum in (signal.SIGTERM, signal.SIGINT)), None)
            if stop_signal is not None:
                logging.info("ClusterProcess: received %s, stopping workers", signal.Signals(stop_signal).name)
                self._stop_workers()
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
            index = self._workers.pop(pid, None)
            if index is None:
                continue
            code = os.waitstatus_to_exitcode(wait_status)
            logging.log(
                logging.INFO if code == 0 else logging.WARNING,
                "Worker[%d] exited with %s",
                index,
                describe_wait_status(wait_status),
            )
            if code != 0 and self._exit_code == 0:
                self._exit_code = code if code > 0 else 1

    def _stop_workers(self) -> None:
        for pid in self._workers:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + self._shutdown_timeout_seconds
        while self._workers and time.monotonic() < deadline:
            select.select([self._wake_read], [], [], min(0.1, max(0.0, deadline - time.monotonic())))
            _drain(self._wake_read)
            self._reap()
        for pid, index in list(self._workers.items()):
            logging.warning("Worker[%d] did not stop within %gs, killing it", index, self._shutdown_timeout_seconds)
            _signal(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            del self._workers[pid]


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
