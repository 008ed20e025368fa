"""The actor layer (scaler/compat/ray/actors.py) on a stand-in for the native contract (`client.actor(cls, ...)`,
handle methods returning futures, `handle.close()`), run in this process: what the layer itself does, tested while
native actors are not in this tree (tests/e2e/test_ray_actors.py runs them for real once they are)."""

from __future__ import annotations

import concurrent.futures
from typing import Any, Iterator

import pytest

import scaler.compat.ray as ray
from scaler.client import Client, ScalerFuture
from scaler.compat.ray import session


class _StandInHandle:
    def __init__(self, instance: Any) -> None:
        self._instance = instance
        self.closed = False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._instance, name)

        def call(*args: Any, **kwargs: Any) -> ScalerFuture:
            future = ScalerFuture(b"")
            if self.closed:
                future.set_exception(RuntimeError("closed"))
                return future
            try:
                future.set_result(method(*args, **kwargs))
            except Exception as error:
                future.set_exception(error)
            return future

        return call

    def close(self) -> None:
        self.closed = True


class _StandInClient:
    def __init__(self) -> None:
        self.handles: list = []

    def actor(self, cls: type, *args: Any, **kwargs: Any) -> _StandInHandle:
        handle = _StandInHandle(cls(*args, **kwargs))
        self.handles.append(handle)
        return handle

    def options(self, **policies: Any) -> _StandInClient:
        self.policies = policies
        return self


@pytest.fixture
def stand_in(monkeypatch) -> Iterator[_StandInClient]:
    client = _StandInClient()
    if not hasattr(Client, "actor"):
        monkeypatch.setattr(Client, "actor", None, raising=False)
    monkeypatch.setattr(session, "_session", session._Session(client, None, -7))  # type: ignore[arg-type]
    yield client


@ray.remote
class Account:
    def __init__(self, balance):
        self.balance = balance

    def deposit(self, amount):
        self.balance += amount
        return self.balance

    def holdings(self, items):
        return [type(item).__name__ for item in items], [
            ray.get(i) if isinstance(i, ray.ObjectRef) else i for i in items
        ]

    def withdraw(self, amount):
        raise ValueError(f"cannot withdraw {amount}")


def test_methods_return_references_to_their_results(stand_in) -> None:
    account = Account.remote(ray.ObjectRef(value=10))  # a reference as a constructor argument: its value
    assert ray.get([account.deposit.remote(5), account.deposit.remote(1)]) == [15, 16]


def test_nested_references_reach_methods_as_references(stand_in) -> None:
    account = Account.remote(0)
    kinds, values = ray.get(account.holdings.remote([ray.ObjectRef(value=1), 2]))
    assert kinds == ["ObjectRef", "int"] and values == [1, 2]


def test_method_errors_are_ray_task_errors(stand_in) -> None:
    account = Account.remote(0)
    with pytest.raises(ValueError) as raised:
        ray.get(account.withdraw.remote(3))
    assert isinstance(raised.value, ray.exceptions.RayTaskError)


def test_options_become_policies_and_kill_closes(stand_in) -> None:
    account = Account.options(num_gpus=1).remote(0)
    assert stand_in.policies == {"resources": {"gpu": 1}}
    assert account.deposit.options(num_returns=1).remote(1) is not None
    ray.kill(account)
    assert stand_in.handles[-1].closed
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(account.deposit.remote(1))  # the reference fails, as in Ray, not the call
    with pytest.raises(TypeError):
        ray.kill(object())  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        _ = account.no_such_method
    with pytest.raises(TypeError, match="remote"):
        account.deposit(1)


def test_method_decorator_is_accepted() -> None:
    def f() -> int:
        return 1

    assert ray.method(f) is f
    assert ray.method(num_returns=1)(f) is f
    with pytest.raises(NotImplementedError):
        ray.method(num_returns=2)


def test_futures_of_the_stand_in_are_done() -> None:
    assert isinstance(ScalerFuture(b""), concurrent.futures.Future)
