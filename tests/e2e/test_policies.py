"""Task policies end to end (a scheduler and one worker from their CLIs, real processes): timeouts stop the task and
replace its processor, retries run a failing function exactly as often as asked, a one-worker cluster runs queued
tasks in priority order, and options hold for graphs and for tasks submitted from tasks."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Iterator, List

import cloudpickle
import pytest

from scaler import Client
from scaler.errors import TaskTimeoutError
from scaler.testing.processes import wait_for
from tests.e2e.live_cluster import LiveCluster, unfinished

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WAIT = 60  # seconds any result may take on a loaded machine; the tests take far less when all is well


def attempt(counter: str, succeed_at: int) -> int:
    """Counts its calls in a file; raises until the call number `succeed_at`, which returns that number."""
    count = int(Path(counter).read_text()) + 1 if os.path.exists(counter) else 1
    Path(counter).write_text(str(count))
    if count < succeed_at:
        raise ValueError(f"attempt {count} fails")
    return count


def slow_first_time(counter: str, seconds: float) -> int:
    """Sleeps `seconds` on its first call (to be timed out), returns its call number at once afterwards."""
    count = int(Path(counter).read_text()) + 1 if os.path.exists(counter) else 1
    Path(counter).write_text(str(count))
    if count == 1:
        time.sleep(seconds)
    return count


def wait_for_file(started: str, path: str, seconds: float) -> int:
    """Says it started (creates `started`), then blocks its worker until `path` exists (or `seconds` passed)."""
    Path(started).touch()
    deadline = time.monotonic() + seconds
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()


def record(log: str, label: str) -> str:
    with open(log, "a") as file:
        file.write(label + "\n")
    return label


def child_times_out(client: Client) -> str:
    """Submits from a task, through the view it was given: the child's timeout holds there too."""
    try:
        client.submit(time.sleep, 30).result()
    except TaskTimeoutError as error:
        return type(error).__name__ + ": " + str(error)
    return "no timeout"


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Iterator[LiveCluster]:
    cluster = LiveCluster(tmp_path_factory.mktemp("policies"))
    try:
        cluster.add_worker()
        cluster.wait_workers(1)
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def client(live: LiveCluster) -> Iterator[Client]:
    with Client(live.address, timeout_seconds=30) as connected:
        yield connected
    live.wait_idle()


def test_a_timeout_stops_the_task_replaces_its_processor_and_the_worker_goes_on(client: Client) -> None:
    pid_before = client.submit(os.getpid).result(WAIT)
    started = time.monotonic()
    future = client.options(timeout_seconds=0.5).submit(time.sleep, 30)
    with pytest.raises(TaskTimeoutError, match="ran longer than its timeout of 0.5 s") as raised:
        future.result(WAIT)
    assert isinstance(raised.value, TimeoutError)
    assert time.monotonic() - started < 20, "stopped long before the 30 s sleep would end"
    pid_after = client.submit(os.getpid).result(WAIT)
    assert pid_after != pid_before, "the processor that ran it was replaced"
    assert client.options(timeout_seconds=5).submit(pow, 2, 10).result(WAIT) == 1024, "a task in time succeeds"


def test_retries_run_a_failing_function_exactly_as_often_as_asked(client: Client, tmp_path: Path) -> None:
    counter = str(tmp_path / "succeeds_third_time")
    future = client.options(retries=2).submit(attempt, counter, 3, profiling=True)
    assert future.result(WAIT) == 3 and Path(counter).read_text() == "3"
    assert future.profiling_info().attempts == 3

    counter = str(tmp_path / "never_enough")
    with pytest.raises(ValueError, match="attempt 2 fails") as raised:
        client.options(retries=1).submit(attempt, counter, 5).result(WAIT)
    assert Path(counter).read_text() == "2", "one try and one retry, no more"
    assert raised.value.__notes__ == ["Scaler: failed on attempt 2 of 2 (retries=1)"]

    counter = str(tmp_path / "no_retries")
    with pytest.raises(ValueError, match="attempt 1 fails") as raised:
        client.submit(attempt, counter, 2).result(WAIT)
    assert Path(counter).read_text() == "1" and not getattr(raised.value, "__notes__", None)


def test_a_timed_out_attempt_is_retried_with_a_new_timeout(client: Client, tmp_path: Path) -> None:
    counter = str(tmp_path / "slow_once")
    future = client.options(retries=1, timeout_seconds=0.5, profiling=True).submit(slow_first_time, counter, 30)
    assert future.result(WAIT) == 2 and future.profiling_info().attempts == 2


def test_one_worker_runs_queued_tasks_in_priority_order(live: LiveCluster, client: Client, tmp_path: Path) -> None:
    started, release, log = str(tmp_path / "started"), str(tmp_path / "release"), str(tmp_path / "order")
    blocker = client.submit(wait_for_file, started, release, WAIT)
    wait_for(lambda: os.path.exists(started), WAIT, "the blocking task runs")  # the others queue behind it
    low = [client.submit(record, log, f"low{index}") for index in range(3)]
    high_view = client.options(priority=5)
    high = [high_view.submit(record, log, f"high{index}") for index in range(3)]
    middle = client.options(priority=2).submit(record, log, "middle")
    live.status(lambda status: unfinished(status) == 8, WAIT)  # every task reached the scheduler
    Path(release).touch()
    blocker.result(WAIT)
    for future in [*low, *high, middle]:
        future.result(WAIT)
    order: List[str] = Path(log).read_text().split()
    assert order == ["high0", "high1", "high2", "middle", "low0", "low1", "low2"]


def test_graph_nodes_carry_the_options_of_their_call(client: Client, tmp_path: Path) -> None:
    counter = str(tmp_path / "graph_node")
    graph = {"a": (attempt, counter, 2), "b": (pow, "a", 3)}
    assert client.options(retries=1).get(graph, ["b"]) == {"b": 8}
    assert Path(counter).read_text() == "2", "the node failed once, and was retried"
    with pytest.raises(TaskTimeoutError):
        client.options(timeout_seconds=0.5).get({"s": (time.sleep, 30), "t": (str, "s")}, ["t"])
    (future,) = client.options(timeout_seconds=0.5).submit_graph({"s": (time.sleep, 30)}, ["s"])
    assert isinstance(future.exception(WAIT), TaskTimeoutError)


def test_a_view_given_to_a_task_applies_its_options_to_the_tasks_it_submits(client: Client) -> None:
    answer = client.submit(child_times_out, client.options(timeout_seconds=0.5)).result(WAIT)
    assert answer.startswith("TaskTimeoutError: ") and "0.5 s" in answer
