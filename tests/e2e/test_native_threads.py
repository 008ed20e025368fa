"""`--native-threads`: task processes start their native libraries' thread pools with one thread by default (as Dask's
nanny and Ray's workers do), as many as asked, or as the libraries choose with 0; a worker's environment that sets one
of the variables is followed. Checked on real clusters, by the threads numpy's OpenBLAS starts in a task process."""

from __future__ import annotations

import os
import sys
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

from scaler import Client
from scaler.testing.processes import ScalerProcess
from scaler.worker.native_threads import THREAD_VARIABLES, describe_native_threads, native_thread_variables

WAIT = 30.0  # seconds any one step may take on a loaded 2-core machine
# OpenBLAS's own default: a thread per core this process may run on (workers inherit its affinity), at most the 64
# numpy's OpenBLAS is built for
CORES = min(len(os.sched_getaffinity(0)), 64)


def environment_and_blas_threads() -> Tuple[Dict[str, Optional[str]], int]:
    """In a task process that has not loaded numpy yet: the thread variables it sees, and how many threads loading
    numpy (its OpenBLAS) started."""
    assert "numpy" not in sys.modules, "a fresh task process"
    before = len(os.listdir("/proc/self/task"))
    import numpy

    numpy.ones((64, 64)) @ numpy.ones((64, 64))
    started = len(os.listdir("/proc/self/task")) - before
    return {name: os.environ.get(name) for name in THREAD_VARIABLES}, started


@pytest.fixture
def start_worker(scheduler, tmp_path, monkeypatch) -> Iterator:
    """start_worker(options, environment): one worker from `scaler_cluster OPTIONS`, with none of the thread variables
    in its environment but `environment`; its address."""
    pytest.importorskip("numpy")
    address, _ = scheduler
    started: List[ScalerProcess] = []

    def start(options: List[str], environment: Dict[str, str]) -> str:
        for name in THREAD_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        log = str(tmp_path / f"cluster-{len(started)}.log")
        process = ScalerProcess("scaler.cluster", ["-n", "1", *options, address], log)
        started.append(process)
        process.wait_for_output("Worker[0]: connected to", timeout=WAIT)
        return address

    try:
        yield start
    finally:
        for process in started:
            process.stop()


def run_probe(address: str) -> Tuple[Dict[str, Optional[str]], int]:
    with Client(address) as client:
        return client.submit(environment_and_blas_threads).result(timeout=WAIT)


def test_by_default_a_task_process_starts_one_native_thread(start_worker) -> None:
    environment, started = run_probe(start_worker([], {}))
    assert environment == {name: "1" for name in THREAD_VARIABLES}
    assert started == 0, "OpenBLAS ran on the task's own thread"


@pytest.mark.skipif(CORES < 2, reason="with one core, OpenBLAS starts no thread either way")
def test_zero_leaves_the_libraries_their_default(start_worker) -> None:
    environment, started = run_probe(start_worker(["--native-threads", "0"], {}))
    assert environment == {name: None for name in THREAD_VARIABLES}
    assert started == CORES - 1, "OpenBLAS's own default: a thread per core, the task's among them"


@pytest.mark.skipif(CORES < 2, reason="with one core, OpenBLAS starts no thread either way")
def test_a_number_of_threads(start_worker) -> None:
    environment, started = run_probe(start_worker(["--native-threads", "2"], {}))
    assert environment == {name: "2" for name in THREAD_VARIABLES}
    assert started == 1


@pytest.mark.skipif(CORES < 2, reason="with one core, OpenBLAS starts no thread either way")
def test_a_worker_environment_that_chose_is_followed(start_worker) -> None:
    # it names one of them: none is set, the user's choice stands (here, for OpenBLAS, its own default); an empty one
    # is no choice
    environment, started = run_probe(start_worker([], {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": ""}))
    expected = {name: None for name in THREAD_VARIABLES}
    expected.update(OMP_NUM_THREADS="4", MKL_NUM_THREADS="")
    assert environment == expected
    assert started == min(CORES, 4) - 1


def test_variables_and_log_lines() -> None:
    assert native_thread_variables(1, {}) == {name: "1" for name in THREAD_VARIABLES}
    assert native_thread_variables(0, {}) == {}
    assert native_thread_variables(3, {"MKL_NUM_THREADS": "2"}) == {}
    assert native_thread_variables(2, {"MKL_NUM_THREADS": ""}) == {name: "2" for name in THREAD_VARIABLES}
    assert "1 thread(s)" in describe_native_threads(1, native_thread_variables(1, {}), {})
    assert "--native-threads 0" in describe_native_threads(0, {}, {})
    assert "MKL_NUM_THREADS=2" in describe_native_threads(3, {}, {"MKL_NUM_THREADS": "2", "PATH": "/bin"})
