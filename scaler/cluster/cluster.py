"""`Cluster`: the Python API for starting workers, as the scheduler/cluster combo does."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import List, Optional, Sequence

import psutil

from scaler import config
from scaler.io.sockets import validate_address
from scaler.worker.settings import WorkerSettings


class Cluster:
    """N workers connected to the scheduler at `address`.

        Cluster(
            address: str,
            n_workers: int = config.DEFAULT_NUMBER_OF_WORKERS,
            heartbeat_interval_seconds: float = config.DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
            death_timeout_seconds: float = config.DEFAULT_DEATH_TIMEOUT_SECONDS,
            queue_size: int = config.DEFAULT_WORKER_QUEUE_SIZE,
            object_retention_seconds: float = config.DEFAULT_OBJECT_RETENTION_SECONDS,
            garbage_collect_interval_seconds: float = config.DEFAULT_GARBAGE_COLLECT_INTERVAL_SECONDS,
            logging_level: str = config.DEFAULT_LOGGING_LEVEL,
            logging_paths: Sequence[str] = config.DEFAULT_LOGGING_PATHS,
            curve_secret_key_file: Optional[str] = None,
            curve_server_key_file: Optional[str] = None,
        )
        start() -> None                       # returns at once; workers then connect on their own
        shutdown(timeout: float = config.DEFAULT_CLUSTER_SHUTDOWN_TIMEOUT_SECONDS) -> Optional[int]
        pids() -> List[int]                   # the launcher first, then every worker, fork server and processor
        is_alive() -> bool
        with Cluster(...) as cluster: ...     # start() and shutdown()

    The workers run under a launcher started as `python -m scaler.cluster --exit-with-parent ...`: a fresh
    interpreter rather than a fork of the caller, which may hold threads and ZeroMQ contexts (a Client, a scheduler)
    that a forked child must not inherit. The launcher stops its workers when this process exits, and its workers and
    their processors die with it, even if it is SIGKILLed.
    """

    def __init__(
        self,
        address: str,
        n_workers: int = config.DEFAULT_NUMBER_OF_WORKERS,
        heartbeat_interval_seconds: float = config.DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
        death_timeout_seconds: float = config.DEFAULT_DEATH_TIMEOUT_SECONDS,
        queue_size: int = config.DEFAULT_WORKER_QUEUE_SIZE,
        object_retention_seconds: float = config.DEFAULT_OBJECT_RETENTION_SECONDS,
        garbage_collect_interval_seconds: float = config.DEFAULT_GARBAGE_COLLECT_INTERVAL_SECONDS,
        logging_level: str = config.DEFAULT_LOGGING_LEVEL,
        logging_paths: Sequence[str] = config.DEFAULT_LOGGING_PATHS,
        curve_secret_key_file: Optional[str] = None,
        curve_server_key_file: Optional[str] = None,
    ) -> None:
        if not isinstance(n_workers, int) or n_workers < 1:
            raise ValueError(f"n_workers must be an int >= 1, got {n_workers!r}")
        self._n_workers = n_workers
        self._settings = WorkerSettings(  # validates every value now, not in the launcher
            address=validate_address(address),
            heartbeat_interval_seconds=heartbeat_interval_seconds,
            death_timeout_seconds=death_timeout_seconds,
            queue_size=queue_size,
            object_retention_seconds=object_retention_seconds,
            garbage_collect_interval_seconds=garbage_collect_interval_seconds,
            logging_level=logging_level,
            logging_paths=tuple(logging_paths),
            curve_secret_key_file=curve_secret_key_file,
            curve_server_key_file=curve_server_key_file,
        )
        self._launcher: Optional[subprocess.Popen] = None

    def start(self) -> None:
        if self._launcher is not None:
            raise RuntimeError("this Cluster was already started")
        settings = self._settings
        command = [
            sys.executable,
            "-m",
            "scaler.cluster",
            "--num-workers",
            str(self._n_workers),
            "--heartbeat-interval",
            repr(settings.heartbeat_interval_seconds),
            "--death-timeout",
            repr(settings.death_timeout_seconds),
            "--queue-size",
            str(settings.queue_size),
            "--object-retention",
            repr(settings.object_retention_seconds),
            "--garbage-collect-interval",
            repr(settings.garbage_collect_interval_seconds),
            "--logging-level",
            settings.logging_level,
            "--logging-paths",
            *settings.logging_paths,
            *_curve_arguments(settings.curve_secret_key_file, settings.curve_server_key_file),
            "--exit-with-parent",
            "--",
            settings.address,
        ]
        self._launcher = subprocess.Popen(command, stdin=subprocess.DEVNULL)

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
        """Stop every worker: SIGTERM (each worker tells the scheduler it leaves), wait up to `timeout` seconds,
        then SIGKILL whatever is left of the tree. Returns the launcher's exit code (None if never started)."""
        launcher = self._launcher
        if launcher is None:
            return None
        tree = _processes(self.pids())
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGTERM)
            try:
                launcher.wait(timeout)
            except subprocess.TimeoutExpired:
                launcher.kill()  # its workers and their processors get SIGKILL from the kernel (PDEATHSIG)
                launcher.wait()
        stragglers = _wait_exited(tree, timeout)
        for process in stragglers:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        _wait_exited(stragglers, timeout)
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


def _curve_arguments(secret_key_file: Optional[str], server_key_file: Optional[str]) -> List[str]:
    if secret_key_file is None:
        return []
    return ["--curve-secret-key", secret_key_file, "--curve-server-key", str(server_key_file)]


def _wait_exited(processes: List[psutil.Process], timeout: float) -> List[psutil.Process]:
    """Wait until every process has exited; returns those still running after `timeout` seconds.

    A zombie has exited: grandchildren re-parented to an init that reaps lazily (as in many containers) would otherwise
    make psutil.wait_procs wait for the reaping, not for the exit."""
    deadline = time.monotonic() + timeout
    running = processes
    while True:
        running = [process for process in running if _still_running(process)]
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.01)


def _still_running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
