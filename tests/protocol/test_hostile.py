"""Malformed and hostile frames: each must raise exactly one ProtocolError, quickly, without big allocations."""

from __future__ import annotations

import struct
import time
from typing import Optional

import pytest

from scaler.protocol import (
    Argument,
    ProtocolError,
    SchedulerStatus,
    Task,
    decode_frame,
    encode,
)
from tests.protocol.wirebuild import (
    NULL,
    composite_tag,
    far_ptr,
    frame,
    list_ptr,
    message_root,
    struct_ptr,
    text_bytes,
)

pytestmark = pytest.mark.timeout(60)

TASK_BODY_WORD = 3  # words: root pointer, Message data, Message pointer, then the Task body


def task_frame(pointers: list[bytes], tail: bytes = b"") -> bytes:
    """One segment: root -> Message{task} -> Task with 1 data word and ``pointers``, then ``tail``."""
    return frame(message_root(Task.WHICH, 1, len(pointers)) + NULL + b"".join(pointers) + tail)


def offset_to_tail(pointer_index: int, pointer_count: int, tail_word: int = 0) -> int:
    """Offset (in words) from Task pointer ``pointer_index`` to word ``tail_word`` of the tail."""
    return (pointer_count - pointer_index - 1) + tail_word


def assert_rejected(data: bytes, match: Optional[str] = None) -> ProtocolError:
    # CPU time of this thread, not wall time: a loaded machine must not fail it, a decoder walking a claimed 2**29
    # elements must
    started = time.thread_time()
    with pytest.raises(ProtocolError, match=match) as caught:
        decode_frame(data)
    assert time.thread_time() - started < 1.0
    assert isinstance(caught.value, ValueError)
    return caught.value


def test_well_formed_task_frame_helper_decodes() -> None:
    """The builders below make valid frames unless something is deliberately broken."""
    data = task_frame([list_ptr(offset_to_tail(0, 1), 2, 3)], b"abc\0\0\0\0\0")
    assert decode_frame(data) == [Task(task_id=b"abc")]


def test_empty_frame() -> None:
    assert_rejected(b"", "empty")


@pytest.mark.parametrize("msg", [Task(task_id=b"x" * 16, args=[Argument(name="n", data=b"d")]), SchedulerStatus()])
def test_every_truncation_of_a_valid_message(msg: object) -> None:
    data = encode(msg)
    for length in range(1, len(data)):
        assert_rejected(data[:length])


def test_trailing_bytes_after_a_message() -> None:
    data = encode(Task(task_id=b"x"))
    for junk in (b"\0", b"\0" * 7, b"\x01\0\0\0\0\0\0\0"):
        assert_rejected(data + junk)


@pytest.mark.parametrize(
    ("table", "match"),
    [
        (struct.pack("<II", 0xFFFFFFFF, 1), r"segments \(limit"),  # 2**32 segments
        (struct.pack("<II", 600, 1), r"segments \(limit"),  # more segments than the limit
        (struct.pack("<II", 3, 1), "truncated segment table"),  # 4 segments claimed, table truncated
        (struct.pack("<II", 0, 0xFFFFFFFF), "beyond the end"),  # first segment far larger than the frame
        (struct.pack("<IIII", 2, 1, 0xFFFFFFFF, 0xFFFFFFFF) + NULL, "beyond the end"),  # segments beyond the frame
        (struct.pack("<II", 0, 0), "no root pointer"),  # no root pointer
    ],
)
def test_bad_segment_table(table: bytes, match: str) -> None:
    assert_rejected(table + NULL, match)


@pytest.mark.parametrize(
    ("root", "match"),
    [
        (struct_ptr(5, 1, 1), "out of bounds"),  # struct beyond the segment
        (struct_ptr(-3, 1, 1), "out of bounds"),  # struct before the segment
        (struct_ptr(0, 0xFFFF, 0xFFFF), "out of bounds"),  # huge struct
        (list_ptr(0, 2, 8), "expected a struct pointer"),  # list where the root struct should be
        (struct.pack("<II", 3, 0), "expected a struct pointer"),  # capability pointer
    ],
)
def test_bad_root_pointer(root: bytes, match: str) -> None:
    assert_rejected(frame(root + NULL + NULL), match)


@pytest.mark.parametrize(
    ("pointer", "match"),
    [
        (list_ptr(1, 2, 64), "out of bounds"),  # Data running past the segment
        (list_ptr(-20, 2, 1), "out of bounds"),  # Data before the segment
        (list_ptr(0, 2, (1 << 29) - 1), "out of bounds"),  # absurd length
        (list_ptr(0, 4, 1), "element size"),  # list of 32-bit values where Data is expected
        (list_ptr(0, 7, 1), "element size"),  # inline-composite where Data is expected
        (struct_ptr(0, 1, 0), "expected a Data pointer"),  # struct where Data is expected
        (struct.pack("<II", 3, 0), "expected a Data pointer"),  # capability
    ],
)
def test_bad_data_pointer(pointer: bytes, match: str) -> None:
    assert_rejected(task_frame([pointer], NULL), match)


@pytest.mark.parametrize(
    ("body", "size", "match"),
    [
        (b"abcd" + bytes(4), 3, "NUL"),  # not NUL-terminated
        (b"\xff\xfe\0" + bytes(5), 3, "UTF-8"),  # invalid UTF-8
        (b"\xed\xa0\x80\0" + bytes(4), 4, "UTF-8"),  # encoded surrogate
    ],
)
def test_bad_text(body: bytes, size: int, match: str) -> None:
    # Argument.name is Text: Task.args -> [Argument{name}].
    element = composite_tag(1, 1, 2) + NULL + list_ptr(1, 2, size) + NULL
    data = task_frame([NULL, NULL, list_ptr(offset_to_tail(2, 3), 7, 3)], element + body)
    assert_rejected(data, match)


def test_zero_length_text_has_no_nul() -> None:
    element = composite_tag(1, 1, 2) + NULL + list_ptr(1, 2, 0) + NULL
    assert_rejected(task_frame([NULL, NULL, list_ptr(offset_to_tail(2, 3), 7, 3)], element + NULL), "NUL")


@pytest.mark.parametrize(
    ("pointer", "match"),
    [
        (far_ptr(7, 0), "segment that does not exist"),
        (far_ptr(0, 1000), "landing pad out of bounds"),
        (far_ptr(0, 1000, double=True), "landing pad out of bounds"),
        (far_ptr(0, 6), "another far pointer"),  # word 6 is a far pointer to itself: a cycle if followed
        (far_ptr(0, 7, double=True), "does not start with a far pointer"),
        (far_ptr(0, 8, double=True), "segment that does not exist"),
    ],
)
def test_bad_far_pointer(pointer: bytes, match: str) -> None:
    # The far pointer is Task's taskId (word 4). Words 5..9 are candidate landing pads.
    pads = NULL + far_ptr(0, 6) + list_ptr(0, 2, 1) + far_ptr(9, 0) + list_ptr(0, 2, 1)
    assert_rejected(frame(message_root(Task.WHICH, 1, 1) + NULL + pointer + pads), match)


def test_far_pointer_chain_is_rejected() -> None:
    # Segment 1 holds a landing pad that is itself a far pointer back to segment 1: a cycle if followed.
    segment0 = message_root(Task.WHICH, 1, 1) + NULL + far_ptr(1, 0)
    segment1 = far_ptr(1, 0)
    assert_rejected(frame(segment0, segment1), "far")


def test_double_far_tag_must_match_the_expected_kind() -> None:
    segment0 = message_root(Task.WHICH, 1, 1) + NULL + far_ptr(1, 0, double=True)
    segment1 = far_ptr(2, 0) + struct_ptr(0, 1, 0)  # tag says struct, but Task.taskId is Data
    assert_rejected(frame(segment0, segment1, NULL))


def test_unknown_union_discriminant() -> None:
    for which in (19 + 50, 0xFFFF):
        data = bytearray(encode(Task(task_id=b"x")))
        struct.pack_into("<H", data, 16, which)
        assert_rejected(bytes(data), "unknown message type")


@pytest.mark.parametrize(
    ("pointer", "match"),
    [
        (struct_ptr(0, 1, 0), "expected a list pointer"),  # struct where a list of structs is expected
        (list_ptr(0, 1, 64), "list of bits"),  # list of bits where a list of structs is expected
        (list_ptr(0, 7, 0), "out of bounds"),  # composite list whose tag would be past the end of the segment
    ],
)
def test_wrong_kind_for_struct_list(pointer: bytes, match: str) -> None:
    assert_rejected(task_frame([NULL, NULL, pointer]), match)


def test_composite_tag_claiming_more_elements_than_words() -> None:
    tail = composite_tag(1000, 1, 2) + NULL * 3
    assert_rejected(task_frame([NULL, NULL, list_ptr(offset_to_tail(2, 3), 7, 3)], tail), "overrun")


def test_composite_tag_that_is_not_a_struct_tag() -> None:
    tail = list_ptr(0, 2, 1) + NULL * 3
    assert_rejected(task_frame([NULL, NULL, list_ptr(offset_to_tail(2, 3), 7, 3)], tail), "tag")


def test_billion_zero_sized_structs() -> None:
    tail = composite_tag((1 << 30) - 1, 0, 0)
    assert_rejected(task_frame([NULL, NULL, list_ptr(offset_to_tail(2, 3), 7, 0)], tail), "traversal")


def test_void_list_with_half_a_billion_elements() -> None:
    assert_rejected(task_frame([NULL, NULL, list_ptr(0, 0, (1 << 29) - 1)], NULL), "traversal")


def test_data_list_of_absurd_length() -> None:
    assert_rejected(task_frame([NULL, NULL, NULL, list_ptr(0, 6, (1 << 29) - 1)], NULL), "bounds")


def test_data_list_when_primitive_list_given() -> None:
    assert_rejected(task_frame([NULL, NULL, NULL, list_ptr(0, 5, 1)], NULL), "pointers")


def test_aliased_pointers_cannot_amplify_the_message() -> None:
    # 4000 dependencies all pointing at the same 4 KiB Data: 36 KiB of frame would decode to 16 MiB.
    count = 4000
    blob_word = count  # tail: the pointer list, then the blob
    pointers = b"".join(list_ptr(blob_word - index - 1, 2, 4096) for index in range(count))
    tail = pointers + bytes(4096)
    data = task_frame([NULL, NULL, NULL, list_ptr(offset_to_tail(3, 4), 6, count)], tail)
    assert_rejected(data, "traversal")


def test_scheduler_status_lists_aliasing_each_other() -> None:
    # All four Counter lists and every Counter name alias one list and one Text: amplification through nesting.
    count = 2000
    pointer_count = 8
    list_at = 0  # tail word holding the Counter list tag
    text_at = list_at + 1 + 2 * count
    tail = composite_tag(count, 1, 1)
    for index in range(count):
        pointer_word = list_at + 1 + 2 * index + 1
        tail += NULL + list_ptr(text_at - pointer_word - 1, 2, 1024)
    tail += text_bytes("x" * 1023)
    pointers = [NULL] + [list_ptr(offset_to_tail(i, pointer_count, list_at), 7, 2 * count) for i in range(1, 5)]
    pointers += [NULL] * (pointer_count - len(pointers))
    body = message_root(SchedulerStatus.WHICH, 3, pointer_count) + NULL * 3 + b"".join(pointers)
    assert_rejected(frame(body + tail), "traversal")
