"""What the packaged-binary tests share: run a built scheduler with a real cluster and client, then a built scaler_top.

The binaries come from packaging/nuitka/build.sh and packaging/pex/build.sh; the cluster and the client are the
project's own, from the test interpreter, so only the scheduler and scaler_top are the packaged ones under test.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from typing import Iterator, List, Optional, Tuple

import pytest

from scaler import Client
from scaler.testing.processes import ROOT, ScalerProcess, free_tcp_address

DIST = os.path.join(ROOT, "dist")
TASKS = 40
LISTENING = "Scheduler: listening on"
# A pex unpacks its wheels on first use and PyPy starts slowly: generous, but bounded, first-start deadline.
START_TIMEOUT_SECONDS = 60.0


def built(file_name: str, how: str) -> str:
    """The path of dist/FILE_NAME, or skip the test, naming the command that builds it."""
    path = os.path.join(DIST, file_name)
    if not os.path.isfile(path):
        pytest.skip(f"dist/{file_name} is not built; run {how} (or `tox -e binaries`)")
    return path


class CommandProcess(ScalerProcess):
    """A ScalerProcess running a whole command (a built binary) instead of `python -m MODULE`."""

    def __init__(self, command: List[str], log_path: str, cwd: str, env: Optional[dict] = None) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.popen = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        self.pid = self.popen.pid


def scheduler_arguments(address: str, monitor_address: str) -> List[str]:
    # A short status interval, so that scaler_top sees the finished tasks without waiting a whole second.
    return [address, "--monitor-address", monitor_address, "--status-interval", "0.2", "--logging-level", "DEBUG"]


def new_addresses(tmp_path) -> Tuple[str, str]:
    return free_tcp_address(), "ipc://{}".format(os.path.join(tmp_path, "monitor"))


@contextlib.contextmanager
def running_cluster(address: str, tmp_path) -> Iterator[ScalerProcess]:
    """`python -m scaler.cluster -n 2 ADDRESS`, stopped with its workers when the with block ends."""
    cluster = ScalerProcess("scaler.cluster", ["-n", "2", address], str(tmp_path / "cluster.log"))
    try:
        cluster.wait_for_output("Worker[1] started", START_TIMEOUT_SECONDS)
        yield cluster
    finally:
        cluster.stop()


def check_tasks_run_on_cluster(address: str, cluster: ScalerProcess) -> None:
    """Tasks go from a real Client through the scheduler under test to the cluster's workers and back."""
    with Client(address=address, timeout_seconds=30) as client:
        futures = [client.submit(pow, number, 2) for number in range(TASKS)]
        assert [future.result(timeout=60) for future in futures] == [number * number for number in range(TASKS)]
        worker_pid = client.submit(os.getpid).result(timeout=60)
    assert worker_pid in {process.pid for process in cluster.descendants()}


def top_once_arguments(monitor_address: str) -> List[str]:
    return [monitor_address, "--once", "--timeout", "20"]


def check_top_once(command: List[str], cwd: str, env: Optional[dict] = None) -> str:
    """`scaler_top ...top_once_arguments()` prints the status: both workers and at least the tasks the client ran."""
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_SECONDS,
        cwd=cwd,
        env={**(env or os.environ), "COLUMNS": "160"},
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "Total 2 worker(s)" in result.stdout, result.stdout
    success = re.search(r"\bsuccess\s+([\d,]+)", result.stdout)
    assert success is not None, result.stdout
    assert int(success.group(1).replace(",", "")) >= TASKS + 1, result.stdout
    return result.stdout
