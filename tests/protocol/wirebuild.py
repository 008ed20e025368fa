"""Hand-assembly of Cap'n Proto words and frames, independent of the codec under test (pure Python, any interpreter).

Used to build hostile frames, unusual-but-valid layouts, and multi-segment variants of valid messages.
"""

from __future__ import annotations

import struct

WORD = struct.Struct("<Q")
NULL = bytes(8)


def struct_ptr(offset: int, data_words: int, pointer_count: int) -> bytes:
    return struct.pack("<iHH", offset << 2, data_words, pointer_count)


def list_ptr(offset: int, size_code: int, count: int) -> bytes:
    return struct.pack("<iI", offset << 2 | 1, count << 3 | size_code)


def far_ptr(segment: int, pad_offset: int, double: bool = False) -> bytes:
    return struct.pack("<II", pad_offset << 3 | (4 if double else 0) | 2, segment)


def composite_tag(count: int, data_words: int, pointer_count: int) -> bytes:
    return struct.pack("<IHH", count << 2, data_words, pointer_count)


def frame(*segments: bytes) -> bytes:
    """Stream framing: segment count - 1, segment sizes in words, padding to a word, then the segments."""
    for segment in segments:
        assert len(segment) % 8 == 0, "segments are whole words"
    table = struct.pack(f"<I{len(segments)}I", len(segments) - 1, *(len(s) // 8 for s in segments))
    table += bytes(-len(table) & 7)
    return table + b"".join(segments)


def split_frame(data: bytes) -> tuple[list[bytearray], int]:
    """Segments of the first message in ``data`` and the message's length in bytes."""
    count = struct.unpack_from("<I", data, 0)[0] + 1
    sizes = struct.unpack_from(f"<{count}I", data, 4)
    pos = (4 * (count + 1) + 7) & ~7
    segments = []
    for size in sizes:
        segments.append(bytearray(data[pos : pos + size * 8]))
        pos += size * 8
    return segments, pos


def text_bytes(text: str) -> bytes:
    """A Text body: UTF-8, NUL, padding."""
    encoded = text.encode() + b"\0"
    return encoded + bytes(-len(encoded) & 7)


def message_root(which: int, body_data_words: int, body_pointer_count: int) -> bytes:
    """Segment prefix: root pointer, Message {which, pointer to a body placed right after}."""
    return struct_ptr(0, 1, 1) + struct.pack("<HHI", which, 0, 0) + struct_ptr(0, body_data_words, body_pointer_count)


def pointer_target(segment: bytes, at: int) -> int:
    """Byte position targeted by the intra-segment struct or list pointer at byte ``at``."""
    low = struct.unpack_from("<i", segment, at)[0]
    return at + 8 + (low >> 2) * 8


def make_far(segments: list[bytearray], seg_index: int, at: int, double: bool) -> None:
    """Turn the intra-segment pointer at (seg_index, at) into a far pointer to the same object.

    Single far: the landing pad is appended to the object's own segment (appending never moves anything).
    Double far: a new two-word segment holds a far pointer to the object and a tag describing it.
    """
    segment = segments[seg_index]
    word = bytes(segment[at : at + 8])
    if word == NULL:
        return
    low, high = struct.unpack("<iI", word)
    assert low & 3 in (0, 1), "only struct and list pointers can be moved behind a far pointer"
    target = pointer_target(segment, at)
    if not double:
        pad = len(segment)
        segment += struct.pack("<iI", ((target - pad - 8) // 8) << 2 | (low & 3), high)
        segment[at : at + 8] = far_ptr(seg_index, pad // 8)
        return
    tag = struct.pack("<iI", low & 3, high)
    segments.append(bytearray(far_ptr(seg_index, target // 8) + tag))
    segment[at : at + 8] = far_ptr(len(segments) - 1, 0, double=True)


def scatter(encoded: bytes, pattern: str) -> bytes:
    """Re-frame a single-segment message so its root, union member and member's pointers go through far pointers.

    ``pattern`` is cycled over those pointers, innermost first: "s" single far, "d" double far, "-" left alone.
    The result is valid Cap'n Proto describing the same values, with several segments.
    """
    segments, _ = split_frame(encoded)
    assert len(segments) == 1, "scatter starts from a single-segment message"
    segment = segments[0]
    message = pointer_target(segment, 0)
    member_at = message + 8 * struct.unpack_from("<H", segment, 4)[0]  # Message's pointer section
    body = pointer_target(segment, member_at)
    body_data_words, body_pointers = struct.unpack_from("<HH", segment, member_at + 4)
    sites = [body + 8 * (body_data_words + index) for index in range(body_pointers)] + [member_at, 0]
    for index, at in enumerate(sites):
        mode = pattern[index % len(pattern)]
        if mode != "-":
            make_far(segments, 0, at, double=mode == "d")
    return frame(*(bytes(s) for s in segments))
