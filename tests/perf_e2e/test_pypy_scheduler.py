"""A scheduler on PyPy serving CPython workers and a CPython client: the deployment the design card promises.

The scheduler's interpreter is $SCALER_SCHEDULER_PYTHON (tox's e2e-pypy sets it to its own PyPy and runs this suite on
CPython), else the .venv-pypy that scripts/test.sh builds. Without either the tests skip; but when
SCALER_SCHEDULER_PYTHON is given, it must work.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Iterator

import pytest

from scaler import Client
from scaler.testing.processes import ROOT, ScalerProcess, free_tcp_address

pytestmark = pytest.mark.timeout(90)

_REQUESTED = os.environ.get("SCALER_SCHEDULER_PYTHON")
SCHEDULER_PYTHON = _REQUESTED or os.path.join(ROOT, ".venv-pypy", "bin", "python")


def require_scheduler_python() -> None:
    """Skips the test without a PyPy environment, unless SCALER_SCHEDULER_PYTHON asked for one: then it fails."""
    if not os.path.exists(SCHEDULER_PYTHON):
        if _REQUESTED:
            pytest.fail(f"SCALER_SCHEDULER_PYTHON={_REQUESTED} does not exist")
        pytest.skip(f"no PyPy environment at {SCHEDULER_PYTHON} (bash scripts/test.sh builds it)")


def square(value: int) -> int:
    return value * value


def add(left: int, right: int) -> int:
    return left + right


def fail(message: str) -> None:
    raise KeyError(message)


@pytest.fixture(scope="module")
def address(tmp_path_factory) -> Iterator[str]:
    require_scheduler_python()
    logs = tmp_path_factory.mktemp("pypy-scheduler")
    address = free_tcp_address()
    monitor = "ipc://{}".format(logs / "monitor")
    scheduler = ScalerProcess(
        "scaler.scheduler", [address, "--monitor-address", monitor], str(logs / "scheduler.log"), SCHEDULER_PYTHON
    )
    cluster = None
    try:
        scheduler.wait_for_output("Scheduler: listening on", timeout=60)
        cluster = ScalerProcess("scaler.cluster", ["-n", "2", address], str(logs / "cluster.log"), sys.executable)
        cluster.wait_for_output("Worker[1] started", timeout=60)
        yield address
    finally:
        cluster_exit = cluster.stop() if cluster is not None else 0
        scheduler.stop()
    assert cluster_exit == 0, cluster.output()  # SIGTERM stops the workers cleanly


def test_the_scheduler_really_runs_on_pypy(address: str) -> None:
    implementation = subprocess.run(
        [SCHEDULER_PYTHON, "-c", "import platform; print(platform.python_implementation())"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert implementation == "PyPy"
    assert sys.implementation.name == "cpython"  # and the client (so the workers too) does not


def test_submit_map_and_graph_through_a_pypy_scheduler(address: str) -> None:
    with Client(address, timeout_seconds=30) as client:
        assert client.submit(square, 7).result(timeout=30) == 49
        assert client.map(square, [(i,) for i in range(2000)]) == [i * i for i in range(2000)]
        graph = {"a": 2, "b": (square, "a"), "c": (add, "a", "b")}
        assert client.get(graph, keys=["c"]) == {"c": 6}


def test_a_task_exception_reaches_the_client_through_pypy(address: str) -> None:
    with Client(address, timeout_seconds=30) as client:
        future = client.submit(fail, "from a worker")
        with pytest.raises(KeyError, match="from a worker"):
            future.result(timeout=30)
