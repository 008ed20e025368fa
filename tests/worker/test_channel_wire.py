"""The processor channel's messages cross a real socket pair unchanged (every field, and the NamedTuple types of
reports; orders' tasks as plain tuples), and its shared progress is shared."""

from __future__ import annotations

import os
import socket

import pytest

from scaler.io.shared_bytes import SharedBytes
from scaler.worker.channel import (
    MAX_SHARED_PER_MESSAGE,
    MessageReader,
    SharedProgress,
    decode_message,
    encode_message,
    send_message,
)
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


def crossed(*sent) -> list:
    """The messages as read at the other end of a socket pair, sent in order."""
    left, right = socket.socketpair()
    try:
        for message in sent:
            send_message(left, message)
        reader = MessageReader(right)
        received: list = []
        while len(received) < len(sent):
            received += reader.wait()
    finally:
        left.close()
        right.close()
    return received


def test_every_message_shape_crosses_unchanged() -> None:
    sent = [ORDERS, ProcessorOrders([], [], False), *REPORTS]
    received = crossed(*sent)
    assert received == sent
    assert [type(m) for m in received] == [type(m) for m in sent]
    # Orders' tasks arrive as plain tuples of ProcessorTask's shape, which the processor unpacks
    task = ProcessorTask(*received[0].tasks[0])
    assert task.function_id == b"f" * 32 and task.seq == 1
    assert ProcessorArgument(*task.arguments[1]) == ("key", b"o" * 32, None, True)
    results = received[2].results
    assert [type(r) for r in results] == [ProcessorResult] * 2 and results[0].peak_memory == 4096


def test_a_task_with_more_shared_inputs_than_one_sendmsg_passes_gets_them_all() -> None:
    """Linux passes at most 253 descriptors per sendmsg; a task reading 600 graph results has them sent in batches
    with its first bytes (before, sendmsg failed with EINVAL and the channel stopped for good)."""
    count = 2 * MAX_SHARED_PER_MESSAGE + 100
    shared = [SharedBytes.create(bytes([index % 256]) * (100 + index)) for index in range(count)]
    arguments = [ProcessorArgument("", b"o%d" % index, payload, False) for index, payload in enumerate(shared)]
    task = ProcessorTask(1, b"t" * 16, b"", None, b"f" * 32, None, arguments, False, [])
    (orders, after) = crossed(ProcessorOrders([task], [], shared=shared), ProcessorOrders([], [b"after"]))
    payloads = [ProcessorArgument(*argument).payload for argument in ProcessorTask(*orders.tasks[0]).arguments]
    assert [bytes(payload.view()) for payload in payloads] == [bytes(p.view()) for p in shared]
    assert after.drops == [b"after"], "the channel goes on after it"


def test_spares_cross_with_their_object_ids_and_files() -> None:
    """The files of freed results an agent gives back to their writer (worker/spares.py), after a task's shared
    inputs: each arrives as its own file, under its result's id."""
    inputs = [SharedBytes.create(b"i" * 100)]
    spares = [(b"s%d" % index, SharedBytes.create(bytes([index]) * (200 + index))) for index in range(3)]
    task = ProcessorTask(1, b"t" * 16, b"", None, b"f" * 32, None, [("", b"in", inputs[0], False)], False, [])
    # a test's NamedTuple task: its input is placed as sent
    _, orders = crossed(ProcessorOrders([task], []), ProcessorOrders([], [], spares=spares))
    given = orders.spares
    assert [object_id for object_id, _ in given] == [object_id for object_id, _ in spares]
    assert [os.fstat(spare.fd).st_ino for _, spare in given] == [os.fstat(spare.fd).st_ino for _, spare in spares]
    assert [spare.size for _, spare in given] == [200, 201, 202]


def test_waiting_for_orders_with_a_timeout_ends_empty_when_none_come() -> None:
    """What lets an idle processor give its heap back (worker/heap.py) and then wait on."""
    left, right = socket.socketpair()
    try:
        reader = MessageReader(right)
        assert reader.wait(0.05) == [] and not reader.closed
        send_message(left, ProcessorOrders([], [b"late"]))
        assert [orders.drops for orders in reader.wait(5.0)] == [[b"late"]]
    finally:
        left.close()
        right.close()


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
