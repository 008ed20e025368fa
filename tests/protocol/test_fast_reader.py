"""The fast readers against the general reader: on any frame both give the same messages or both ProtocolError.

decode_frame reads the canonical layout (ours and pycapnp's single segment) with the generated fast readers and
hands every other message to the general reader; decode_frame_generally uses the general reader only. Runs on
CPython and PyPy without pycapnp (tests/protocol/test_conformance.py feeds pycapnp's bytes to both).
"""

from __future__ import annotations

import random
import struct
from typing import Any, Union

import pytest
from hypothesis import given, settings

from scaler.fastpath._messages import FAST_READERS, ROUTING_READERS
from scaler.fastpath.codec import decode_message_generally
from scaler.fastpath.wire import BLOB_THRESHOLD, NotCanonical
from scaler.protocol import Argument, ArgumentKind, ProtocolError, Task, decode_frame, decode_frame_for_routing, encode
from tests.protocol.strategies import ANY_MESSAGE
from tests.protocol.test_fuzz import corpus, make_frame
from tests.protocol.wirebuild import NULL, frame, list_ptr, message_root

pytestmark = pytest.mark.timeout(120)

SEED = 4321
ITERATIONS = 30_000
# What a fast reader raises to hand a message over (decode_frame catches exactly these).
HAND_OVER = (NotCanonical, IndexError, struct.error, UnicodeDecodeError)


def read_fast(data: bytes) -> Any:
    """The fast reader of the first message in ``data``, without the general reader behind it."""
    return FAST_READERS[data[16]](data, 0)


def decode_frame_generally(data: bytes) -> list[Any]:
    """decode_frame with the general reader only."""
    messages = []
    pos = 0
    while pos < len(data):
        messages.append(decode_message_generally(data, pos, len(data)))
        pos += len(messages[-1].raw)
    if not messages:
        raise ProtocolError("empty frame")
    return messages


def outcome(decoder: Any, data: bytes) -> Union[str, list[tuple[type, bytes, bytes]]]:
    """The messages as their type, values (encoded again: a float may be NaN, which == would call different) and raw."""
    try:
        return [(type(msg), encode(msg), msg.raw) for msg in decoder(data)]
    except ProtocolError:
        return "rejected"


@settings(max_examples=300, deadline=None)
@given(ANY_MESSAGE)
def test_fast_reader_takes_every_message_we_encode(msg: Any) -> None:
    encoded = encode(msg)
    decoded = read_fast(encoded)
    assert decoded == msg
    assert decoded.raw == encoded


def test_agrees_with_the_general_reader_on_fuzzed_frames() -> None:
    rng = random.Random(SEED)
    frames = corpus()
    taken_fast = 0
    for _ in range(ITERATIONS):
        data = make_frame(rng, frames)
        assert outcome(decode_frame, data) == outcome(decode_frame_generally, data), data.hex()
        try:
            read_fast(data)
            taken_fast += 1
        except HAND_OVER:
            pass
    # mutated payload bytes and values keep a frame canonical: the comparison above covers the fast path too
    assert taken_fast > ITERATIONS // 20, taken_fast


def routed_outcome(data: bytes) -> Union[str, list[tuple[type, bytes, bytes]]]:
    """outcome() of decode_frame_for_routing, each field it left unread (None) read again from the message's raw."""
    try:
        messages = decode_frame_for_routing(data)
    except ProtocolError:
        return "rejected"
    for msg in messages:
        if type(msg) is Task and msg.args is None:
            msg.args = decode_frame(msg.raw)[0].args
    return [(type(msg), encode(msg), msg.raw) for msg in messages]


def test_the_routing_reader_accepts_and_refuses_what_the_fast_reader_does() -> None:
    rng = random.Random(SEED + 1)
    frames = corpus()
    tasks_with_args = 0
    for _ in range(ITERATIONS // 3):
        data = make_frame(rng, frames)
        assert routed_outcome(data) == outcome(decode_frame, data), data.hex()
        try:
            fast = read_fast(data)
        except HAND_OVER as exc:
            with pytest.raises(type(exc)):
                ROUTING_READERS[data[16]](data, 0)
            continue
        routed = ROUTING_READERS[data[16]](data, 0)
        if type(fast) is Task:
            assert routed.args is None
            tasks_with_args += bool(fast.args)
            routed.args = fast.args
        assert encode(routed) == encode(fast) and routed.raw == fast.raw  # encoded: a float may be NaN
    assert tasks_with_args >= 10, tasks_with_args  # the corpus has Tasks whose arguments the routing reader skips


@settings(max_examples=300, deadline=None)
@given(ANY_MESSAGE)
def test_the_routing_reader_reads_every_field_but_task_arguments(msg: Any) -> None:
    encoded = encode(msg)
    routed = ROUTING_READERS[encoded[16]](encoded, 0)
    assert routed.raw == encoded
    if type(msg) is Task:
        assert routed.args is None
        routed.args = msg.args
    assert routed == msg


@pytest.mark.parametrize(
    "name, data",
    [
        (b"\xff\xfe", b"x"),  # an argument name that is not UTF-8
        (b"ok", b"x" * BLOB_THRESHOLD),  # a big argument: placed after the rest, accounted for at the end
    ],
)
def test_the_routing_reader_checks_arguments_it_does_not_build(name: bytes, data: bytes) -> None:
    task = Task(
        task_id=b"t" * 16, function_id=b"f" * 16, args=[Argument(kind=ArgumentKind.inline, name="n", data=data)]
    )
    encoded = encode(task)
    if name != b"ok":
        at = encoded.index(b"n\x00")
        encoded = encoded[:at] + name[:1] + encoded[at + 1 :]  # same length: only the text is wrong
    assert routed_outcome(encoded) == outcome(decode_frame, encoded)
    if name != b"ok":
        assert outcome(decode_frame, encoded) == "rejected"
        with pytest.raises(UnicodeDecodeError):
            ROUTING_READERS[encoded[16]](encoded, 0)
    else:
        assert ROUTING_READERS[encoded[16]](encoded, 0).task_id == task.task_id


TASK_DATA_WORDS, TASK_POINTERS = 2, 8  # Task's struct layout in the schema
P = TASK_POINTERS - 6  # list pointer offsets below are written for a 6-pointer Task: this many words further


def task_with_pointers(pointers: list[bytes], tail: bytes) -> bytes:
    return frame(
        message_root(Task.WHICH, TASK_DATA_WORDS, TASK_POINTERS)
        + NULL * TASK_DATA_WORDS
        + b"".join(pointers)
        + NULL * (TASK_POINTERS - len(pointers))
        + tail
    )


def test_aliased_data_goes_to_the_general_reader() -> None:
    # taskId and functionId point at the same bytes: valid Cap'n Proto, but not a layout we write
    data = task_with_pointers([list_ptr(5 + P, 2, 3), list_ptr(4 + P, 2, 3)], b"abc" + bytes(5))
    with pytest.raises(NotCanonical):
        read_fast(data)
    assert decode_frame(data) == [Task(task_id=b"abc", function_id=b"abc")]


def test_data_out_of_order_goes_to_the_general_reader() -> None:
    data = task_with_pointers([list_ptr(6 + P, 2, 3), list_ptr(4 + P, 2, 3)], b"fid" + bytes(5) + b"tid" + bytes(5))
    with pytest.raises(NotCanonical):
        read_fast(data)
    assert decode_frame(data) == [Task(task_id=b"tid", function_id=b"fid")]


def test_big_data_may_follow_the_rest_in_any_order_of_fields() -> None:
    # As our encoder lays them out (after the other objects, in field order), or as pycapnp does (in pre-order);
    # here functionId's in pre-order then taskId's after it, which is neither but reads the same either way
    first, second = b"\x01" * BLOB_THRESHOLD, b"\x02" * BLOB_THRESHOLD
    words = BLOB_THRESHOLD // 8
    data = task_with_pointers(
        [list_ptr(5 + P + words, 2, BLOB_THRESHOLD), list_ptr(4 + P, 2, BLOB_THRESHOLD)], second + first
    )
    assert read_fast(data) == Task(task_id=first, function_id=second)
    assert decode_frame_generally(data) == [Task(task_id=first, function_id=second)]


def test_gap_before_the_end_goes_to_the_general_reader() -> None:
    data = task_with_pointers([list_ptr(5 + P, 2, 3)], b"abc" + bytes(5) + NULL)  # an unused word at the end
    with pytest.raises(NotCanonical):
        read_fast(data)
    assert decode_frame(data) == [Task(task_id=b"abc")]
