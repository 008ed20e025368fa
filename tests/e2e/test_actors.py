"""Actors on real clusters: state kept between calls, order per caller, handles in tasks, loss and freeing."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Tuple

import psutil
import pytest

from scaler import ActorLostError, Client
from scaler.testing.processes import wait_for
from tests.e2e.live_cluster import LiveCluster

pytestmark = pytest.mark.timeout(120)


class Counter:
    def __init__(self, start: int = 0) -> None:
        self.value = start
        self.seen: Dict[str, List[int]] = {}

    def add(self, amount: int = 1, caller: str = "", number: int = 0) -> int:
        self.value += amount
        if caller:
            self.seen.setdefault(caller, []).append(number)
        return self.value

    def get(self) -> int:
        return self.value

    def order(self) -> Dict[str, List[int]]:
        return self.seen

    def pid(self) -> int:
        return os.getpid()

    def fail(self) -> None:
        raise ValueError("asked to fail")

    def big(self, size: int) -> bytes:
        return b"x" * size


class Broken:
    def __init__(self) -> None:
        raise RuntimeError("cannot start")

    def ping(self) -> str:
        return "pong"


def call_through(handle, amount: int) -> int:
    """A task calling an actor through a handle it received (borrowed)."""
    return handle.add(amount).result()


def call_after_go(handle, called: str, go: str) -> Tuple[int, str]:
    """A task holding a borrowed handle: calls the actor, says so in the file `called`, waits (bounded) for the file
    `go`, then calls again. Returns the first call's result and what the second raised."""
    first = handle.add(1).result(timeout=30)
    Path(called).write_text("called")
    deadline = time.monotonic() + 60
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{go} never appeared")
        time.sleep(0.05)
    try:
        return first, f"not lost: {handle.add(1).result(timeout=30)}"
    except ActorLostError as error:
        return first, str(error)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    cluster = LiveCluster(tmp_path_factory.mktemp("actors"))
    try:
        cluster.add_cluster(2)
        cluster.wait_workers(2)
        yield cluster
    finally:
        cluster.close()


def test_an_actor_keeps_its_state_and_each_threads_order(live):
    with Client(live.address) as client:
        counter = client.actor(Counter, 10)
        assert counter.created.result(timeout=30) is None
        errors: List[BaseException] = []

        def caller(name: str) -> None:
            try:
                futures = [counter.add(1, name, number) for number in range(250)]
                assert [future.result(timeout=60) for future in futures][-1] >= 10 + 250
            except BaseException as error:  # reported by the test thread
                errors.append(error)

        threads = [threading.Thread(target=caller, args=(f"t{index}",)) for index in range(4)]
        # Threads switching often race between taking a call's task id and queueing the call: were the ids not
        # queued in order, a worker would take one for a call that already ran (ActorAnswerLostError).
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(90)
        finally:
            sys.setswitchinterval(interval)
        assert not errors, errors
        assert counter.get().result(timeout=30) == 10 + 4 * 250
        order = counter.order().result(timeout=30)
        assert sorted(order) == ["t0", "t1", "t2", "t3"]
        assert all(numbers == list(range(250)) for numbers in order.values())


def test_a_method_that_raises_fails_its_call_and_the_actor_lives_on(live):
    with Client(live.address) as client:
        counter = client.actor(Counter)
        with pytest.raises(ValueError, match="asked to fail"):
            counter.fail().result(timeout=30)
        assert counter.add(2).result(timeout=30) == 2
        assert len(counter.big(1 << 20).result(timeout=30)) == 1 << 20  # a large result, held by the worker


def test_the_actor_runs_in_a_process_of_its_own(live):
    with Client(live.address) as client:
        counter = client.actor(Counter)
        actor_pid = counter.pid().result(timeout=30)
        assert client.submit(os.getpid).result(timeout=30) != actor_pid
        assert counter.pid().result(timeout=30) == actor_pid


def test_a_handle_passed_to_tasks_calls_the_same_actor(live):
    with Client(live.address) as client:
        counter = client.actor(Counter)
        results = client.map(call_through, [(counter, 5)] * 6)
        assert sorted(results) == [5, 10, 15, 20, 25, 30]
        assert counter.get().result(timeout=30) == 30
        # the borrowed handles did not free it when their tasks ended
        assert counter.add(1).result(timeout=30) == 31


def test_a_borrowed_handle_does_not_keep_the_actor_alive(live, tmp_path):
    called, go = tmp_path / "called", tmp_path / "go"
    with Client(live.address) as client:
        counter = client.actor(Counter)
        pid = counter.pid().result(timeout=30)
        task = client.submit(call_after_go, counter, str(called), str(go))
        wait_for(called.exists, 30, "the task's first call through its borrowed handle")
        counter.close()  # the owner's handle: the actor goes although the task still holds one
        wait_for(lambda: not psutil.pid_exists(pid), 20, "the actor's process to end")
        live.status(lambda status: all(actor.actor_id != counter.actor_id for actor in status.actors), 20)
        go.write_text("go")
        first, later = task.result(timeout=60)
        assert first == 1
        assert later.startswith(f"actor {counter.actor_id.hex()} is gone") and "freed" in later, later


def test_a_constructor_that_raises_loses_the_actor(live):
    with Client(live.address) as client:
        broken = client.actor(Broken)
        with pytest.raises(RuntimeError, match="cannot start"):
            broken.created.result(timeout=30)
        with pytest.raises(ActorLostError, match="constructor raised"):
            broken.ping().result(timeout=30)


def test_bad_calls_raise_at_once(live):
    with Client(live.address) as client:
        with pytest.raises(TypeError):
            client.actor(Counter, 1, 2, 3)
        with pytest.raises(ValueError, match="timeout"):
            client.options(timeout_seconds=5).actor(Counter)
        counter = client.actor(Counter)
        with pytest.raises(AttributeError, match="no method 'missing'"):
            counter.missing()
        counter.close()
        with pytest.raises(ActorLostError, match="closed"):
            counter.add(1)


def test_closing_and_leaving_free_the_actor(live):
    with Client(live.address) as client:
        counter = client.actor(Counter)
        pid = counter.pid().result(timeout=30)
        counter.close()
        wait_for(lambda: not psutil.pid_exists(pid), 20, "the closed actor's process to end")
    client = Client(live.address)
    counter = client.actor(Counter)
    pid = counter.pid().result(timeout=30)
    client.disconnect()
    wait_for(lambda: not psutil.pid_exists(pid), 20, "the actor of a client that left to end")
    live.status(lambda status: not status.actors, 20)


def test_a_collected_handle_frees_the_actor(live):
    with Client(live.address) as client:
        pid = client.actor(Counter).pid().result(timeout=30)  # the handle is garbage at once
        wait_for(lambda: not psutil.pid_exists(pid), 20, "the collected actor's process to end")


def test_the_monitor_lists_actors(live):
    with Client(live.address) as client:
        counter = client.actor(Counter)
        counter.add(1).result(timeout=30)
        status = live.status(lambda status: any(actor.calls >= 1 for actor in status.actors), 20)
        (row,) = [actor for actor in status.actors if actor.actor_id == counter.actor_id]
        assert row.name == "Counter" and row.worker
        assert sum(worker.actors for worker in status.workers) >= 1


def test_a_worker_killed_loses_its_actor(tmp_path):
    cluster = LiveCluster(tmp_path)
    try:
        cluster.add_worker()
        cluster.wait_workers(1)
        with Client(cluster.address) as client:
            counter = client.actor(Counter)
            assert counter.add(1).result(timeout=30) == 1
            slow = [counter.add(1) for _ in range(3)]
            cluster.kill_worker()
            with pytest.raises(ActorLostError, match="removed"):
                counter.add(1).result(timeout=30)
            for future in slow:  # answered before the kill, or lost with it: never run again
                try:
                    assert future.result(timeout=30) in (2, 3, 4)
                except ActorLostError:
                    pass
            cluster.add_worker()
            cluster.wait_workers(1)
            with pytest.raises(ActorLostError):  # never created again behind the handle's back
                counter.get().result(timeout=30)
    finally:
        cluster.close()


class Hog:
    def __init__(self) -> None:
        self.kept: List[bytearray] = []

    def eat(self, megabytes: int) -> int:
        self.kept.append(bytearray(megabytes * 1_000_000))  # written: resident, not just reserved
        time.sleep(5)  # held while the worker samples it
        return len(self.kept)


def test_an_actor_past_the_memory_limit_is_lost_and_the_worker_goes_on(tmp_path):
    cluster = LiveCluster(tmp_path)
    try:
        cluster.add_cluster(1, "--memory-limit", "400MB")
        cluster.wait_workers(1)
        with Client(cluster.address) as client:
            hog = client.actor(Hog)
            assert hog.eat(10).result(timeout=30) == 1
            with pytest.raises(ActorLostError, match="memory"):
                hog.eat(600).result(timeout=60)
            with pytest.raises(ActorLostError):
                hog.eat(1).result(timeout=30)
            assert client.submit(sum, [1, 2]).result(timeout=30) == 3  # the worker goes on
            assert client.actor(Counter).add(1).result(timeout=30) == 1  # and hosts a new actor
    finally:
        cluster.close()
