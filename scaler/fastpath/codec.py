"""Internal: frame-level API: encode messages to Cap'n Proto stream framing and decode frames holding one or more
messages."""

from __future__ import annotations

import struct
from typing import Any, Iterable

from scaler.fastpath._messages import (
    BODY_READERS,
    ENCODERS,
    FAST_READERS,
    FIELDS,
    MESSAGE_TYPES,
    ROOT_DISCRIMINANT_BYTE,
    ROOT_MEMBER_POINTER_BYTE,
    ROUTING_READERS,
)
from scaler.fastpath.wire import (
    MAX_SEGMENTS,
    SEGMENT_HEADER,
    U16,
    U32,
    NotCanonical,
    ProtocolError,
    Reader,
    find_invalid_field,
    normalized,
    struct_at,
)

# Words a message may make us visit: every word once is what honest messages need; the slack allows some benign
# sharing without letting aliased pointers amplify a frame into gigabytes.
TRAVERSAL_FACTOR = 8
TRAVERSAL_SLACK_WORDS = 64


class Encoded(bytes):
    """One message already encoded (by a template, see templates.py): encode_many takes it among messages, as is."""

    __slots__ = ()


def _pass_through(msg: Encoded, parts: list) -> int:
    parts.append(msg)
    return len(msg)


_ENCODERS = {**ENCODERS, Encoded: _pass_through}
_MESSAGE_COUNT = len(MESSAGE_TYPES)
_WHICH_AT = 16 + ROOT_DISCRIMINANT_BYTE  # low byte of the union discriminant: segment table, root pointer, then it
# The fast paths let struct, len() and b"".join reject bad values; what failed is worked out only then.
_ENCODE_FAILURES = (
    NotCanonical,
    KeyError,  # not a message (ENCODERS has no such class)
    struct.error,
    TypeError,
    ValueError,
    AttributeError,
    OverflowError,
    BufferError,
)
# What makes a fast reader hand a message to the general one.
_UNUSUAL = (NotCanonical, IndexError, struct.error, UnicodeDecodeError)
# What a bug-free general reader could still raise on a hostile frame that slipped past an explicit check.
_DECODE_FAILURES = (struct.error, IndexError, UnicodeDecodeError, OverflowError, MemoryError, RecursionError)


def encode(msg: Any) -> bytes:
    """Encode one message (an instance of a class in MESSAGE_TYPES) as a single-segment Cap'n Proto message."""
    parts: list[bytes] = []
    try:
        size = _ENCODERS[msg.__class__](msg, parts)
        data = b"".join(parts)
    except _ENCODE_FAILURES:
        return _encode_carefully(msg)
    if len(data) != size:  # a value whose len() is not its size in bytes, like a memoryview of ints
        return _encode_carefully(msg)
    return data


def encode_many(msgs: Iterable[Any]) -> bytes:
    """Encode several messages into one frame: the concatenation of encode() of each (an Encoded one as it is)."""
    if msgs.__class__ is not list:
        msgs = list(msgs)
    parts: list[bytes] = []
    size = 0
    try:
        for msg in msgs:
            size += _ENCODERS[msg.__class__](msg, parts)
        data = b"".join(parts)
    except _ENCODE_FAILURES:
        return b"".join([encode(msg) for msg in msgs])  # raises on the first message that cannot be encoded
    if len(data) != size:
        return b"".join([encode(msg) for msg in msgs])
    return data


def _encode_carefully(msg: Any) -> bytes:
    """After the fast encoder failed: name the field at fault, or encode values of unusual types (a tuple...)."""
    if msg.__class__ not in ENCODERS:
        raise TypeError(f"not a protocol message: {type(msg).__name__}")
    name = type(msg).__name__
    problem = find_invalid_field(msg, FIELDS, name)
    if problem is not None:
        raise problem
    parts: list[bytes] = []
    try:
        size = ENCODERS[msg.__class__](normalized(msg, FIELDS), parts)
        data = b"".join(parts)
    except _ENCODE_FAILURES as exc:
        raise ValueError(f"cannot encode {name}: {exc}") from exc
    if len(data) != size:
        raise ValueError(f"cannot encode {name}: {len(data)} bytes written for {size} laid out")
    return data


def decode_frame(frame: bytes) -> list[Any]:
    """Decode every message in ``frame``; each gets ``.raw`` = its own encoded bytes. Raises only ProtocolError.

    Messages in the layout our encoder and pycapnp write (a single segment, objects in pre-order) go through the
    generated fast readers; any other message, valid or not, goes through the general reader.
    """
    return _decode(frame, FAST_READERS)


def decode_frame_for_routing(frame: bytes) -> list[Any]:
    """decode_frame for a peer that forwards messages' bytes (``.raw``) untouched: the scheduler.

    It accepts and refuses exactly the messages decode_frame does, but the fast readers leave the fields that such
    a peer never reads (UNREAD_WHEN_ROUTING in tools/fastpath_codegen/emit_fast.py: a Task's args) None; decode
    ``.raw`` again to read them. A message the general reader handles (another layout) has every field.
    """
    return _decode(frame, ROUTING_READERS)


def _decode(frame: bytes, readers: Any) -> list[Any]:
    if frame.__class__ is not bytes:
        frame = _as_bytes(frame)
    try:
        msg = readers[frame[_WHICH_AT]](frame, 0)
    except _UNUSUAL:
        return _decode_from(frame, [], 0, readers)
    if msg.raw is frame:  # the frame holds one message, the common case
        return [msg]
    return _decode_from(frame, [msg], len(msg.raw), readers)


def _decode_from(frame: bytes, messages: list[Any], pos: int, readers: Any) -> list[Any]:
    """Decode the messages from ``pos`` on, adding them to ``messages``."""
    size = len(frame)
    while pos < size:
        try:
            msg = readers[frame[pos + _WHICH_AT]](frame, pos)
        except _UNUSUAL:
            msg = decode_message_generally(frame, pos, size)
        messages.append(msg)
        pos += len(msg.raw)
    if not messages:
        raise ProtocolError("empty frame")
    return messages


def _as_bytes(frame: Any) -> bytes:
    if not isinstance(frame, (bytes, bytearray, memoryview)):
        raise TypeError(f"expected bytes, got {type(frame).__name__}")
    return bytes(frame)


def decode_message_generally(frame: bytes, pos: int, size: int) -> Any:
    """Decode the message at ``pos`` with the general reader, setting its ``raw`` (tests use it as the reference)."""
    try:
        msg, end = _decode_message(frame, pos, size)
    except _DECODE_FAILURES as exc:
        raise ProtocolError(f"malformed message at byte {pos}: {type(exc).__name__}: {exc}") from None
    msg.raw = frame if end == size and pos == 0 else frame[pos:end]
    return msg


def _decode_message(buf: bytes, pos: int, size: int) -> tuple[Any, int]:
    """Decode the message starting at ``pos`` with the general reader; return it and the position just after it."""
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
