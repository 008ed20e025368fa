"""Valid but unusual encodings other implementations may produce, and round trips through far pointers.

Runs on CPython and PyPy without pycapnp; frames are assembled by hand (wirebuild) from the encoding spec.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.protocol import (
    Argument,
    ArgumentKind,
    Hello,
    HelloReply,
    SchedulerStatus,
    Task,
    decode_frame,
    encode,
)
from tests.protocol.strategies import ANY_MESSAGE
from tests.protocol.wirebuild import NULL, composite_tag, frame, list_ptr, message_root, struct_ptr, text_bytes

pytestmark = pytest.mark.timeout(60)


@settings(max_examples=300, deadline=None)
@given(ANY_MESSAGE)
def test_round_trip(msg: Any) -> None:
    encoded = encode(msg)
    (decoded,) = decode_frame(encoded)
    assert decoded == msg
    assert decoded.raw == encoded
    assert encode(decoded) == encoded


@settings(max_examples=200, deadline=None)
@given(ANY_MESSAGE, st.sampled_from(["s", "d", "sd", "ds", "s-d", "-d"]))
def test_round_trip_through_far_pointers(msg: Any, pattern: str) -> None:
    from tests.protocol.wirebuild import scatter

    scattered = scatter(encode(msg), pattern)
    assert decode_frame(scattered) == [msg]


def test_null_root_reads_as_the_first_union_member_with_defaults() -> None:
    assert decode_frame(frame(NULL)) == [Hello()]


def test_null_member_pointer_reads_as_defaults() -> None:
    segment = struct_ptr(0, 1, 1) + struct.pack("<HHI", Task.WHICH, 0, 0) + NULL
    assert decode_frame(frame(segment)) == [Task()]
    assert decode_frame(frame(segment))[0].report_result is True


def test_empty_struct_pointer_convention() -> None:
    # Offset -1 with zero sizes: a zero-sized struct, so every field reads as its default.
    segment = struct_ptr(0, 1, 1) + struct.pack("<HHI", HelloReply.WHICH, 0, 0) + struct_ptr(-1, 0, 0)
    assert decode_frame(frame(segment)) == [HelloReply()]


def test_root_struct_without_data_section_is_the_first_member() -> None:
    segment = struct_ptr(0, 0, 1) + struct_ptr(0, 1, 0) + struct.pack("<I4x", 7)
    assert decode_frame(frame(segment)) == [Hello(protocol_version=7)]


def test_smaller_struct_from_an_older_peer() -> None:
    # Task with no data section and only a taskId pointer: reportResult must read as its default, true.
    segment = message_root(Task.WHICH, 0, 1) + list_ptr(0, 2, 2) + b"ab" + bytes(6)
    (task,) = decode_frame(frame(segment))
    assert task == Task(task_id=b"ab") and task.report_result is True


def test_bigger_struct_from_a_newer_peer() -> None:
    # the four data words we know (the fourth: memoryLimit, 0), then an unknown one
    data = struct.pack("<IHxxIII4xQ", 3, 2, 4, 5, 6, 0) + b"\xff" * 8
    capability = struct.pack("<II", 3, 0)  # an unknown pointer we must not follow
    # name, hostname, resources, replaces, dataAddress, heldResults, actors, two unknown
    pointers = list_ptr(8, 2, 2) + NULL * 6 + capability + capability
    segment = message_root(Hello.WHICH, 5, 9) + data + pointers + text_bytes("z")
    (hello,) = decode_frame(frame(segment))
    assert hello == Hello(protocol_version=3, role=2, pid=4, capacity=5, name="z", previous_registrations=6)


def test_non_null_empty_values() -> None:
    pointers = [list_ptr(3, 2, 0), NULL, list_ptr(1, 7, 0), list_ptr(1, 6, 0)]
    segment = message_root(Task.WHICH, 1, 4) + NULL + b"".join(pointers) + composite_tag(0, 1, 2) + NULL
    assert decode_frame(frame(segment)) == [Task()]


def test_data_list_encoded_as_list_of_structs() -> None:
    # Upgrade path List(Data) -> List(struct {data @0 :Data; ...}): the first pointer of each element is used.
    elements = composite_tag(2, 1, 2) + NULL + list_ptr(4, 2, 1) + NULL + NULL + list_ptr(2, 2, 2) + NULL
    segment = message_root(Task.WHICH, 1, 4) + NULL + NULL * 3 + list_ptr(0, 7, 6) + elements
    segment += b"a" + bytes(7) + b"bc" + bytes(6)
    assert decode_frame(frame(segment)) == [Task(dependencies=[b"a", b"bc"])]


def test_struct_list_encoded_as_primitive_list() -> None:
    # Upgrade path List(enum) -> List(struct {kind @0 ...}): each 16-bit value is the element's first field.
    segment = message_root(Task.WHICH, 1, 3) + NULL + NULL + NULL + list_ptr(0, 3, 3) + struct.pack("<HHH2x", 1, 2, 9)
    expected = [Argument(kind=ArgumentKind.object_ref), Argument(kind=ArgumentKind.task_ref), Argument(kind=9)]
    assert decode_frame(frame(segment)) == [Task(args=expected)]


def test_struct_list_encoded_as_pointer_list() -> None:
    # Upgrade path List(Text) -> List(struct {name @0 :Text; ...}) for a struct whose pointer 0 is Text.
    segment = message_root(SchedulerStatus.WHICH, 0, 1) + list_ptr(0, 6, 2) + list_ptr(1, 2, 2) + list_ptr(1, 2, 3)
    segment += text_bytes("a") + text_bytes("bc")
    (status,) = decode_frame(frame(segment))
    assert [counter.name for counter in status.task_states] == ["a", "bc"]
    assert [counter.value for counter in status.task_states] == [0, 0]


def test_struct_list_encoded_as_void_list() -> None:
    segment = message_root(Task.WHICH, 1, 3) + NULL + NULL + NULL + list_ptr(0, 0, 4)
    assert decode_frame(frame(segment)) == [Task(args=[Argument()] * 4)]


def test_buffer_types_accepted() -> None:
    encoded = encode(Task(task_id=b"x"))
    for frame_like in (bytearray(encoded), memoryview(encoded)):
        (decoded,) = decode_frame(frame_like)  # type: ignore[arg-type]
        assert decoded == Task(task_id=b"x") and type(decoded.raw) is bytes


def test_decoded_enum_fields_are_plain_ints() -> None:
    (task,) = decode_frame(encode(Task(args=[Argument(kind=ArgumentKind.task_ref)])))
    assert type(task.args[0].kind) is int and task.args[0].kind == ArgumentKind.task_ref
