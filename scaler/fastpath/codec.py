"""Frame-level API: encode messages to Cap'n Proto stream framing and decode frames holding one or more messages."""

from __future__ import annotations

import struct
from typing import Any, Iterable

from scaler.fastpath._messages import (
    BODY_READERS,
    ENCODERS,
    FIELDS,
    MESSAGE_TYPES,
    ROOT_DISCRIMINANT_BYTE,
    ROOT_MEMBER_POINTER_BYTE,
)
from scaler.fastpath.wire import (
    MAX_SEGMENTS,
    POINTER,
    SEGMENT_HEADER,
    U16,
    U32,
    ZERO_PADS,
    Blobs,
    ProtocolError,
    Reader,
    find_invalid_field,
    struct_at,
)

# Words a message may make us visit: every word once is what honest messages need; the slack allows some benign
# sharing without letting aliased pointers amplify a frame into gigabytes.
TRAVERSAL_FACTOR = 8
TRAVERSAL_SLACK_WORDS = 64

_MESSAGE_COUNT = len(MESSAGE_TYPES)
_ENCODE_FAILURES = (struct.error, TypeError, ValueError, AttributeError, OverflowError)
# What a bug-free decoder could still raise on a hostile frame that slipped past an explicit check.
_DECODE_FAILURES = (struct.error, IndexError, UnicodeDecodeError, OverflowError, MemoryError, RecursionError)


def encode(msg: Any) -> bytes:
    """Encode one message (an instance of a class in MESSAGE_TYPES) as a single-segment Cap'n Proto message."""
    buf = bytearray()
    blobs: Blobs = []
    _append_skeleton(buf, blobs, msg)
    if blobs:
        return b"".join(_place_blobs(buf, blobs, 0))
    return bytes(buf)


def encode_many(msgs: Iterable[Any]) -> bytes:
    """Encode several messages into one frame: the concatenation of encode() of each."""
    parts: list[bytes] = []
    buf = bytearray()
    blobs: Blobs = []
    for msg in msgs:
        base = len(buf)
        _append_skeleton(buf, blobs, msg)
        if blobs:
            parts += _place_blobs(buf, blobs, base)
            buf = bytearray()
            blobs = []
    parts.append(bytes(buf))
    return b"".join(parts)


def _append_skeleton(buf: bytearray, blobs: Blobs, msg: Any) -> None:
    """Append ``msg`` to ``buf``, except its big Data which go to ``blobs`` for _place_blobs."""
    encoder = ENCODERS.get(msg.__class__)
    if encoder is None:
        raise TypeError(f"not a protocol message: {type(msg).__name__}")
    try:
        encoder(buf, blobs, msg)
    except _ENCODE_FAILURES as exc:
        # The fast path lets struct/bytearray reject bad values; work out which field it was only now.
        problem = find_invalid_field(msg, FIELDS, type(msg).__name__)
        if problem is None:
            raise ValueError(f"cannot encode {type(msg).__name__}: {exc}") from exc
        raise problem from None


def _place_blobs(buf: bytearray, blobs: Blobs, base: int) -> list[bytes]:
    """Lay the deferred Data out after the message starting at ``base`` in ``buf``, which must be its last.

    Returns the message's bytes as parts to join, so that each big Data is copied once, straight into the frame.
    """
    parts = [b""]
    pos = len(buf)
    try:
        for at, value in blobs:
            size = len(value)
            POINTER.pack_into(buf, at, (pos - at - 8) >> 1 | 1, size << 3 | 2)
            padding = ZERO_PADS[-size & 7]
            parts.append(value)
            parts.append(padding)
            pos += size + len(padding)
        SEGMENT_HEADER.pack_into(buf, base, 0, (pos - base - 8) >> 3)
    except struct.error:
        raise ValueError("message too large: a single segment cannot span more than 4 GiB") from None
    parts[0] = bytes(buf)
    return parts


def decode_frame(frame: bytes) -> list[Any]:
    """Decode every message in ``frame``; each gets ``.raw`` = its own encoded bytes. Raises only ProtocolError."""
    if frame.__class__ is not bytes:
        if not isinstance(frame, (bytes, bytearray, memoryview)):
            raise TypeError(f"expected bytes, got {type(frame).__name__}")
        frame = bytes(frame)
    size = len(frame)
    if size == 0:
        raise ProtocolError("empty frame")
    messages = []
    pos = 0
    try:
        while pos < size:
            msg, end = _decode_message(frame, pos, size)
            msg.raw = frame if pos == 0 and end == size else frame[pos:end]
            messages.append(msg)
            pos = end
    except _DECODE_FAILURES as exc:
        raise ProtocolError(f"malformed message at byte {pos}: {type(exc).__name__}: {exc}") from None
    return messages


def _decode_message(buf: bytes, pos: int, size: int) -> tuple[Any, int]:
    """Decode the message starting at ``pos``; return it and the position just after it."""
    if pos + 8 > size:
        raise ProtocolError("truncated segment table")
    segments_minus_one, first_words = SEGMENT_HEADER.unpack_from(buf, pos)
    if segments_minus_one == 0:
        lo = pos + 8
        end = lo + (first_words << 3)
        if end > size:
            raise ProtocolError("segment extends beyond the end of the frame")
        starts = [lo]
        ends = [end]
        total_words = first_words
    else:
        starts, ends, end = _segment_table(buf, pos, size, segments_minus_one + 1)
        lo = starts[0]
        total_words = (end - starts[0]) >> 3
    if first_words == 0:
        raise ProtocolError("message has no root pointer")
    r = Reader(buf, starts, ends, total_words * TRAVERSAL_FACTOR + TRAVERSAL_SLACK_WORDS)
    root = struct_at(r, lo, ends[0], lo)
    body = None
    which = 0
    if root is not None:
        lo, hi, data, data_bytes, pointers, pointer_count = root
        if data_bytes >= ROOT_DISCRIMINANT_BYTE + 2:
            which = U16.unpack_from(buf, data + ROOT_DISCRIMINANT_BYTE)[0]
            if which >= _MESSAGE_COUNT:
                raise ProtocolError(f"unknown message type {which} (newer peer?)")
        if pointer_count > ROOT_MEMBER_POINTER_BYTE >> 3:
            body = struct_at(r, lo, hi, pointers + ROOT_MEMBER_POINTER_BYTE)
    if body is None:
        return MESSAGE_TYPES[which](), end
    lo, hi, data, data_bytes, pointers, pointer_count = body
    return BODY_READERS[which](r, lo, hi, data, data_bytes, pointers, pointer_count), end


def _segment_table(buf: bytes, pos: int, size: int, count: int) -> tuple[list[int], list[int], int]:
    """Parse a multi-segment table: (segment starts, segment ends, end of the message)."""
    if count > MAX_SEGMENTS:
        raise ProtocolError(f"message claims {count} segments (limit {MAX_SEGMENTS})")
    table_bytes = (4 * (count + 1) + 7) & ~7
    if pos + table_bytes > size:
        raise ProtocolError("truncated segment table")
    starts = []
    ends = []
    cursor = pos + table_bytes
    for index in range(count):
        start = cursor
        cursor += U32.unpack_from(buf, pos + 4 + 4 * index)[0] << 3
        if cursor > size:
            raise ProtocolError("segment extends beyond the end of the frame")
        starts.append(start)
        ends.append(cursor)
    return starts, ends, cursor
