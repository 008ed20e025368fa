"""The engines bench/data/transfer.py compares: how each one's cluster starts, whose RSS is the scheduler's, how a
worker that missed its heartbeats shows, and how its client process is run.

- Scaler (this checkout): bench.localcluster.LocalCluster, `scaler_cluster -n WORKERS`, the scheduler on PyPy when
  that environment exists. A worker that went silent: the scheduler's log line "worker ... removed (no heartbeat".
- Dask distributed: a LocalCluster of WORKERS processes x 1 thread, whose scheduler runs in this process (as
  LocalCluster always does); the client runs in a process of its own, so this process's RSS is the scheduler's.
  Such a client gathers results through the scheduler unless told otherwise: "dask-direct" is the same cluster with
  a client that fetches them from the workers (direct_to_workers=True). Workers lost: the scheduler's
  "remove-worker" events (whatever the cause: its heartbeat timeout is 5 minutes).
- The seeds' engine, scaler 1.9.9 from PyPI: its `scaler_scheduler` and `scaler_cluster -n WORKERS` from a virtual
  environment of its own (made here on first use), since its package is also named `scaler`. Workers lost: its
  scheduler's log line "worker ... disconnected" (it logs nothing else when a worker times out).

Every process started here is stopped with its whole tree (the seeds' processes, in sessions of their own, with
their process groups).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import psutil

from bench.localcluster import CPYTHON, ROOT, LocalCluster, RssSampler, environment_kept, interpreter_label
from scaler.testing.processes import free_tcp_address, still_running, stop_process_group, wait_exited, wait_for

SEED_VERSION = "1.9.9"
SEED_PACKAGES = [f"scaler=={SEED_VERSION}", "numpy"]  # numpy: the workloads with arrays
CLIENT_SIDE = ROOT / "bench" / "data" / "client_side.py"
START_TIMEOUT = 120.0  # seconds for a cluster to have every worker connected, on a loaded machine


class Cluster:
    """A running cluster of one engine: its address and its scheduler's RSS sampler; what it tells of itself."""

    def __init__(self, address: str, rss: RssSampler) -> None:
        self.address = address
        self.rss = rss

    def workers_lost(self) -> int:
        """Workers the scheduler has removed so far for missing their heartbeats."""
        return 0

    def stalls(self) -> int:
        """The scheduler's warnings that its loop did not run for a while (Scaler's "did not run for")."""
        return 0

    def problem(self) -> Optional[str]:
        """Why the cluster cannot finish the trial (a process of it exited), or None."""
        return None

    def logs(self) -> Dict[str, str]:
        """Its processes' logs so far, by file name."""
        return {}


def _exited(processes: Dict[str, psutil.Process]) -> Optional[str]:
    """Which of `processes` (psutil handles: a reused pid does not fool them) is no longer running, if one."""
    for name, process in processes.items():
        if not still_running(process):
            return f"its {name} (pid {process.pid}) exited"
    return None


class Engine:
    name = ""
    label = ""  # for the table's header: version, interpreter
    skip_reason: Optional[str] = None  # why it cannot run here; None: available

    def unsupported(self, workload: str) -> Optional[str]:
        """Why this engine cannot run `workload`, or None."""
        return None

    def cluster(self, workers: int) -> contextlib.AbstractContextManager[Cluster]:
        raise NotImplementedError

    def client_command(self, arguments: List[str], workdir: str) -> Dict[str, Any]:
        """Popen keywords that run client_side.py with `arguments`."""
        return {"args": [CPYTHON, "-m", "bench.data.client_side", *arguments], "cwd": str(ROOT)}


class ScalerEngine(Engine):
    name = "scaler"

    def __init__(self, scheduler_python: str) -> None:
        import scaler

        self.scheduler_python = scheduler_python
        self.label = f"Scaler {scaler.__version__} (this checkout), scheduler on {interpreter_label(scheduler_python)}"

    @contextlib.contextmanager
    def cluster(self, workers: int) -> Iterator[Cluster]:
        # INFO: the line saying a worker was removed for want of heartbeats is an INFO line
        with LocalCluster(self.scheduler_python, workers, scheduler_args=["--logging-level", "INFO"]) as cluster:
            assert cluster.rss is not None
            yield _ScalerCluster(cluster)


class _ScalerCluster(Cluster):
    def __init__(self, cluster: LocalCluster) -> None:
        assert cluster.rss is not None
        super().__init__(cluster.address, cluster.rss)
        self._cluster = cluster
        # the launcher restarts a worker that dies; the scheduler and the launcher must stay
        self._processes = {
            "scheduler": psutil.Process(cluster.scheduler_pid),
            "scaler_cluster": psutil.Process(cluster.cluster_pid),
        }

    def workers_lost(self) -> int:
        return self._cluster.scheduler_log().count("removed (no heartbeat")

    def stalls(self) -> int:
        return self._cluster.scheduler_log().count("the scheduler did not run for")

    def problem(self) -> Optional[str]:
        return _exited(self._processes)

    def logs(self) -> Dict[str, str]:
        return self._cluster.logs()


class DaskEngine(Engine):
    def __init__(self, direct: bool = False) -> None:
        self.name = "dask-direct" if direct else "dask"
        how = ", its client gathering from the workers (direct_to_workers=True)" if direct else ""
        try:
            import distributed
        except ImportError as error:
            self.skip_reason = f"not installed ({error}): pip install 'scaler[bench]'"
            self.label = "Dask distributed" + how
            return
        self.label = f"Dask distributed {distributed.__version__}{how}"

    @contextlib.contextmanager
    def cluster(self, workers: int) -> Iterator[Cluster]:
        import logging

        import distributed

        with (
            environment_kept(),
            tempfile.TemporaryDirectory(prefix="d-") as scratch,
            distributed.LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                local_directory=scratch,  # not /tmp/dask-scratch-space, which would outlive the run
                silence_logs=logging.CRITICAL,  # teardown races log tracebacks, not failures
            ) as cluster,
        ):
            cluster.wait_for_workers(workers, timeout=START_TIMEOUT)
            rss = RssSampler(os.getpid())
            try:
                yield _DaskCluster(cluster, rss)
            finally:
                rss.stop()


class _DaskCluster(Cluster):
    def __init__(self, cluster: Any, rss: RssSampler) -> None:
        super().__init__(cluster.scheduler_address, rss)
        self._cluster = cluster

    def workers_lost(self) -> int:
        scheduler = self._cluster.scheduler

        async def removed() -> int:  # on the scheduler's loop: its event deques change only there
            actions = [event.get("action") for _, event in scheduler.get_events("all") if isinstance(event, dict)]
            return actions.count("remove-worker")

        count: int = self._cluster.sync(removed)
        return count


class SeedEngine(Engine):
    name = "seed"

    def __init__(self, venv: Path, python: str) -> None:
        self.venv = venv
        self.python = str(venv / "bin" / "python")
        self.label = f"scaler {SEED_VERSION} from PyPI (the seeds' engine)"
        self.skip_reason = ensure_seed_venv(venv, python)
        if self.skip_reason is None:
            self.label += f", on {interpreter_label(self.python)}"

    def unsupported(self, workload: str) -> Optional[str]:
        if workload == "matmul":
            return "its client.get takes only graphs of (function, key, ...) tuples, not a dask collection's"
        return None

    @contextlib.contextmanager
    def cluster(self, workers: int) -> Iterator[Cluster]:
        # short: its workers' ipc sockets go in it, and a socket's path is at most 107 bytes
        with tempfile.TemporaryDirectory(prefix="s-") as workdir:
            address = free_tcp_address()
            bin_dir = self.venv / "bin"
            scheduler_log = os.path.join(workdir, "scheduler.log")
            command = [str(bin_dir / "scaler_scheduler"), "--logging-level", "INFO"]
            command += ["--monitor-address", f"ipc://{workdir}/monitor", address]
            processes: List[subprocess.Popen] = []
            try:
                scheduler = _start(command, scheduler_log, workdir)
                processes.append(scheduler)
                cluster_command = [str(bin_dir / "scaler_cluster"), "-n", str(workers), address]
                processes.append(_start(cluster_command, os.path.join(workdir, "cluster.log"), workdir))

                def log() -> str:
                    return Path(scheduler_log).read_text(errors="replace")

                def connected() -> bool:
                    for process in processes:
                        if process.poll() is not None:
                            raise RuntimeError(f"the seeds' engine: pid {process.pid} exited early:\n{log()}")
                    return len(re.findall(r"worker b'.*' connected", log())) >= workers

                wait_for(connected, START_TIMEOUT, f"{workers} workers of the seeds' engine connected")
                rss = RssSampler(scheduler.pid)
                try:
                    yield _SeedCluster(address, rss, workdir, processes)
                finally:
                    rss.stop()
            finally:
                for process in reversed(processes):
                    stop_process_group(process)

    def client_command(self, arguments: List[str], workdir: str) -> Dict[str, Any]:
        # by path, from elsewhere than the repository: `import scaler` must find 1.9.9, not this checkout
        return {"args": [self.python, str(CLIENT_SIDE), *arguments], "cwd": workdir, "env": seed_env(workdir)}


class _SeedCluster(Cluster):
    def __init__(self, address: str, rss: RssSampler, workdir: str, processes: List[subprocess.Popen]) -> None:
        super().__init__(address, rss)
        self._workdir = Path(workdir)
        names = ("scaler_scheduler", "scaler_cluster")
        self._processes = {name: psutil.Process(process.pid) for name, process in zip(names, processes)}

    def workers_lost(self) -> int:
        return len(re.findall(r"worker b'.*' disconnected", self.logs()["scheduler.log"]))

    def problem(self) -> Optional[str]:
        return _exited(self._processes)

    def logs(self) -> Dict[str, str]:
        return {path.name: path.read_text(errors="replace") for path in sorted(self._workdir.glob("*.log"))}


def seed_env(workdir: str) -> Dict[str, str]:
    """The environment of the seeds' processes: nothing that points into this checkout; their temporary files (its
    workers' ipc sockets) in `workdir`, removed with it."""
    env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "PYTHONHOME")}
    env["TMPDIR"] = workdir
    env["PWD"] = workdir  # as the shell would set it (capnp warns when it does not match the directory)
    return env


def _start(command: List[str], log_path: str, workdir: str) -> subprocess.Popen:
    """A process of the seeds' engine, in `workdir` and a session of its own, its output to `log_path`."""
    with open(log_path, "wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=seed_env(workdir), start_new_session=True
        )


def ensure_seed_venv(venv: Path, python: str) -> Optional[str]:
    """Make `venv` with scaler 1.9.9 in it unless it is there; None when it is, else why it cannot be."""
    interpreter = venv / "bin" / "python"
    check = [str(interpreter), "-c", f"import scaler, numpy; assert scaler.__version__ == {SEED_VERSION!r}"]

    def ready() -> bool:
        # from the filesystem's root: from here, `import scaler` would find this checkout
        return interpreter.exists() and subprocess.run(check, cwd="/", capture_output=True).returncode == 0

    if ready():
        return None
    print(f"making {venv} with scaler {SEED_VERSION} (the seeds' engine), once", flush=True)
    steps = [] if interpreter.exists() else [[python, "-m", "venv", str(venv)]]
    # a wheel only: 1.9.9's sdist builds C++ (its object storage server), which is not what we measure
    steps.append([str(interpreter), "-m", "pip", "install", "-q", "--only-binary=:all:", *SEED_PACKAGES])
    for step in steps:
        try:
            done = subprocess.run(step, cwd="/", capture_output=True, text=True)
        except OSError as error:
            return f"cannot make {venv}: {error}"
        if done.returncode != 0:
            lines = [line for line in (done.stderr or done.stdout).splitlines() if not line.startswith("WARNING:")]
            return f"cannot make {venv} ({' '.join(step[:4])} ...): {' '.join(lines[-2:])}"
    return None if ready() else f"{venv} has no working scaler {SEED_VERSION}"


def stop_children() -> None:
    """Whatever this process started and is still running (a LocalCluster's worker that outlived close()), ended."""
    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.terminate()
    for child in wait_exited(children, 10):
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


def engines(names: List[str], scheduler_python: str, seed_venv: Path, seed_python: str) -> List[Engine]:
    made: List[Engine] = []
    for name in names:
        if name == "scaler":
            made.append(ScalerEngine(scheduler_python))
        elif name in ("dask", "dask-direct"):
            made.append(DaskEngine(direct=name == "dask-direct"))
        elif name == "seed":
            made.append(SeedEngine(seed_venv, seed_python))
        else:
            sys.exit(f"unknown engine {name!r}")
    return made
