"""Graphs: validation before anything is sent, and their encoding as tasks with dependencies."""

from __future__ import annotations

from graphlib import CycleError
from typing import Any, Dict, List

import pytest

from scaler.client import Client, ScalerFuture
from scaler.client.graph import gather_list, identity
from scaler.config import DEFAULT_INLINE_LIMIT_BYTES
from scaler.protocol import ArgumentKind, ObjectKind, Task
from scaler.testing.protocol_peer import ProtocolPeer


def inc(i):
    return i + 1


def add(a, b):
    return a + b


def minus(a, b):
    return a - b


def total(values):
    return sum(values)


def fail(_):
    raise KeyError("no such thing")


SEEDS_GRAPH: Dict[str, Any] = {
    "a": 2,
    "b": 2,
    "c": (inc, "a"),  # c = a + 1 = 2 + 1 = 3
    "d": (add, "a", "b"),  # d = a + b = 2 + 2 = 4
    "e": (minus, "d", "c"),  # e = d - c = 4 - 3 = 1
}


def tasks_by_function(peer: ProtocolPeer) -> Dict[str, List[Task]]:
    names = {put.object_id: put.name for put in peer.puts_of_kind(ObjectKind.function)}
    grouped: Dict[str, List[Task]] = {}
    for task in peer.messages(Task):
        grouped.setdefault(names[task.function_id], []).append(task)
    return grouped


def assert_nothing_was_sent(peer: ProtocolPeer, client: Client) -> None:
    """The connection keeps order: once a later task is answered, anything sent before it has arrived."""
    assert client.submit(inc, 0).result(10) == 1
    assert len(peer.messages(Task)) == 1
    assert len(peer.puts_of_kind(ObjectKind.function)) == 1


def test_seeds_graph(client: Client) -> None:
    assert client.get(SEEDS_GRAPH, keys=["e"]) == {"e": 1}
    (future,) = client.submit_graph(SEEDS_GRAPH, keys=["e"])
    assert isinstance(future, ScalerFuture) and future.result(10) == 1
    assert client.get(SEEDS_GRAPH, keys=["e", "c", "a"]) == {"e": 1, "c": 3, "a": 2}


def test_graph_encoding(peer: ProtocolPeer, client: Client) -> None:
    futures = client.get(SEEDS_GRAPH, keys=["e"], block=False)
    assert futures["e"].result(10) == 1
    tasks = tasks_by_function(peer)
    (c,), (d,), (e,) = tasks["inc"], tasks["add"], tasks["minus"]
    assert len(peer.messages(Task)) == 3  # constants are inlined, never tasks
    assert len(set(peer.frames_of(Task))) == 1  # the whole graph in one frame
    assert [t.task_id for t in peer.messages(Task)].index(e.task_id) == 2  # dependencies first
    assert e.task_id == futures["e"].task_id
    assert (c.report_result, d.report_result, e.report_result) == (False, False, True)
    assert e.dependencies == [d.task_id, c.task_id]
    assert [(a.kind, a.data) for a in e.args] == [
        (ArgumentKind.task_ref, d.task_id),
        (ArgumentKind.task_ref, c.task_id),
    ]
    assert c.dependencies == [] and [a.kind for a in c.args] == [ArgumentKind.inline]
    assert d.args[0].data == d.args[1].data == c.args[0].data  # the constant 2, serialized once


def test_only_what_the_keys_need_is_sent(peer: ProtocolPeer, client: Client) -> None:
    assert client.get(SEEDS_GRAPH, keys=["c"]) == {"c": 3}
    (task,) = peer.messages(Task)
    assert task.report_result and not task.dependencies


def test_constant_keys_need_no_task(peer: ProtocolPeer, client: Client) -> None:
    assert client.get({"a": 5, "b": [1, 2]}, keys=["b", "a"]) == {"b": [1, 2], "a": 5}
    assert not peer.messages(Task)


def test_list_of_keys_argument_is_gathered_by_a_helper_task(peer: ProtocolPeer, client: Client) -> None:
    graph = {"x": 1, "y": (inc, "x"), "z": (inc, "y"), "s": (total, ["x", "y", "z", 10]), "l": ["y", "z"]}
    assert client.get(graph, keys=["s", "l"]) == {"s": 1 + 2 + 3 + 10, "l": [2, 3]}
    tasks = tasks_by_function(peer)
    assert len(tasks["gather_list"]) == 2
    (s,) = tasks["total"]
    (argument,) = s.args
    assert argument.kind == ArgumentKind.task_ref and s.dependencies == [argument.data]


def test_nested_tasks_aliases_and_references(client: Client) -> None:
    reference = client.send_object(100)
    graph = {"x": 1, "y": (add, (inc, "x"), reference), "alias": "y", "ref": reference, "pair": ["x", reference]}
    assert client.get(graph, keys=["y", "alias", "ref", "pair"]) == {
        "y": 102,
        "alias": 102,
        "ref": 100,
        "pair": [1, 100],
    }


def test_large_constant_becomes_one_object(peer: ProtocolPeer, client: Client) -> None:
    data = "d" * (DEFAULT_INLINE_LIMIT_BYTES + 10)
    graph = {"data": data, "n": (len, "data"), "m": (add, "data", "data")}
    assert client.get(graph, keys=["n", "m"]) == {"n": len(data), "m": data + data}
    assert len(peer.puts_of_kind(ObjectKind.object)) == 1


def test_failure_propagates_to_every_dependent_key(client: Client) -> None:
    graph = {"x": (fail, 1), "y": (inc, "x"), "z": (add, "y", 1), "ok": (inc, 1)}
    futures = client.submit_graph(graph, keys=["z", "y", "ok"])
    for future in futures[:2]:
        with pytest.raises(KeyError, match="no such thing"):
            future.result(10)
    assert futures[2].result(10) == 2
    with pytest.raises(KeyError):
        client.get(graph, keys=["z"])


@pytest.mark.parametrize(
    "graph, keys, error, message",
    [
        ({"a": (inc, "b"), "b": (inc, "c"), "c": (inc, "a")}, ["a"], CycleError, "cycle: 'a' -> 'b' -> 'c' -> 'a'"),
        ({"a": (inc, "a")}, ["a"], CycleError, "cycle: 'a' -> 'a'"),
        ({"a": 1, "b": (inc, "b"), "c": (inc, "a")}, ["c"], CycleError, "cycle"),  # anywhere in the graph
        (SEEDS_GRAPH, ["nope"], ValueError, "'nope' is not in the graph"),
        ({"a": ()}, ["a"], ValueError, "graph\\['a'\\] is an empty tuple"),
        ({"a": (1, 2)}, ["a"], TypeError, "graph\\['a'\\] is a tuple whose first element 1 is not callable"),
        ({"a": 1, "b": (inc, [(inc, "a"), ()]), "c": ("x",)}, ["b"], TypeError, "graph\\['c'\\]"),
        ([("a", 1)], ["a"], TypeError, "graph must be a dict"),
    ],
)
def test_invalid_graphs_raise_before_anything_is_sent(
    peer: ProtocolPeer, client: Client, graph: Any, keys: Any, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        client.get(graph, keys=keys)
    with pytest.raises(error, match=message):
        client.submit_graph(graph, keys=keys)
    assert_nothing_was_sent(peer, client)


def test_submit_graph_wants_a_list_of_keys_and_get_also_takes_one_key_as_dask_does(client: Client) -> None:
    with pytest.raises(TypeError, match="list of graph keys"):
        client.submit_graph(SEEDS_GRAPH, keys="e")
    assert client.get(SEEDS_GRAPH, "e") == 1  # dask's scheduler convention: one key in, its value out
    assert client.get(SEEDS_GRAPH, [["e"], "c"]) == [[1], 3]  # nested lists of keys: results in the same shape


def test_helpers_are_plain_functions() -> None:
    assert gather_list(1, 2) == [1, 2] and identity(3) == 3
