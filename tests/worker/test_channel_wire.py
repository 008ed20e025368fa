"""The processor channel's messages cross a real socket pair unchanged: every field, and the NamedTuple types."""

from __future__ import annotations

import socket

import pytest

from scaler.worker.channel import (
    MessageReader,
    ProcessorArgument,
    ProcessorOrders,
    ProcessorReport,
    ProcessorResult,
    ProcessorTask,
    send_message,
)

ORDERS = ProcessorOrders(
    tasks=[
        ProcessorTask(
            task_id=b"t" * 16,
            serializer_id=b"s" * 32,
            serializer_payload=b"serializer",
            function_id=b"f" * 32,
            function_payload=None,
            arguments=[ProcessorArgument("", b"", b"inline", False), ProcessorArgument("key", b"o" * 32, None, True)],
            profiling=True,
            forget_object_ids=[b"old"],
        ),
        ProcessorTask(b"u" * 16, b"", None, b"g" * 32, b"function", [], False, []),
    ],
    drops=[b"d" * 16],
    end_of_parking=True,
)
REPORTS = [
    ProcessorReport(ProcessorResult(b"t" * 16, True, b"payload", "", 12, 3, 4096), b"u" * 16, [b"d" * 16], None),
    ProcessorReport(ProcessorResult(b"t" * 16, False, b"exception", "Traceback ...", 5, 0, 0), None, [], None),
    ProcessorReport(None, None, [], b"t" * 16),
]


def test_every_message_shape_crosses_unchanged() -> None:
    left, right = socket.socketpair()
    try:
        sent = [ORDERS, ProcessorOrders([], [], False), *REPORTS]
        for message in sent:
            send_message(left, message)
        reader = MessageReader(right)
        received = []
        while len(received) < len(sent):
            received += reader.wait()
    finally:
        left.close()
        right.close()
    assert received == sent
    assert [type(m) for m in received] == [type(m) for m in sent]
    task = received[0].tasks[0]
    assert type(task) is ProcessorTask and task.function_id == b"f" * 32
    assert [type(a) for a in task.arguments] == [ProcessorArgument, ProcessorArgument]
    assert task.arguments[1].name == "key" and task.arguments[1].cacheable is True
    assert type(received[2].result) is ProcessorResult and received[2].result.peak_memory == 4096


def test_only_channel_messages_may_be_sent() -> None:
    left, right = socket.socketpair()
    try:
        with pytest.raises(TypeError, match="processor channel"):
            send_message(left, ("a", "tuple"))
    finally:
        left.close()
        right.close()
