"""Cancel as concurrent.futures documents it, against real processes: right after submit, twice, after completion, of a
running task, of a graph, and of 10,000 tasks at once, after which nothing stays queued or running."""

from __future__ import annotations

import concurrent.futures
import os
import sys
import time
from typing import Iterator

import cloudpickle
import pytest

from scaler import Client
from scaler.testing.processes import all_exited, wait_for
from tests.e2e.live_cluster import LiveCluster, unfinished

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Iterator[LiveCluster]:
    cluster = LiveCluster(tmp_path_factory.mktemp("cancel"))
    cluster.add_worker()
    cluster.add_worker()
    cluster.wait_workers(2)
    yield cluster
    cluster.close()


@pytest.fixture
def client(live) -> Iterator[Client]:
    with Client(live.address) as client:
        yield client
    live.wait_idle()  # whatever a test canceled is gone from the scheduler too


def sleep_then(seconds: float, value: int) -> int:
    time.sleep(seconds)
    return value


def processor_pid(marker: str) -> int:
    with open(marker, "w") as file:
        file.write(str(os.getpid()))
    time.sleep(60)
    return os.getpid()


def fail(value: int) -> int:
    raise KeyError(value)


def add(a: int, b: int) -> int:
    return a + b


def test_cancel_right_after_submit_and_twice(client) -> None:
    future = client.submit(sleep_then, 5, 1)
    assert future.cancel() is True
    assert future.cancel() is True, "cancel() of a cancelled future is True, as concurrent.futures says"
    assert future.cancelled() and future.done()
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=5)
    assert concurrent.futures.wait([future], timeout=5).done == {future}


def test_cancel_after_completion_keeps_the_result(client) -> None:
    future = client.submit(sleep_then, 0, 42)
    assert future.result(timeout=20) == 42
    assert future.cancel() is False
    assert not future.cancelled() and future.result() == 42


def test_cancel_of_a_running_task_stops_it_and_frees_its_worker(client, tmp_path) -> None:
    marker = tmp_path / "running"
    future = client.submit(processor_pid, str(marker))
    wait_for(lambda: marker.exists() and marker.read_text(), 20, "the task to start")
    pid = int(marker.read_text())
    assert future.cancel() is True
    wait_for(lambda: all_exited([pid]), 10, "kill")
    assert [f.result(timeout=20) for f in [client.submit(sleep_then, 0, n) for n in range(4)]] == [0, 1, 2, 3]


def test_cancel_of_a_graph_cancels_every_node(client) -> None:
    graph = {"a": (sleep_then, 30, 1), "b": (sleep_then, 0, 2), "c": (add, "a", "b"), "d": (add, "c", "b")}
    futures = client.submit_graph(graph, keys=["c", "d"])
    assert [future.cancel() for future in futures] == [True, True]
    for future in futures:
        with pytest.raises(concurrent.futures.CancelledError):
            future.result(timeout=5)


def test_a_failing_graph_node_makes_every_dependent_key_raise_the_same_exception(client) -> None:
    graph = {"x": 1, "bad": (fail, "x"), "y": (add, "bad", "x"), "z": (add, "y", "x"), "ok": (add, "x", "x")}
    futures = dict(zip(["y", "z", "ok"], client.submit_graph(graph, keys=["y", "z", "ok"])))
    assert futures["ok"].result(timeout=20) == 2
    errors = [futures[key].exception(timeout=20) for key in ("y", "z")]
    assert all(type(error) is KeyError and error.args == (1,) for error in errors)
    with pytest.raises(KeyError):
        client.get(graph, keys=["z"])


def test_cancel_ten_thousand_tasks_at_once_leaves_nothing_queued(client, live) -> None:
    futures = [client.submit(sleep_then, 0.001, n) for n in range(10_000)]
    outcomes = [future.cancel() for future in futures]
    assert all(future.done() for future in futures)
    assert sum(outcomes) == sum(future.cancelled() for future in futures)
    for n, future in enumerate(futures):
        if not future.cancelled():  # finished before its cancel: keeps its real result
            assert future.result() == n
    # the scheduler holds nothing, and the workers' own heartbeats (a moment later) say they hold nothing either
    live.status(lambda status: unfinished(status) == 0 and all(w.queued == 0 for w in status.workers), timeout=30)
    assert client.submit(sleep_then, 0, 7).result(timeout=20) == 7
