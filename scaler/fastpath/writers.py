"""Internal: helpers of the bytearray encoders, the variant generated for PyPy (see
tools/fastpath_codegen/emit_bytearray.py).

PyPy's JIT turns ``pack_into`` at known offsets and ``+=`` on one bytearray into a few machine instructions, where
CPython pays for each call: there the parts encoders (emit_fast.py) are faster. Both lay a message out the same way,
byte for byte; tests/protocol/test_encoder_variants.py checks that on both interpreters.
"""

from __future__ import annotations

from typing import Any

from scaler.fastpath.wire import (
    BLOB_THRESHOLD,
    MAX_LIST_LENGTH,
    PADDING,
    POINTER,
    SEGMENT_HEADER,
    TEXT_END,
    place_blobs,
)

# Where deferred big Data go: (position of the pointer to patch, the Data).
Blobs = list[tuple[int, bytes]]


def finish_message(parts: list, buf: bytearray, blobs: Blobs) -> int:
    """Complete the message laid out in ``buf`` (segment size, big Data after the rest), add it to ``parts``."""
    end = len(buf)
    SEGMENT_HEADER.pack_into(buf, 0, 0, (end - 8) >> 3)
    parts.append(bytes(buf))
    if blobs:
        return place_blobs(parts, len(parts) - 1, blobs, end)
    return end


def as_bytes(value: object) -> bytes:
    """Slow path of write_data for values that are not exactly ``bytes``."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)  # for a memoryview of any format this is its raw bytes, matching its nbytes
    raise TypeError(f"expected bytes, got {type(value).__name__}")


def as_list(value: object) -> list[Any]:
    """Slow path for list fields given something other than a list."""
    if isinstance(value, (list, tuple)):
        return list(value)
    raise TypeError(f"expected a list, got {type(value).__name__}")


def write_data(buf: bytearray, blobs: Blobs, at: int, value: bytes) -> None:
    """Append ``value`` as a Data list and point the pointer at ``at`` to it (empty stays a null pointer)."""
    if value.__class__ is not bytes:
        value = as_bytes(value)
    size = len(value)
    if size:
        if size >= BLOB_THRESHOLD:
            if size > MAX_LIST_LENGTH:
                raise ValueError(f"Data of {size} bytes exceeds the Cap'n Proto limit of {MAX_LIST_LENGTH}")
            blobs.append((at, value))
            return
        pos = len(buf)
        buf += value
        buf += PADDING[size & 7]
        # (pos - at - 8) is a multiple of 8: halving it gives the word offset already shifted left by 2.
        POINTER.pack_into(buf, at, (pos - at - 8) >> 1 | 1, size << 3 | 2)


def write_text(buf: bytearray, at: int, value: str) -> None:
    """Append ``value`` as NUL-terminated UTF-8 and point the pointer at ``at`` to it (empty stays null)."""
    if value.__class__ is not str:
        if not isinstance(value, str):
            raise TypeError(f"expected str, got {type(value).__name__}")
        value = str.__str__(value)
    if value:
        encoded = value.encode("utf-8")
        size = len(encoded) + 1
        if size > MAX_LIST_LENGTH:
            raise ValueError(f"Text of {size - 1} bytes exceeds the Cap'n Proto limit of {MAX_LIST_LENGTH - 1}")
        pos = len(buf)
        buf += encoded
        buf += TEXT_END[size - 1 & 7]
        POINTER.pack_into(buf, at, (pos - at - 8) >> 1 | 1, size << 3 | 2)


def write_data_list(buf: bytearray, blobs: Blobs, at: int, values: list[bytes]) -> None:
    """Append a List(Data) (a list of pointers, then each Data in order) and point ``at`` to it."""
    if values.__class__ is not list:
        values = as_list(values)
    count = len(values)
    if count:
        if count > MAX_LIST_LENGTH:
            raise ValueError(f"list of {count} elements exceeds the Cap'n Proto limit of {MAX_LIST_LENGTH}")
        pos = len(buf)
        buf += bytes(count << 3)
        POINTER.pack_into(buf, at, (pos - at - 8) >> 1 | 1, count << 3 | 6)
        for value in values:
            write_data(buf, blobs, pos, value)
            pos += 8


def begin_struct_list(buf: bytearray, at: int, count: int, data_words: int, pointer_count: int) -> int:
    """Append a zeroed inline-composite list of ``count`` structs, point ``at`` to it, return its first element."""
    words = count * (data_words + pointer_count)
    if count > MAX_LIST_LENGTH or words > MAX_LIST_LENGTH:
        raise ValueError(f"list of {count} structs exceeds the Cap'n Proto list size limit")
    pos = len(buf)
    buf += bytes((words + 1) << 3)
    POINTER.pack_into(buf, at, (pos - at - 8) >> 1 | 1, words << 3 | 7)
    POINTER.pack_into(buf, pos, count << 2, data_words | pointer_count << 16)
    return pos + 8
