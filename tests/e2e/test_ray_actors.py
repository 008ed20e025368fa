"""Actors through scaler.compat.ray (`Cls.remote(...)`, `actor.method.remote(...)`, `ray.kill`) on a real cluster,
built on Scaler's native actors (`Client.actor`)."""

from __future__ import annotations

import sys

import cloudpickle
import pytest

import scaler.compat.ray as ray
from scaler.compat.ray.exceptions import RayActorError, RayTaskError

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WAIT = 60


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
