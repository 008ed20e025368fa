"""A local Scaler cluster for benchmarks: scheduler under a chosen interpreter, workers on CPython, real processes.

Readiness is polled (the scheduler's "listening" log line, then SchedulerStatus on the monitor socket showing every
worker connected), never slept for. The scheduler's RSS is sampled in a thread so the peak is known. Every process
started here is stopped with its whole tree on exit.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

import psutil
import zmq

from scaler.protocol import SchedulerStatus, decode_frame
from scaler.testing.processes import ScalerProcess, free_tcp_address, wait_for

ROOT = Path(__file__).resolve().parents[1]

CPYTHON = sys.executable  # the client's interpreter: workers run on it too
# tox sets SCALER_PYPY to the PyPy environment it builds; by hand, the one scripts/test.sh builds
PYPY = os.environ.get("SCALER_PYPY") or str(ROOT / ".venv-pypy" / "bin" / "python")
_ROLE_BY_DEPTH = {0: "cluster launcher", 1: "worker agents", 2: "processor fork servers", 3: "processors"}


@contextlib.contextmanager
def environment_kept() -> Iterator[None]:
    """os.environ as it was before the block, once it ends: for settings meant only for what the block starts.
    Dask's LocalCluster, for one, writes its workers' settings into this process's environment
    (MALLOC_TRIM_THRESHOLD_=65536, one BLAS thread), where every cluster a benchmark starts afterwards, of any engine,
    would inherit them: with that trim threshold Scaler's task processes return freed heap to the kernel at once and
    fault it in again (the chains workload ran a third slower)."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def interpreter_label(python: str) -> str:
    """'PyPy 3.9.18' or 'CPython 3.11.2', asked of the interpreter itself."""
    import subprocess

    return subprocess.run(
        [python, "-c", "import platform; print(platform.python_implementation(), platform.python_version())"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


class RssSampler:
    """Samples one process's RSS every `interval` seconds in a daemon thread; `peak` is the largest seen."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self._process = psutil.Process(pid)
        self._interval = interval
        self._stop = threading.Event()
        self.peak = 0
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def current(self) -> int:
        rss = self._process.memory_info().rss
        self.peak = max(self.peak, rss)
        return rss

    def reset_peak(self) -> None:
        self.peak = self.current()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.current()
            except psutil.NoSuchProcess:
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class LocalCluster:
    """`with LocalCluster(scheduler_python, workers=2) as cluster:` then Client(cluster.address)."""

    def __init__(
        self,
        scheduler_python: str,
        workers: int = 2,
        worker_python: str = CPYTHON,
        event_loop: str = "builtin",
        scheduler_args: Sequence[str] = (),
    ) -> None:
        self.scheduler_python = scheduler_python
        self.scheduler_args = list(scheduler_args)  # more options of scaler_scheduler, e.g. ["--jit-warmup", "0"]
        self.workers = workers
        self.worker_python = worker_python
        self.event_loop = event_loop
        self.address = free_tcp_address()
        self._tmp = tempfile.TemporaryDirectory(prefix="scaler-bench-")
        self.monitor_address = "ipc://" + os.path.join(self._tmp.name, "monitor")
        self._processes: List[ScalerProcess] = []
        self.rss: Optional[RssSampler] = None

    def __enter__(self) -> LocalCluster:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def scheduler_pid(self) -> int:
        return self._processes[0].pid

    @property
    def cluster_pid(self) -> int:
        """The `scaler_cluster` launcher's pid (its children are the worker agents)."""
        return self._processes[1].pid

    def scheduler_log(self) -> str:
        """What the scheduler has logged so far."""
        return self._processes[0].output()

    def logs(self) -> Dict[str, str]:
        """What each process of the cluster has logged so far, by log file name (scheduler.log, cluster.log)."""
        return {os.path.basename(process.log_path): process.output() for process in self._processes}

    def roles(self) -> Dict[str, List[psutil.Process]]:
        """The processes of this cluster and of its client (the calling process) by role; a worker's processes are told
        apart by their depth under the launcher."""
        roles: Dict[str, List[psutil.Process]] = {
            "client": [psutil.Process()],
            "scheduler": [psutil.Process(self.scheduler_pid)],
        }
        pending = [(psutil.Process(self.cluster_pid), 0)]
        while pending:
            process, depth = pending.pop()
            roles.setdefault(_ROLE_BY_DEPTH.get(depth, "other"), []).append(process)
            pending.extend((child, depth + 1) for child in process.children())
        return roles

    def _start(self) -> None:
        scheduler = self.start_process(
            "scaler.scheduler",
            [self.address, "--monitor-address", self.monitor_address, "--no-protected", "--event-loop", self.event_loop]
            + ["--logging-level", "WARNING", "--logging-paths", "/dev/stdout", *self.scheduler_args],
            "scheduler",
            self.scheduler_python,
        )
        # the listening line is INFO; with WARNING logging we wait for the monitor socket instead
        self.wait_for_status(lambda s: True, timeout=60.0, what="the scheduler's first status")
        self.rss = RssSampler(scheduler.pid)
        if self.workers:
            self.start_process("scaler.cluster", ["-n", str(self.workers), self.address], "cluster", self.worker_python)
            self.wait_for_workers(self.workers)

    def start_process(self, module: str, args: List[str], name: str, python: str = CPYTHON) -> ScalerProcess:
        """`python -m module args...` (cwd: the repository), stopped with the cluster."""
        process = ScalerProcess(module, args, os.path.join(self._tmp.name, f"{name}.log"), python=python)
        self._processes.append(process)
        return process

    def wait_for_workers(self, count: int) -> None:
        self.wait_for_status(lambda s: len(s.workers) >= count, timeout=60.0, what=f"{count} workers connected")

    def wait_for_status(self, condition: Any, timeout: float, what: str) -> SchedulerStatus:
        """Subscribe to the monitor socket until a SchedulerStatus satisfies `condition`."""
        context = zmq.Context.instance()
        socket = context.socket(zmq.SUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        socket.connect(self.monitor_address)
        found: List[SchedulerStatus] = []

        def seen() -> bool:
            for process in self._processes:
                if process.popen.poll() is not None:
                    raise RuntimeError(f"pid {process.pid} exited early:\n{process.output()}")
            while socket.poll(0):
                for message in decode_frame(socket.recv()):
                    if isinstance(message, SchedulerStatus) and condition(message):
                        found.append(message)
            return bool(found)

        try:
            wait_for(seen, timeout, what)
        finally:
            socket.close()
        return found[-1]

    def close(self) -> None:
        if self.rss is not None:
            self.rss.stop()
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        self._tmp.cleanup()


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def median(values: List[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def timed(function: Any, *args: Any) -> tuple:
    start = time.perf_counter()
    value = function(*args)
    return time.perf_counter() - start, value
