"""dask's task-spec graphs through Client.get, against the protocol test peer (which runs tasks in this process):
how each kind of node is planned and what travels. Real collections on a real cluster: tests/integrations/."""

from __future__ import annotations

import graphlib
from typing import Dict, List

import dask
import pytest
from dask._task_spec import Alias, DataNode, Task, TaskRef
from dask._task_spec import Dict as SpecDict
from dask._task_spec import List as SpecList
from dask.highlevelgraph import HighLevelGraph

from scaler.client import Client
from scaler.client.dask_graph import evaluate_task, flatten_keys, shape_like
from scaler.protocol import ArgumentKind, ObjectKind
from scaler.protocol import Task as TaskMessage
from scaler.testing.protocol_peer import ProtocolPeer


def inc(value: int) -> int:
    return value + 1


def add(a, b=0):
    return a + b


def total(values) -> int:
    return sum(values)


def describe(mapping) -> str:
    return ",".join(f"{key}={mapping[key]}" for key in sorted(mapping))


def tasks_by_function(peer: ProtocolPeer) -> Dict[str, List[TaskMessage]]:
    names = {put.object_id: put.name for put in peer.puts_of_kind(ObjectKind.function)}
    grouped: Dict[str, List[TaskMessage]] = {}
    for task in peer.messages(TaskMessage):
        grouped.setdefault(names[task.function_id], []).append(task)
    return grouped


def test_task_spec_nodes_each_planned_the_cheapest_way(peer: ProtocolPeer, client: Client) -> None:
    graph = {
        "x": DataNode("x", 1),  # a constant: inlined, no task
        "y": Task("y", inc, TaskRef("x")),  # plain arguments: inc itself runs on the worker
        "alias": Alias("alias", "y"),  # no task: the key names y
        "z": Task("z", add, TaskRef("alias"), b=TaskRef("y")),  # a keyword argument that is a reference
        "nested": Task("nested", total, SpecList(TaskRef("y"), Task(None, inc, TaskRef("z")), 10)),
        "mapping": Task("mapping", describe, SpecDict(a=TaskRef("x"), b=TaskRef("alias"))),
    }
    result = client.get(graph, ["nested", "mapping", "alias", "x"])
    assert result == [2 + 5 + 10, "a=1,b=2", 2, 1]
    tasks = tasks_by_function(peer)
    assert len(tasks["inc"]) == 1 and len(tasks["add"]) == 1
    assert len(tasks["evaluate_task"]) == 2  # the two nodes with nested tasks or containers, evaluated by dask
    assert sum(len(group) for group in tasks.values()) == 4  # no task for the constant or the alias
    (add_task,) = tasks["add"]
    assert [(argument.kind, argument.name) for argument in add_task.args] == [
        (ArgumentKind.task_ref, ""),
        (ArgumentKind.task_ref, "b"),
    ]
    assert add_task.args[0].data == add_task.args[1].data == tasks["inc"][0].task_id  # the alias resolved to y


def test_results_are_shaped_like_the_keys_as_dask_schedulers_return_them(client: Client) -> None:
    graph = {"a": DataNode("a", 1), ("b", 0): Task(("b", 0), inc, TaskRef("a")), "c": Alias("c", ("b", 0))}
    assert client.get(graph, ("b", 0)) == 2  # one key (a tuple key here): its value
    assert client.get(graph, [[("b", 0), "a"], ["c", "c"], "a"]) == [[2, 1], [2, 2], 1]  # nested, repeats allowed
    futures = client.get(graph, [["c"]], block=False)
    assert futures[0][0].result(10) == 2
    assert client.get(graph, ["a"], num_workers=4) == [1]  # keywords dask passes to schedulers are ignored


def test_old_tuple_graphs_given_as_dask_gives_them(client: Client) -> None:
    graph = {"a": 1, "b": (inc, "a"), "c": (add, "b", {"ignored": 0}.get("x", 5)), "d": (total, ["a", "b", "c"])}
    assert client.get(graph, "d") == 1 + 2 + 7
    assert client.get(graph, [["b"], ["c", "d"]]) == [[2], [7, 10]]


def test_high_level_graphs_as_older_dask_passed_them(client: Client) -> None:
    layers = {"a": {"x": 1, "y": (inc, "x")}, "b": {"z": (add, "y", "x")}}
    graph = HighLevelGraph(layers, {"a": set(), "b": {"a"}})
    assert client.get(graph, ["z", "y"]) == [3, 2]


def test_delayed_through_dask_compute(client: Client) -> None:
    @dask.delayed
    def double(value: int) -> int:
        return 2 * value

    values = [double(n) for n in range(5)]
    summed = dask.delayed(sum)(values)
    expected = dask.compute(summed, values, {"k": values[1]}, scheduler="threads")
    assert (
        dask.compute(summed, values, {"k": values[1]}, scheduler=client.get)
        == expected
        == (20, [0, 2, 4, 6, 8], {"k": 2})
    )


def test_a_constant_shared_by_many_nodes_travels_once_as_an_object(peer: ProtocolPeer, client: Client) -> None:
    shared = {"table": list(range(1000))}  # a few kilobytes, in every node, like a fused subgraph of dask's
    graph = {f"n{i}": Task(f"n{i}", describe_size, shared, i) for i in range(20)}
    assert client.get(graph, [f"n{i}" for i in range(20)]) == [1000 + i for i in range(20)]
    (put,) = peer.puts_of_kind(ObjectKind.object)
    for task in peer.messages(TaskMessage):
        assert task.args[0].kind == ArgumentKind.object_ref and task.args[0].data == put.object_id
        assert task.args[1].kind == ArgumentKind.inline


def describe_size(shared, index: int) -> int:
    return len(shared["table"]) + index


def test_equal_small_constants_are_serialized_once(peer: ProtocolPeer, client: Client) -> None:
    # every node has its own tuple object, as dask's chunk shapes: equal ones still travel as the same bytes
    graph = {f"n{i}": Task(f"n{i}", add, (100, 100), (i,)) for i in range(5)}
    assert client.get(graph, ["n4"]) == [(100, 100, 4)]
    graph = {f"n{i}": Task(f"n{i}", add, tuple([100, 100]), (7,)) for i in range(5)}
    assert client.get(graph, [f"n{i}" for i in range(5)]) == [(100, 100, 7)] * 5
    datas = {task.args[0].data for task in peer.messages(TaskMessage)}
    assert len(datas) == 1


@pytest.mark.parametrize(
    "graph, keys, error, message",
    [
        ({"a": Task("a", inc, TaskRef("b")), "b": Task("b", inc, TaskRef("a"))}, ["a"], graphlib.CycleError, "cycle"),
        ({"a": Alias("a", "b"), "b": Alias("b", "a")}, ["a"], graphlib.CycleError, "cycle"),
        ({"a": Task("a", inc, TaskRef("nowhere"))}, ["a"], ValueError, "'nowhere', which is not in it"),
        ({"a": DataNode("a", 1)}, [["b"]], ValueError, "'b' is not in the graph"),
        ([1, 2], [["a"]], TypeError, "graph must be a dict of key -> node or a dask collection's graph"),
    ],
)
def test_bad_dask_graphs_raise_before_anything_is_sent(
    peer: ProtocolPeer, client: Client, graph, keys, error, message
) -> None:
    with pytest.raises(error, match=message):
        client.get(graph, keys)
    assert client.submit(inc, 1).result(10) == 2
    assert len(peer.messages(TaskMessage)) == 1


def test_seed_api_calls_still_get_a_dict_and_refuse_unknown_keywords(client: Client) -> None:
    graph = {"a": 1, "b": (inc, "a")}
    assert client.get(graph, keys=["b", "a"]) == {"b": 2, "a": 1}
    with pytest.raises(TypeError, match="unexpected keyword arguments: blokc"):
        client.get(graph, keys=["b"], blokc=False)


def test_helpers() -> None:
    assert flatten_keys([["a", ("b", 1)], "a", [[("c",)]]]) == ["a", ("b", 1), ("c",)]
    assert flatten_keys("a") == ["a"]
    assert shape_like([["a"], "b"], {"a": 1, "b": 2}) == [[1], 2]
    assert evaluate_task(total, ((SpecList(TaskRef("p"), 3),), {}, ("p",)), 4) == 7
