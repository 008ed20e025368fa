"""The processor channel's messages cross a real socket pair unchanged (every field, and the NamedTuple types of
reports; orders' tasks as plain tuples), and its shared progress is shared."""

from __future__ import annotations

import os
import socket

import pytest

from scaler.worker.channel import MessageReader, SharedProgress, decode_message, encode_message, send_message
from scaler.worker.processor_messages import (
    ProcessorArgument,
    ProcessorOrders,
    ProcessorReport,
    ProcessorResult,
    ProcessorTask,
)

ORDERS = ProcessorOrders(
    tasks=[
        ProcessorTask(
            seq=1,
            task_id=b"t" * 16,
            serializer_id=b"s" * 32,
            serializer_payload=b"serializer",
            function_id=b"f" * 32,
            function_payload=None,
            arguments=[ProcessorArgument("", b"", b"inline", False), ProcessorArgument("key", b"o" * 32, None, True)],
            profiling=True,
            forget_object_ids=[b"old"],
            stream_output=True,
        ),
        ProcessorTask(2, b"u" * 16, b"", None, b"g" * 32, b"function", [], False, []),
    ],
    drops=[b"d" * 16],
    end_of_parking=True,
    forget=(b"gone",),
)
REPORTS = [
    ProcessorReport(
        [
            ProcessorResult(b"t" * 16, True, b"payload", "", 12, 3, 4096),
            ProcessorResult(b"u" * 16, False, b"exception", "Traceback ...", 5, 0, 0),
        ],
        [b"d" * 16],
        None,
        True,
    ),
    ProcessorReport([], [], b"t" * 16),
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
    # Orders' tasks arrive as plain tuples of ProcessorTask's shape, which the processor unpacks
    task = ProcessorTask(*received[0].tasks[0])
    assert task.function_id == b"f" * 32 and task.seq == 1
    assert ProcessorArgument(*task.arguments[1]) == ("key", b"o" * 32, None, True)
    results = received[2].results
    assert [type(r) for r in results] == [ProcessorResult] * 2 and results[0].peak_memory == 4096


def test_a_message_marshal_cannot_write_crosses_as_a_pickle() -> None:
    """Marshal refuses a bytes object over 2 GiB (too large to make here) with the ValueError it raises for any value
    it cannot write, such as a range: the message goes as a pickle instead."""
    usual = encode_message(REPORTS[0])
    assert usual[0] != 0x80 and decode_message(usual) == REPORTS[0]  # marshal, not pickle (PROTO opcode)
    report = ProcessorReport([ProcessorResult(b"t" * 16, True, b"payload", "", 1, 0, 0)], [range(3)], None)  # type: ignore[list-item]
    body = encode_message(report)
    assert body[0] == 0x80, "written as a pickle"
    assert decode_message(body) == report
    assert decode_message(memoryview(body)) == report  # as MessageReader reads it


def test_only_channel_messages_may_be_sent() -> None:
    left, right = socket.socketpair()
    try:
        with pytest.raises(TypeError, match="processor channel"):
            send_message(left, ("a", "tuple"))
    finally:
        left.close()
        right.close()


def test_shared_progress_is_seen_by_both_ends() -> None:
    fd = SharedProgress.create_fd()
    try:
        agent, processor = SharedProgress(fd), SharedProgress(fd)
    finally:
        os.close(fd)
    assert agent.read() == (0, 0) and processor.orders_posted() == 0
    processor.start(7)
    assert agent.read() == (7, 0)
    processor.finish(7)
    processor.start(8)
    assert agent.read() == (8, 7)
    agent.post_orders()
    agent.post_orders()
    assert processor.orders_posted() == 2
    agent.close()
    processor.close()
