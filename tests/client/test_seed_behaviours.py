"""Behaviours of the seed system that code written for it relies on, against the protocol test peer.

Each test checks one behaviour of README's "Coming from the seed system" list; the ones that need a real scheduler
(one killed mid-task, objects deleted by clear()) are in tests/e2e/test_seed_behaviours.py.
"""

from __future__ import annotations

import concurrent.futures
import functools
import graphlib

import pytest

from scaler.client import Client
from scaler.errors import MissingObjectError, ProfilingInfoError, ScalerError
from scaler.protocol import Task
from scaler.testing.processes import wait_for
from scaler.testing.protocol_peer import ProtocolPeer


def add(a, b):
    return a + b


def scale(value, *, factor):
    return value * factor


def spread(first, *rest, **named):
    return first, rest, named


class Account:
    def __init__(self, balance: int) -> None:
        self.balance = balance

    def deposit(self, amount: int) -> int:
        return self.balance + amount


def assert_no_task_was_sent(peer: ProtocolPeer, client: Client) -> None:
    """The connection keeps order: once a later task is answered, anything sent before it has arrived."""
    assert client.submit(add, 1, 1).result(10) == 2
    assert len(peer.messages(Task)) == 1


# ---- submit: arguments that do not bind raise TypeError at the call -------------------------------------------------


@pytest.mark.parametrize(
    "fn, args, kwargs, message",
    [
        (add, (1,), {}, "missing a required argument: 'b'"),
        (add, (1, 2, 3), {}, "too many positional arguments"),
        (add, (1, 2), {"c": 2}, "unexpected keyword argument 'c'"),
        (add, (1, 2), {"a": 3}, "multiple values for argument 'a'"),
        (scale, (2, 3), {}, "too many positional arguments"),  # keyword-only given positionally
        (scale, (2,), {}, "missing a required argument: 'factor'"),
        (Account(10).deposit, (), {}, "missing a required argument: 'amount'"),  # self is bound already
        (Account, (), {}, "missing a required argument: 'balance'"),
        (functools.partial(add, 1), (2, 3), {}, "too many positional arguments"),
        (divmod, (1,), {}, "missing a required argument"),  # a builtin with a text signature
    ],
)
def test_arguments_that_do_not_bind_raise_type_error_at_submit(
    peer: ProtocolPeer, client: Client, fn, args, kwargs, message
) -> None:
    with pytest.raises(TypeError, match=message) as raised:
        client.submit(fn, *args, **kwargs)
    assert "(" in str(raised.value)  # the message shows the signature
    assert_no_task_was_sent(peer, client)


def test_arguments_that_bind_are_sent(client: Client) -> None:
    assert client.submit(scale, 2, factor=3).result(10) == 6
    assert client.submit(spread, 1, 2, 3, x=4).result(10) == (1, (2, 3), {"x": 4})
    assert client.submit(Account(10).deposit, 5).result(10) == 15
    assert client.submit(functools.partial(add, 1), 2).result(10) == 3


def test_callables_without_a_signature_are_not_checked(client: Client) -> None:
    with pytest.raises(ValueError):
        __import__("inspect").signature(max)  # max has no signature to check against
    assert client.submit(max, 3, 9, 4).result(10) == 9
    with pytest.raises(TypeError, match="expected at least 1 argument"):
        client.submit(max).result(10)  # the worker's call raises it, as before


def test_map_checks_every_element_before_sending(peer: ProtocolPeer, client: Client) -> None:
    with pytest.raises(TypeError, match="element 2 of iterable: .*missing a required argument: 'b'"):
        client.map(add, [(1, 2), (3, 4), (5,)])
    assert_no_task_was_sent(peer, client)
    assert client.map(add, [(1, 2), (3, 4)]) == [3, 7]


def test_a_function_redefined_under_the_same_name_is_checked_against_its_new_signature(client: Client) -> None:
    def work(a):
        return a

    assert client.submit(work, 1).result(10) == 1

    def work(a, b):  # noqa: F811 - the point of the test
        return a + b

    with pytest.raises(TypeError, match="missing a required argument: 'b'"):
        client.submit(work, 1)
    assert client.submit(work, 1, 2).result(10) == 3


# ---- get: cycles and repeated keys -----------------------------------------------------------------------------------


def test_a_cyclic_graph_raises_cycle_error_which_is_a_value_error(peer: ProtocolPeer, client: Client) -> None:
    graph = {"a": (add, "b", 1), "b": (add, "a", 1), "c": 1}
    with pytest.raises(graphlib.CycleError) as raised:
        client.get(graph, keys=["a"])
    assert isinstance(raised.value, ValueError)
    assert set(raised.value.args[1]) == {"a", "b"}  # the cycle, as graphlib.TopologicalSorter reports it
    assert_no_task_was_sent(peer, client)


def test_a_key_repeated_in_keys_raises_key_error(peer: ProtocolPeer, client: Client) -> None:
    graph = {"a": 1, "b": (add, "a", 1)}
    with pytest.raises(KeyError, match="'b' is asked for twice"):
        client.get(graph, keys=["b", "a", "b"])
    assert_no_task_was_sent(peer, client)


# ---- futures: profiling_info() too early, running() ------------------------------------------------------------------


def test_profiling_info_before_the_task_is_done_raises_a_value_error() -> None:
    with ProtocolPeer(execute=False) as peer, Client(peer.address) as client:
        future = client.submit(add, 1, 2, profiling=True)
        with pytest.raises(ValueError, match="once the task is done") as raised:
            future.profiling_info()
        assert isinstance(raised.value, (ProfilingInfoError, concurrent.futures.InvalidStateError, ScalerError))


def test_a_submitted_unfinished_task_is_running_until_it_is_done() -> None:
    with ProtocolPeer(execute=False) as peer, Client(peer.address) as client:
        future = client.submit(add, 1, 2)
        assert future.running() and not future.done() and not future.cancelled()
        assert "state=running" in repr(future)
        wait_for(lambda: future.task_id in peer.held, 5, "the task at the peer")
        peer.release(future.task_id)
        assert future.result(10) == 3
        assert not future.running() and future.done()

        pending = client.submit(add, 3, 4)
        assert pending.running()
        assert pending.cancel()  # a running task can still be cancelled: it is stopped, unlike a thread pool's
        assert pending.cancelled() and not pending.running()


# ---- objects: a reference after clear() ------------------------------------------------------------------------------


def test_a_reference_used_after_clear_raises_missing_object_error(peer: ProtocolPeer, client: Client) -> None:
    reference = client.send_object([1, 2, 3], name="numbers")
    assert client.submit(add, reference, [4]).result(10) == [1, 2, 3, 4]
    client.clear()
    for call in (
        lambda: client.submit(add, reference, [4]),
        lambda: client.submit(add, [0], b=reference),
        lambda: client.map(add, [(reference, [4])]),
        lambda: client.get({"r": reference, "s": (add, "r", [4])}, keys=["s"]),
    ):
        with pytest.raises(MissingObjectError, match="numbers") as raised:
            call()
        assert isinstance(raised.value, (LookupError, ScalerError))
    again = client.send_object([1, 2, 3], name="numbers")  # sending it again makes both references usable
    assert client.submit(add, again, [5]).result(10) == client.submit(add, reference, [5]).result(10) == [1, 2, 3, 5]
