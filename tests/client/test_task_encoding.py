"""Calls are encoded by template in the calling thread (tasks.py); what the scheduler receives is the same Task the
general path builds, whatever the call's shape."""

from __future__ import annotations

import pickle

from scaler.client import Client, calls
from scaler.client.options import DEFAULT_OPTIONS
from scaler.config import DEFAULT_INLINE_LIMIT_BYTES
from scaler.protocol import Argument, ArgumentKind, Task, encode, encode_many, make_template
from scaler.serializer import Serializer
from scaler.testing.protocol_peer import ProtocolPeer


def describe(*args, **kwargs):
    return len(args), sorted(kwargs)


class Doubling(Serializer):
    """Every payload twice: the worker side (the peer) must use it to read arguments and write results."""

    @staticmethod
    def serialize(obj):
        data = pickle.dumps(obj)
        return data + data

    @staticmethod
    def deserialize(payload):
        return pickle.loads(payload[: len(payload) // 2])


def received_task(peer: ProtocolPeer, task_id: bytes) -> Task:
    (task,) = [task for task in peer.messages(Task) if task.task_id == task_id]
    return task


def test_calls_of_every_shape_reach_the_scheduler_as_the_tasks_they_describe(peer: ProtocolPeer) -> None:
    calls = [
        ((1,), {}),
        ((), {}),
        (("x" * 2000, b"y" * 1500, 3), {}),  # arguments the encoder places after the others (over 1 KiB)
        ((b"z" * (DEFAULT_INLINE_LIMIT_BYTES // 2), b"w" * (DEFAULT_INLINE_LIMIT_BYTES // 2)), {}),  # a frame's own
        ((1, 2), {"key": 3}),  # keywords: the general path
        ((b"q" * (DEFAULT_INLINE_LIMIT_BYTES + 1),), {}),  # an object argument: the general path
    ]
    for serializer in (None, Doubling):
        for profiling in (False, True):
            options = {} if serializer is None else {"serializer": serializer}
            with Client(peer.address, timeout_seconds=10, profiling=profiling, **options) as client:
                for args, kwargs in calls:
                    future = client.submit(describe, *args, **kwargs)
                    assert future.result(timeout=10) == (len(args), sorted(kwargs))
                    task = received_task(peer, future.task_id)
                    assert task.profiling is profiling and task.parent_task_id == b""
                    assert task.serializer_id == client._factory.serializer_id
                    expected = [client._factory.serialize(arg) for arg in args]
                    datas = [argument.data for argument in task.args if argument.kind == ArgumentKind.inline]
                    if all(len(data) <= DEFAULT_INLINE_LIMIT_BYTES for data in expected):
                        assert datas == expected + [client._factory.serialize(v) for v in kwargs.values()]
                    assert [argument.name for argument in task.args] == [""] * len(args) + list(kwargs)


def test_map_tasks_are_the_tasks_submit_would_send(client: Client, peer: ProtocolPeer) -> None:
    values = [0, 1, 255, 256, 2**40, "text", b"bytes", None, (1, 2)]
    assert client.map(describe, [(value,) for value in values]) == [(1, [])] * len(values)
    tasks = [task for task in peer.messages(Task)]
    assert len(tasks) == len(values)
    function_id = tasks[0].function_id
    for task, value in zip(tasks, values):
        expected = Task(
            task_id=task.task_id,
            function_id=function_id,
            args=[Argument(kind=ArgumentKind.inline, data=client._factory.serialize(value))],
        )
        assert task == expected


def test_a_call_encoder_makes_a_template_per_shape_met_often_and_starts_over_when_full(monkeypatch) -> None:
    made = []

    def recording(build, lengths):
        made.append(lengths)
        return make_template(build, lengths)

    monkeypatch.setattr(calls, "make_template", recording)
    monkeypatch.setattr(calls, "_SHAPES_PER_ENCODER", 2)
    encoder = calls.CallEncoder(b"f" * 16, b"", b"", False, pickle.dumps, DEFAULT_OPTIONS)
    task_id = b"t" * 16
    values = (1, 2, 3, 4, 1000, 1001, 1002, "many bytes", "more bytes", "most bytes", 5)
    for value in values:
        datas, plain = encoder.serialize_args((value,))
        assert plain
        encoded = encoder.encode(task_id, datas)
        expected = encode(Task(task_id=task_id, function_id=b"f" * 16, args=[Argument(data=datas[0])]))
        assert encoded is None or encoded == expected
    # a shape of two values (the id, the argument) gets its template when met the third time: the small ints at 3,
    # 1000-1002 at 1002, the strings at "most bytes" after starting over; 5 finds the small ints' template gone (the
    # templates started over), and their count too (which started over at "many bytes")
    lengths = [len(pickle.dumps(value)) for value in (3, 1002, "most bytes")]
    assert made == [[16, length] for length in lengths]


def test_a_graph_node_met_once_is_encoded_once_however_wide(monkeypatch) -> None:
    """A template costs an encoding per variable field: a node reading thousands of results, a shape met once, is
    encoded in full (making its template took 18 s for 1,000 of them)."""
    from scaler.client import graph_encoding

    made = []

    def recording(build, lengths):
        made.append(len(lengths))
        return make_template(build, lengths)

    monkeypatch.setattr(graph_encoding, "make_template", recording)
    ids = [index.to_bytes(16, "big") for index in range(1001)]
    ref = ArgumentKind.task_ref
    leaves = [Task(task_id=ids[i], function_id=b"f" * 16, args=[Argument(data=b"%d" % (i % 10))]) for i in range(1000)]
    wide = Task(
        task_id=ids[1000], function_id=b"g" * 16, args=[Argument(kind=ref, data=i) for i in ids[:1000]],
        dependencies=ids[:1000],
    )  # fmt: skip
    assert graph_encoding._NodeEncoder().encode([*leaves, wide]) == encode_many([*leaves, wide])
    assert made == [2], "the leaves' shape got a template, the wide node none"


def test_graph_nodes_encoded_by_template_are_the_tasks_themselves() -> None:
    from scaler.client.graph_encoding import _NodeEncoder

    ref, inline, obj = ArgumentKind.task_ref, ArgumentKind.inline, ArgumentKind.object_ref
    tasks = []
    # each shape met often enough to get its template (worth_a_template), with other bytes each time
    for round in range(6):
        ids = [bytes([round * 8 + index]) * 16 for index in range(5)]
        tasks += [
            Task(task_id=ids[0], function_id=b"f" * 16, args=[Argument(data=b"%d" % round)], report_result=False),
            Task(task_id=ids[1], function_id=b"f" * 16, args=[Argument(data=b"2")], report_result=False),
            Task(
                task_id=ids[2],
                function_id=b"g" * 16,
                args=[Argument(kind=ref, data=ids[0]), Argument(kind=ref, name="right", data=ids[1])],
                dependencies=[ids[0], ids[1]],
                parent_task_id=b"p" * 16,
                serializer_id=b"s" * 16,
                profiling=True,
            ),
            Task(
                task_id=ids[3],
                function_id=b"g" * 16,
                args=[Argument(kind=obj, data=bytes([round]) * 16), Argument(kind=inline, data=b"x" * 2000)],
                dependencies=[],
            ),
            Task(task_id=ids[4], function_id=b"h" * 16, args=[], dependencies=[ids[2], ids[3]]),
        ]
    encoder = _NodeEncoder()
    assert encoder.encode(tasks) == encode_many(tasks)
    assert len([template for template in encoder._templates.values() if template is not None]) == 4


def test_a_graph_node_template_copies_every_field_a_task_has() -> None:
    """shaped_like builds a graph's nodes from their shape: no field may be left behind, whichever is added later."""
    from scaler.client.task_message import shaped_like
    from scaler.protocol import Argument, Resource, Task

    full = Task(
        task_id=b"t" * 16, function_id=b"f" * 16, args=[Argument(data=b"a")], dependencies=[b"d" * 16], profiling=True,
        report_result=False, parent_task_id=b"p" * 16, serializer_id=b"s" * 16, stream_output=True,
        resources=[Resource(name="gpu", amount=1.0)], priority=3, retries=2, timeout_ms=500, actor_id=b"x" * 16,
        creates_actor=True,
    )  # fmt: skip
    assert all(getattr(full, name) != getattr(Task(), name) for name in Task.__slots__ if name != "raw")
    shaped = shaped_like(full, full.task_id, list(full.args), list(full.dependencies))
    assert shaped == full
