"""Actors through scaler.compat.ray (`Cls.remote(...)`, `actor.method.remote(...)`, `ray.kill`) on a real cluster,
built on Scaler's native actors (`Client.actor`). Tasks that must stay unfinished wait on a file the test creates,
never on a guessed sleep; every wait is bounded."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

import scaler.compat.ray as ray
from scaler.compat.ray.exceptions import ActorDiedError, RayActorError, RayTaskError, TaskCancelledError
from tests.e2e import test_ray_compat
from tests.e2e.test_ray_compat import Overdrawn, gated, withdraw

cloudpickle.register_pickle_by_value(sys.modules[__name__])

gate = test_ray_compat.gate  # the fixture: a file path gated tasks wait for, created when the test ends

WAIT = 60
AT_ONCE = 5.0  # a .remote() that returned before its gated dependency (which waits for the test) returned at once


@ray.remote
class Counter:
    def __init__(self, start=0):
        self.value = start

    def increment(self, by=1):
        self.value += by
        return self.value

    def read(self):
        return self.value

    def fail(self):
        raise KeyError("no such entry")

    @ray.method(num_returns=1)
    def holdings(self, items):
        return [type(item).__name__ for item in items], [
            ray.get(i) if isinstance(i, ray.ObjectRef) else i for i in items
        ]


@ray.remote
class Log:
    """An actor whose state shows the order its calls ran in."""

    def __init__(self, *items):
        self.items = list(items)

    def add(self, item):
        self.items.append(item)
        return len(self.items)

    def value(self):
        return list(self.items)


@ray.remote
def double(x):
    return 2 * x


def test_actor_classes_refuse_direct_use() -> None:
    with pytest.raises(TypeError, match="remote"):
        Counter()


def test_nested_references_reach_methods_as_references_and_options_apply(ray_connected) -> None:
    counter = Counter.options(num_cpus=1).remote(ray.put(3))  # num_cpus=1 asks for nothing a worker lacks
    kinds, values = ray.get(counter.holdings.remote([ray.put(1), double.remote(1), 2]), timeout=WAIT)
    assert kinds == ["ObjectRef", "ObjectRef", "int"] and values == [1, 2, 2]
    assert ray.get(counter.read.remote(), timeout=WAIT) == 3


def test_an_actor_keeps_its_state_across_calls_in_order(ray_connected) -> None:
    counter = Counter.remote(10)
    refs = [counter.increment.remote() for _ in range(5)]
    assert ray.get(refs, timeout=WAIT) == [11, 12, 13, 14, 15]
    assert ray.get(counter.read.remote(), timeout=WAIT) == 15
    others = [Counter.remote() for _ in range(2)]
    assert ray.get([other.increment.remote() for other in others], timeout=WAIT) == [1, 1]


def test_actor_methods_take_references(ray_connected) -> None:
    counter = Counter.remote(start=ray.put(100))
    assert ray.get(counter.increment.remote(double.remote(5)), timeout=WAIT) == 110
    assert ray.get(counter.increment.remote(by=ray.put(1)), timeout=WAIT) == 111


def test_a_handle_passed_to_a_task_calls_the_same_actor(ray_connected) -> None:
    @ray.remote
    def increment_there(counter):
        return counter.increment.remote(5).future().result(WAIT)

    counter = Counter.remote(1)
    assert ray.get(increment_there.remote(counter), timeout=WAIT) == 6
    assert ray.get(counter.read.remote(), timeout=WAIT) == 6


def test_actor_method_errors_are_ray_task_errors(ray_connected) -> None:
    counter = Counter.remote()
    with pytest.raises(KeyError) as raised:
        ray.get(counter.fail.remote(), timeout=WAIT)
    assert isinstance(raised.value, RayTaskError)
    with pytest.raises(AttributeError):
        _ = counter.no_such_method
    with pytest.raises(TypeError, match="remote"):
        counter.read()


def test_a_killed_actor_raises_ray_actor_error(ray_connected) -> None:
    counter = Counter.remote()
    assert ray.get(counter.increment.remote(), timeout=WAIT) == 1
    ray.kill(counter)
    with pytest.raises(RayActorError):
        ray.get(counter.increment.remote(), timeout=WAIT)


def test_an_actor_whose_worker_dies_raises_ray_actor_error(ray_connected) -> None:
    counter = Counter.remote()
    assert ray.get(counter.increment.remote(), timeout=WAIT) == 1
    for agent in ray_connected.agents():
        ray_connected.kill_worker(agent)
    ray_connected.add_cluster(1)
    with pytest.raises(RayActorError):
        ray.get(counter.increment.remote(), timeout=WAIT)


# ---- calls whose references are unfinished: queued on the caller's side, in order ----------------------------------


def test_a_call_with_an_unfinished_reference_returns_at_once_and_keeps_its_place(ray_connected, gate: str) -> None:
    log = Log.remote()
    assert ray.get(log.value.remote(), timeout=WAIT) == []  # created: the calls below only wait for `slow`
    slow = gated.remote(gate, "slow")
    started = time.monotonic()
    first = log.add.remote(slow)
    second = log.add.remote("fast")  # ready, but made after a waiting call: waits behind it
    values = log.value.remote()
    assert time.monotonic() - started < AT_ONCE
    assert ray.wait([first, second, values], timeout=0.5) == ([], [first, second, values])
    as_future = first.future()

    async def awaited():
        return await second

    Path(gate).touch()
    assert ray.get(values, timeout=WAIT) == ["slow", "fast"]
    assert ray.get([first, second], timeout=WAIT) == [1, 2]
    assert as_future.result(WAIT) == 1
    assert asyncio.run(asyncio.wait_for(awaited(), WAIT)) == 2
    assert ray.get(log.add.remote(slow), timeout=WAIT) == 3  # a finished reference, an empty queue: sent at once


def test_a_failed_or_cancelled_reference_fails_only_its_call(ray_connected, gate: str) -> None:
    log = Log.remote()
    failing = withdraw.remote(gated.remote(gate, 5))
    cancelled = gated.remote(gate, "never")
    calls = [log.add.remote(failing), log.add.remote("after"), log.add.remote(cancelled), log.add.remote("last")]
    ray.cancel(cancelled)
    Path(gate).touch()
    with pytest.raises(Overdrawn) as raised:
        ray.get(calls[0], timeout=WAIT)
    assert isinstance(raised.value, RayTaskError)  # what ray.get(failing) raises
    with pytest.raises(TaskCancelledError):
        ray.get(calls[2], timeout=WAIT)
    assert ray.get([calls[1], calls[3]], timeout=WAIT) == [1, 2]
    assert ray.get(log.value.remote(), timeout=WAIT) == ["after", "last"]  # the failed calls never reached it


def test_creating_an_actor_with_an_unfinished_reference_returns_at_once(ray_connected, gate: str) -> None:
    start = gated.remote(gate, "created")
    started = time.monotonic()
    log = Log.remote(start)
    added = log.add.remote("next")  # waits behind the creation
    assert time.monotonic() - started < AT_ONCE
    assert ray.wait([added], timeout=0.5) == ([], [added])
    with pytest.raises(TypeError):
        Log.remote(start, extra=1)  # the arguments are checked at once all the same
    Path(gate).touch()
    assert ray.get(added, timeout=WAIT) == 2
    assert ray.get(log.value.remote(), timeout=WAIT) == ["created", "next"]

    broken = Log.remote(withdraw.remote(gated.remote(gate, 5)))
    with pytest.raises(ActorDiedError) as died:
        ray.get(broken.value.remote(), timeout=WAIT)  # an actor whose creation failed, as in Ray
    assert isinstance(died.value.__cause__, Overdrawn)


def test_cancelling_a_waiting_call_drops_it(ray_connected, gate: str) -> None:
    log = Log.remote()
    slow = gated.remote(gate, "slow")
    waiting = log.add.remote(slow)
    dropped = log.add.remote("dropped")
    kept = log.add.remote("kept")
    ray.cancel(dropped)
    with pytest.raises(TaskCancelledError):
        ray.get(dropped, timeout=WAIT)
    Path(gate).touch()
    assert ray.get([waiting, kept], timeout=WAIT) == [1, 2]
    assert ray.get(log.value.remote(), timeout=WAIT) == ["slow", "kept"]


def test_killing_an_actor_fails_its_waiting_calls(ray_connected, gate: str) -> None:
    log = Log.remote()
    assert ray.get(log.add.remote("sent"), timeout=WAIT) == 1
    waiting = [log.add.remote(gated.remote(gate, "never")), log.add.remote("behind")]
    ray.kill(log)
    for ref in waiting:
        with pytest.raises(ActorDiedError):
            ray.get(ref, timeout=WAIT)

    unborn = Log.remote(gated.remote(gate, "never"))
    call = unborn.value.remote()
    ray.kill(unborn)  # before its creation was sent: it never is
    with pytest.raises(ActorDiedError):
        ray.get(call, timeout=WAIT)
    with pytest.raises(ActorDiedError):
        ray.get(unborn.value.remote(), timeout=WAIT)
