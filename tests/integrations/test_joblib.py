"""The "scaler" joblib backend with real joblib on a real cluster (scikit-learn's GridSearchCV is
examples/joblib_grid_search.py, run by tests/e2e/test_examples.py)."""

from __future__ import annotations

import os
import time

import joblib
import pytest

import scaler.joblib  # noqa: F401 - registers the backend
from scaler import Client
from tests.e2e.monitor import counters, wait_for_status
from tests.integrations.conftest import SharedCluster


def square(value: int) -> int:
    return value * value


def fail_on(value: int, bad: int) -> int:
    if value == bad:
        raise ArithmeticError(f"failed on {value}")
    return value


def inner_pids(count: int) -> set:
    """A task that runs a Parallel call itself: where do its calls run?"""
    return set(joblib.Parallel(n_jobs=4)(joblib.delayed(os.getpid)() for _ in range(count))) | {os.getpid()}


def tasks_received(cluster: SharedCluster, after_us: int) -> int:
    """How many Task messages the scheduler had received, by a status published after `after_us`."""
    status = wait_for_status(cluster.monitor_address, lambda s: s.time_us > after_us)
    return counters(status.received).get("Task", 0)


def test_the_backend_is_registered_under_its_name() -> None:
    assert joblib.parallel.BACKENDS["scaler"] is scaler.joblib.ScalerBackend


def test_many_small_calls_are_batched_into_few_tasks(shared_cluster: SharedCluster) -> None:
    before = tasks_received(shared_cluster, int(time.time() * 1e6))
    calls = 5000
    with joblib.parallel_config(backend="scaler", address=shared_cluster.address):
        results = joblib.Parallel(n_jobs=-1)(joblib.delayed(square)(n) for n in range(calls))
    assert results == [n * n for n in range(calls)]
    tasks = tasks_received(shared_cluster, int(time.time() * 1e6)) - before
    assert 0 < tasks < calls / 20, tasks  # auto-batching: far fewer tasks than calls (56 when measured)


def test_an_existing_client_is_used_and_left_connected(client: Client) -> None:
    with joblib.parallel_config(backend="scaler", client=client):
        assert joblib.Parallel()(joblib.delayed(square)(n) for n in range(10)) == [n * n for n in range(10)]
        generator = joblib.Parallel(n_jobs=4, return_as="generator")(joblib.delayed(square)(n) for n in range(6))
        assert list(generator) == [0, 1, 4, 9, 16, 25]
    assert client.submit(square, 12).result(30) == 144


def test_a_failing_call_raises_its_exception_and_stops_the_rest(client: Client) -> None:
    with joblib.parallel_config(backend="scaler", client=client):
        with pytest.raises(ArithmeticError, match="failed on 7"):
            joblib.Parallel(n_jobs=2)(joblib.delayed(fail_on)(n, 7) for n in range(200))
        assert joblib.Parallel(n_jobs=2)(joblib.delayed(square)(n) for n in range(3)) == [0, 1, 4]  # usable after


def test_parallel_calls_inside_a_task_run_in_its_process(client: Client) -> None:
    with joblib.parallel_config(backend="scaler", client=client):
        (pids,) = joblib.Parallel(n_jobs=2)([joblib.delayed(inner_pids)(8)])  # n_jobs=1 would run it here
    assert len(pids) == 1 and os.getpid() not in pids  # sequential, in the worker's process


def test_address_or_client_is_required_and_n_workers_checked() -> None:
    with pytest.raises(ValueError, match="needs address= .* or client="):
        with joblib.parallel_config(backend="scaler"):
            pass
    with pytest.raises(ValueError, match="n_workers must be a positive int"):
        with joblib.parallel_config(backend="scaler", address="tcp://127.0.0.1:1", n_workers=0):
            pass
    backend = scaler.joblib.ScalerBackend(address="tcp://127.0.0.1:1", n_workers=48)  # connects only when used
    assert backend.effective_n_jobs(-1) == 48 and backend.effective_n_jobs(3) == 3
