"""Nested tasks with real processes: parents waiting on children never deadlock, even when they fill every worker."""

from __future__ import annotations

import concurrent.futures
import operator
import os
import sys
import time
from typing import Iterator

import cloudpickle
import pytest

from scaler import Client
from scaler.testing.processes import all_exited, wait_for
from tests.e2e.live_cluster import LiveCluster
from tests.e2e.monitor import counters

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def fibonacci(client: Client, n: int) -> int:
    if n <= 1:
        return n
    a = client.submit(fibonacci, client, n - 1)
    b = client.submit(fibonacci, client, n - 2)
    return a.result() + b.result()


def fan_out_and_wait(client: Client, width: int) -> int:
    """Waits with concurrent.futures.wait rather than result(): it must park its processor just the same."""
    futures = [client.submit(pow, n, 2) for n in range(width)]
    done, _ = concurrent.futures.wait(futures)
    return sum(future.result() for future in done)


def parent_of_sleepers(client: Client, marker: str) -> None:
    futures = [client.submit(time.sleep, 60) for _ in range(2)]
    with open(marker, "w") as file:
        file.write(str(os.getpid()))
    for future in futures:
        future.result()


@pytest.fixture
def live(tmp_path) -> Iterator[LiveCluster]:
    cluster = LiveCluster(tmp_path)
    yield cluster
    cluster.close()


def test_fibonacci_15_with_two_workers_finishes(live) -> None:
    live.add_worker()
    live.add_worker()
    live.wait_workers(2)
    with Client(live.address) as client:
        assert client.submit(fibonacci, client, 15).result(timeout=90) == 610
    live.wait_idle()


def test_nested_tasks_on_a_single_worker_and_waiting_with_concurrent_futures(live) -> None:
    live.add_worker()
    live.wait_workers(1)
    with Client(live.address) as client:
        assert client.submit(fibonacci, client, 7).result(timeout=60) == 13
        assert client.submit(fan_out_and_wait, client, 10).result(timeout=60) == sum(n * n for n in range(10))


def fire_and_forget(client: Client, marker: str) -> None:
    """Submits a child it does not wait for: the child is canceled when this task ends (its client says goodbye)."""
    client.submit(time.sleep, 60)
    with open(marker, "w") as file:
        file.write("submitted")


def test_clients_opened_in_tasks_say_goodbye_when_their_tasks_end(live) -> None:
    """fibonacci(6) opens a client in each of its 12 tasks that submit: each says goodbye as its task ends, not
    dropped without one when its processor goes (a spare is killed), then held by the scheduler for --client-timeout
    (30 s here)."""
    live.add_worker()
    live.wait_workers(1)
    with Client(live.address) as client:
        assert client.submit(fibonacci, client, 6).result(timeout=60) == 8
        status = live.status(lambda status: status.clients == 1, timeout=10)  # only this one is left
        received = counters(status.received)
        # every client that said Hello but this one said goodbye: 1 worker, 1 client here, 12 in tasks
        assert received["Hello"] == 14 and received["ClientDisconnect"] == 12, received


def test_a_client_a_function_holds_connects_again_in_each_task(live) -> None:
    """A function closing over a client is unpickled once per processor, its client with it: each task that uses it
    gets a connection of its own, the last one having ended with its task."""
    live.add_worker()
    live.wait_workers(1)
    with Client(live.address) as client:

        def negate_remotely(n: int) -> int:
            return client.submit(operator.neg, n).result()

        assert client.map(negate_remotely, [(n,) for n in range(6)]) == [-n for n in range(6)]
        assert live.status(lambda status: status.clients == 1, timeout=10)


def test_a_child_a_task_did_not_wait_for_is_canceled_when_the_task_ends(live, tmp_path) -> None:
    live.add_worker()
    live.wait_workers(1)
    marker = tmp_path / "submitted"
    with Client(live.address) as client:
        client.submit(fire_and_forget, client, str(marker)).result(timeout=60)
        assert marker.read_text() == "submitted"
        status = live.wait_idle(timeout=10)  # its child canceled with its client, not left sleeping for 60 s
        assert status.clients == 1 and counters(status.task_states).get("canceled", 0) >= 1, status


def test_canceling_a_parent_cancels_its_children(live, tmp_path) -> None:
    live.add_worker()
    live.wait_workers(1)
    marker = tmp_path / "parent"
    with Client(live.address) as client:
        parent = client.submit(parent_of_sleepers, client, str(marker))
        wait_for(lambda: marker.exists() and marker.read_text(), 20, "the parent to submit its children")
        pid = int(marker.read_text())
        assert parent.cancel()
        live.wait_idle()  # children canceled too: nothing stays running or queued
    wait_for(lambda: all_exited([pid]), 10, "kill")
