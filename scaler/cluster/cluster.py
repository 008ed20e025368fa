"""Internal: `Cluster`, the Python API for starting workers, public as `from scaler import Cluster`."""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
import sys
import time
from typing import Any, List, Optional

import psutil

from scaler import config
from scaler.io.sockets import check_resolvable, validate_address
from scaler.settings_spec import CLUSTER, WORKER
from scaler.worker.settings import WorkerSettings


class Cluster:
    """N workers connected to the scheduler at `address`.

        Cluster(address, n_workers=4, **settings)  # every worker setting of scaler.config as a keyword
        start() -> None                       # returns at once (with a preload, once it ran); workers then connect
        shutdown(timeout: float = config.DEFAULT_CLUSTER_SHUTDOWN_TIMEOUT_SECONDS) -> Optional[int]
        pids() -> List[int]                   # the launcher first, then every worker, fork server and processor
        is_alive() -> bool
        with Cluster(...) as cluster: ...     # start() and shutdown()

    The keywords are the options of `scaler_cluster` (the docs list them; `inspect.signature(Cluster)` lists them
    with their defaults), e.g. per_worker_queue_size, heartbeat_interval_seconds, death_timeout_seconds; each is
    checked here, before any process starts.

    The workers run under a launcher started as `python -m scaler.cluster --exit-with-parent ...`: a fresh
    interpreter rather than a fork of the caller, which may hold threads and ZeroMQ contexts (a Client, a scheduler)
    that a forked child must not inherit. The launcher stops its workers when this process exits, and its workers and
    their processors die with it, even if it is SIGKILLed.

    With `preload`, start() returns once every worker's first task process ran it, and raises RuntimeError, with the
    cluster stopped, if it failed (its traceback is in the cluster's log, on this process's stdout by default).
    """

    def __init__(self, address: str, n_workers: int = config.N_WORKERS.default, **settings: Any) -> None:
        self._n_workers = config.N_WORKERS.validate(n_workers, CLUSTER)
        settings = config.SETTINGS.rename_old_keywords(settings, "Cluster")
        self._settings = WorkerSettings(check_resolvable(validate_address(address)), **settings)
        self._launcher: Optional[subprocess.Popen] = None

    @property
    def settings(self) -> WorkerSettings:
        return self._settings

    def start(self) -> None:
        if self._launcher is not None:
            raise RuntimeError("this Cluster was already started")
        command = [
            sys.executable, "-m", "scaler.cluster",
            *config.N_WORKERS.to_argv(self._n_workers),
            *config.SETTINGS.to_argv(self._settings.as_keywords(), WORKER),
            "--exit-with-parent",
            "--", self._settings.address,
        ]  # fmt: skip
        if self._settings.preload is None:
            self._launcher = subprocess.Popen(command, stdin=subprocess.DEVNULL)
            return
        read_end, write_end = os.pipe()
        command[-2:-2] = ["--ready-fd", str(write_end)]
        try:
            self._launcher = subprocess.Popen(command, stdin=subprocess.DEVNULL, pass_fds=(write_end,))
        finally:
            os.close(write_end)
        try:
            answer = os.read(read_end, 64)  # "ready", or nothing once the launcher is gone
        finally:
            os.close(read_end)
        if answer.startswith(b"ready"):
            return
        from scaler.worker.core import EXIT_PRELOAD_FAILED  # here: the worker's modules are the launcher's business

        try:  # the launcher closes the pipe as it leaves: a signal now would only race its exit
            self._launcher.wait(config.DEFAULT_CLUSTER_SHUTDOWN_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        code = self.shutdown()
        if code == EXIT_PRELOAD_FAILED:
            raise RuntimeError(
                f"the workers could not start: the preload {self._settings.preload} failed in their first task"
                " process; its traceback is in the cluster's log above"
            )
        raise RuntimeError(f"the workers could not start: the cluster exited with code {code}; its log above says why")

    def is_alive(self) -> bool:
        return self._launcher is not None and self._launcher.poll() is None

    def pids(self) -> List[int]:
        if self._launcher is None:
            return []
        try:
            children = psutil.Process(self._launcher.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        return [self._launcher.pid, *(child.pid for child in children)]

    def shutdown(self, timeout: float = config.DEFAULT_CLUSTER_SHUTDOWN_TIMEOUT_SECONDS) -> Optional[int]:
        """Stop every worker at once: SIGINT (each worker tells the scheduler it leaves; its tasks run elsewhere),
        wait up to `timeout` seconds, then SIGKILL whatever is left of the tree. Returns the launcher's exit code (None
        if never started). To let running tasks finish first, send the launcher SIGTERM (`pids()[0]`): it retires its
        workers, as `scaler_cluster` does."""
        launcher = self._launcher
        if launcher is None:
            return None
        tree = _processes(self.pids())
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
            try:
                launcher.wait(timeout)
            except subprocess.TimeoutExpired:
                launcher.kill()  # its workers and their processors get SIGKILL from the kernel (PDEATHSIG)
                launcher.wait()
        stragglers = wait_exited(tree, timeout)
        for process in stragglers:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        wait_exited(stragglers, timeout)
        return launcher.returncode

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()


def _processes(pids: List[int]) -> List[psutil.Process]:
    processes = []
    for pid in pids:
        try:
            processes.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    return processes


def wait_exited(processes: List[psutil.Process], timeout: float) -> List[psutil.Process]:
    """Wait until every process has exited; returns those still running after `timeout` seconds.

    A zombie has exited: grandchildren re-parented to an init that reaps lazily (as in many containers) would otherwise
    make psutil.wait_procs wait for the reaping, not for the exit."""
    deadline = time.monotonic() + timeout
    running = processes
    while True:
        running = [process for process in running if still_running(process)]
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.01)


def still_running(process: psutil.Process) -> bool:
    """Whether the process has not exited yet: a zombie has (see wait_exited), and so has one whose pid now names
    another process."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


Cluster.__signature__ = config.SETTINGS.signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter("address", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("n_workers", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=config.N_WORKERS.default),
    ],
    [WORKER],
)
