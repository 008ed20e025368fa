"""Internal: Cap'n Proto wire-level helpers shared by the generated message code.

The general reader's positions are absolute byte offsets into the frame. Its readers take the bounds ``lo``/``hi``
of the segment the pointer lives in, so one flat ``bytes`` object serves every segment without slicing. The encoder
only ever produces a single segment, laid out in pre-order: a struct's body first, then its children in field order.
That is the layout pycapnp produces when fields are set in that order, which lets tests compare our bytes with
pycapnp's byte for byte. The one exception is big Data (see BLOB_THRESHOLD). The fast readers take exactly that
layout (see tools/fastpath_codegen/emit_fast.py).
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple, Optional

# The low half of a pointer is unpacked as a *signed* int so that ``low >> 2`` sign-extends the 30-bit offset.
POINTER = struct.Struct("<iI")
SEGMENT_HEADER = struct.Struct("<II")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")

MAX_LIST_LENGTH = (1 << 29) - 1  # element count field of a list pointer is 29 bits
MAX_SEGMENTS = 512  # same cap as the reference implementation's stream reader

# Data at least this long is not laid out in pre-order with the other objects but after all of them, each kept as
# a part of its own until the frame is joined: it is then copied once (see place_blobs). Below it we keep pycapnp's
# pre-order layout, so small messages stay byte-identical to pycapnp's.
BLOB_THRESHOLD = 1024

# Zero bytes after n bytes of Data to end a word, indexed by n & 7; after n bytes of Text: its NUL and the padding.
PADDING = tuple(bytes(-size & 7) for size in range(8))
TEXT_END = tuple(bytes(8 - size) for size in range(8))
NULL_POINTER = bytes(8)

# Bytes per element for primitive list element-size codes when a list is read as a list of structs.
_ELEMENT_BYTES = (0, -1, 1, 2, 4, 8, 8)


class ProtocolError(ValueError):
    """A frame is not a valid Scaler message: truncated, malformed, hostile or from an incompatible peer."""


class NotCanonical(Exception):
    """Internal: a fast path met what only the general one handles (an unusual layout, or a value to look into)."""


class FieldInfo(NamedTuple):
    """Schema facts about one field, for validation error messages, tests and tools (never used by the fast path)."""

    attr: str
    capnp_name: str
    kind: str  # "bool", "int8".."uint64", "float32", "float64", "enum", "text", "data", "data_list", "struct_list"
    type_ref: Any  # the IntEnum class for "enum", the struct class for "struct_list", otherwise None


class Reader:
    """State of decoding one message: the frame, its segment bounds and the remaining traversal budget."""

    __slots__ = ("buf", "seg_starts", "seg_ends", "budget")

    def __init__(self, buf: bytes, seg_starts: list[int], seg_ends: list[int], budget: int) -> None:
        self.buf = buf
        self.seg_starts = seg_starts
        self.seg_ends = seg_ends
        # Words we are still willing to visit. Pointers may alias, so without a budget a small hostile message
        # could make us produce gigabytes (the reference implementation's "traversal limit").
        self.budget = budget


def _spend(r: Reader, words: int) -> None:
    r.budget -= words
    if r.budget < 0:
        raise ProtocolError("traversal limit exceeded (pointers alias or amplify the message)")


def follow_far(r: Reader, low: int, high: int) -> tuple[int, int, int, int, int]:
    """Resolve a far pointer to (segment lo, segment hi, target position, pointer low, pointer high).

    The returned pointer words describe the object (kind and size); for a double far they come from the tag word.
    """
    starts = r.seg_starts
    if high >= len(starts):
        raise ProtocolError("far pointer to a segment that does not exist")
    lo = starts[high]
    hi = r.seg_ends[high]
    pad = lo + (low & 0xFFFFFFF8)  # bits 3..31 are the landing pad's word offset, so masking gives bytes
    buf = r.buf
    if not low & 4:
        if pad + 8 > hi:
            raise ProtocolError("far pointer landing pad out of bounds")
        pad_low, pad_high = POINTER.unpack_from(buf, pad)
        if pad_low & 3 == 2:
            raise ProtocolError("far pointer landing pad is another far pointer")
        return lo, hi, pad + 8 + (pad_low >> 2 << 3), pad_low, pad_high
    if pad + 16 > hi:
        raise ProtocolError("double-far landing pad out of bounds")
    far_low, far_high = POINTER.unpack_from(buf, pad)
    if far_low & 3 != 2:
        raise ProtocolError("double-far landing pad does not start with a far pointer")
    if far_high >= len(starts):
        raise ProtocolError("double-far pointer to a segment that does not exist")
    lo = starts[far_high]
    tag_low, tag_high = POINTER.unpack_from(buf, pad + 8)
    return lo, r.seg_ends[far_high], lo + (far_low & 0xFFFFFFF8), tag_low, tag_high


def struct_at(r: Reader, lo: int, hi: int, at: int) -> Optional[tuple[int, int, int, int, int, int]]:
    """Resolve the struct pointer at ``at``: None if null, else (lo, hi, data pos, data bytes, pointers pos, count)."""
    low, high = POINTER.unpack_from(r.buf, at)
    kind = low & 3
    if kind == 0:
        if low == 0 and high == 0:
            return None
        start = at + 8 + (low >> 2 << 3)
    elif kind == 2:
        lo, hi, start, low, high = follow_far(r, low, high)
        if low & 3:
            raise ProtocolError("expected a struct pointer")
    else:
        raise ProtocolError("expected a struct pointer, found a list or capability pointer")
    data_words = high & 0xFFFF
    pointer_count = high >> 16
    if start < lo or start + ((data_words + pointer_count) << 3) > hi:
        raise ProtocolError("struct pointer out of bounds")
    _spend(r, data_words + pointer_count)
    return lo, hi, start, data_words << 3, start + (data_words << 3), pointer_count


def list_at(r: Reader, lo: int, hi: int, at: int) -> Optional[tuple[int, int, int, int]]:
    """Resolve the list pointer at ``at``: None when null, else (lo, hi, first byte, high word of the pointer)."""
    low, high = POINTER.unpack_from(r.buf, at)
    kind = low & 3
    if kind == 1:
        return lo, hi, at + 8 + (low >> 2 << 3), high
    if kind == 2:
        lo, hi, start, low, high = follow_far(r, low, high)
        if low & 3 != 1:
            raise ProtocolError("expected a list pointer")
        return lo, hi, start, high
    if low == 0 and high == 0:
        return None
    raise ProtocolError("expected a list pointer, found a struct or capability pointer")


def _composite_tag(r: Reader, lo: int, hi: int, start: int, words: int) -> tuple[int, int, int]:
    """Check an inline-composite list and return (element count, data words, pointer count) from its tag."""
    if start < lo or start + 8 + (words << 3) > hi:
        raise ProtocolError("list pointer out of bounds")
    tag_low, tag_high = POINTER.unpack_from(r.buf, start)
    if tag_low & 3:
        raise ProtocolError("inline-composite list tag is not a struct tag")
    count = (tag_low & 0xFFFFFFFF) >> 2
    data_words = tag_high & 0xFFFF
    pointer_count = tag_high >> 16
    element_words = data_words + pointer_count
    if count * element_words > words:
        raise ProtocolError("inline-composite list elements overrun the list")
    # Zero-sized elements take no bytes, so charge one word each or a tiny frame could claim 2**30 of them.
    _spend(r, words + 1 + (count if element_words == 0 else 0))
    return count, data_words, pointer_count


def struct_list_at(r: Reader, lo: int, hi: int, at: int) -> Optional[tuple[int, int, int, int, int, int, int]]:
    """Resolve a List(struct): None when null, else (lo, hi, first, count, step bytes, data bytes, pointer count).

    Like the reference implementation, lists of primitives or pointers are accepted too (their elements read as
    structs holding just that value), which is what allows a schema to upgrade List(T) to List(struct).
    """
    found = list_at(r, lo, hi, at)
    if found is None:
        return None
    lo, hi, start, high = found
    size_code = high & 7
    count = high >> 3
    if size_code == 7:
        count, data_words, pointer_count = _composite_tag(r, lo, hi, start, count)
        return lo, hi, start + 8, count, (data_words + pointer_count) << 3, data_words << 3, pointer_count
    if size_code == 1:
        raise ProtocolError("found a list of bits where a list of structs was expected")
    step = _ELEMENT_BYTES[size_code]
    words = (count * step + 7) >> 3
    if start < lo or start + (words << 3) > hi:
        raise ProtocolError("list pointer out of bounds")
    _spend(r, words + (count if size_code == 0 else 0))
    if size_code == 6:
        return lo, hi, start, count, 8, 0, 1
    return lo, hi, start, count, step, step, 0


def read_data(r: Reader, lo: int, hi: int, at: int) -> bytes:
    """Read the Data field whose pointer is at ``at`` (null reads as b"")."""
    buf = r.buf
    low, high = POINTER.unpack_from(buf, at)
    if low & 3 == 1:
        start = at + 8 + (low >> 2 << 3)
    elif low == 0 and high == 0:
        return b""
    elif low & 3 == 2:
        lo, hi, start, low, high = follow_far(r, low, high)
        if low & 3 != 1:
            raise ProtocolError("expected a Data pointer")
    else:
        raise ProtocolError("expected a Data pointer, found a struct or capability pointer")
    if high & 7 != 2:
        raise ProtocolError("expected Data (a list of bytes), found another element size")
    size = high >> 3
    words = (size + 7) >> 3
    if start < lo or start + (words << 3) > hi:
        raise ProtocolError("Data out of bounds")
    _spend(r, words)
    return buf[start : start + size]


def read_text(r: Reader, lo: int, hi: int, at: int) -> str:
    """Read the Text field whose pointer is at ``at`` (null reads as "")."""
    buf = r.buf
    low, high = POINTER.unpack_from(buf, at)
    if low & 3 == 1:
        start = at + 8 + (low >> 2 << 3)
    elif low == 0 and high == 0:
        return ""
    elif low & 3 == 2:
        lo, hi, start, low, high = follow_far(r, low, high)
        if low & 3 != 1:
            raise ProtocolError("expected a Text pointer")
    else:
        raise ProtocolError("expected a Text pointer, found a struct or capability pointer")
    if high & 7 != 2:
        raise ProtocolError("expected Text (a list of bytes), found another element size")
    size = high >> 3
    words = (size + 7) >> 3
    if start < lo or start + (words << 3) > hi:
        raise ProtocolError("Text out of bounds")
    if size == 0 or buf[start + size - 1] != 0:
        raise ProtocolError("Text is not NUL-terminated")
    _spend(r, words)
    try:
        return buf[start : start + size - 1].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"Text is not valid UTF-8: {exc}") from None


def read_data_list(r: Reader, lo: int, hi: int, at: int) -> list[bytes]:
    """Read a List(Data); an inline-composite list is accepted too (first pointer of each element)."""
    items: list[bytes] = []
    found = list_at(r, lo, hi, at)
    if found is None:
        return items
    lo, hi, pos, high = found
    count = high >> 3
    if high & 7 == 6:
        if pos < lo or pos + (count << 3) > hi:
            raise ProtocolError("list pointer out of bounds")
        _spend(r, count)
        step = 8
    elif high & 7 == 7:
        count, data_words, pointer_count = _composite_tag(r, lo, hi, pos, count)
        if pointer_count == 0:
            raise ProtocolError("expected a list of pointers, found a list of data-only structs")
        pos += 8 + (data_words << 3)
        step = (data_words + pointer_count) << 3
    else:
        raise ProtocolError("expected a list of pointers, found a list of primitives")
    for _ in range(count):
        items.append(read_data(r, lo, hi, pos))
        pos += step
    return items


def bool_bit(value: object) -> int:
    """Slow path for Bool fields not given exactly True or False: ints 0 and 1 are accepted, nothing else."""
    if isinstance(value, int) and value in (0, 1):
        return int(value)
    raise TypeError(f"expected bool, got {type(value).__name__}")


def defer_blob(blobs: Optional[list[tuple[int, Any]]], where: int, value: Any) -> list[tuple[int, Any]]:
    """Note a big Data that goes after the other objects: (pointer position, Data) encoding, (start, size) reading."""
    if blobs is None:
        blobs = []
    blobs.append((where, value))
    return blobs


def place_blobs(parts: list, base: int, blobs: list[tuple[int, bytes]], end: int) -> int:
    """Lay the deferred Data out after the message in ``parts[base:]`` (``end`` bytes so far); return its size.

    Each big Data stays a part of its own, so that it is copied once, straight into the frame.
    """
    buf = bytearray(b"".join(parts[base:]))
    tail: list[bytes] = []
    pos = end
    try:
        for at, value in blobs:
            size = len(value)
            POINTER.pack_into(buf, at, (pos - at - 8) >> 1 | 1, size << 3 | 2)
            padding = PADDING[size & 7]
            tail += (value, padding)
            pos += size + len(padding)
        SEGMENT_HEADER.pack_into(buf, 0, 0, (pos - 8) >> 3)
    except struct.error:
        raise ValueError("message too large: a single segment cannot span more than 4 GiB") from None
    parts[base:] = [bytes(buf), *tail]
    return pos


def end_of_blobs(blobs: list[tuple[int, int]], cursor: int) -> int:
    """Check that the big Data a fast reader found away from its cursor follow each other from there, in order."""
    for start, size in blobs:
        if start != cursor:
            raise NotCanonical
        cursor += size + 7 & -8
    return cursor


def normalized(obj: Any, fields: dict[type, tuple[FieldInfo, ...]]) -> Any:
    """A copy of ``obj`` (valid, per find_invalid_field) whose values have the plain types the encoder expects."""
    copy = object.__new__(type(obj))
    for field in fields[type(obj)]:
        value = getattr(obj, field.attr)
        kind = field.kind
        if kind == "data":
            value = bytes(value)  # for a memoryview of any format this is its raw bytes, matching its nbytes
        elif kind == "text":
            value = str.__str__(value)
        elif kind == "data_list":
            value = [bytes(item) for item in value]
        elif kind == "struct_list":
            value = [normalized(item, fields) for item in value]
        setattr(copy, field.attr, value)
    return copy


def short_repr(value: object) -> str:
    """repr() that keeps big payloads readable in logs."""
    if isinstance(value, bytes) and len(value) > 64:
        return f"<{len(value)} bytes {value[:16].hex()}...>"
    if isinstance(value, str) and len(value) > 200:
        return repr(value[:200]) + f"...<{len(value)} chars>"
    if isinstance(value, list):
        return "[" + ", ".join(short_repr(item) for item in value) + "]"
    return repr(value)


def enum_repr(enum_type: Any, value: int) -> str:
    """Show a known enum value by name; unknown values (newer peers) as the plain int."""
    try:
        return f"{enum_type.__name__}.{enum_type(value).name}"
    except ValueError:
        return repr(value)


_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint8": (0, (1 << 8) - 1),
    "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1),
    "uint64": (0, (1 << 64) - 1),
    "enum": (0, (1 << 16) - 1),
}
_FLOAT32 = struct.Struct("<f")
_BYTES_LIKE = (bytes, bytearray, memoryview)


def find_invalid_field(obj: object, fields: dict[type, tuple[FieldInfo, ...]], path: str) -> Optional[Exception]:
    """Explain why ``obj`` could not be encoded, naming the field; None if every field looks valid.

    Only called after the fast encoder failed, so it can afford to be generic and thorough.
    """
    for field in fields[type(obj)]:
        name = f"{path}.{field.attr}"
        try:
            value = getattr(obj, field.attr)
        except AttributeError:
            return TypeError(f"{name} is not set")
        problem = _check_value(value, field, fields, name)
        if problem is not None:
            return problem
    return None


def _check_value(value: Any, field: FieldInfo, fields: dict[type, tuple[FieldInfo, ...]], name: str) -> Any:
    kind = field.kind
    got = type(value).__name__
    if kind == "bool":
        if not (isinstance(value, int) and value in (0, 1)):
            return TypeError(f"{name}: expected bool, got {got}")
    elif kind in _INT_RANGES:
        if not hasattr(type(value), "__index__"):
            return TypeError(f"{name}: expected int, got {got}")
        low, high = _INT_RANGES[kind]
        if not low <= value.__index__() <= high:
            return ValueError(f"{name}: {value} does not fit in {kind} (range {low}..{high})")
    elif kind in ("float32", "float64"):
        if isinstance(value, str) or not hasattr(type(value), "__float__"):
            return TypeError(f"{name}: expected float, got {got}")
        if kind == "float32":
            try:
                _FLOAT32.pack(value)
            except (OverflowError, struct.error):
                return ValueError(f"{name}: {value} does not fit in float32")
    elif kind == "text":
        if not isinstance(value, str):
            return TypeError(f"{name}: expected str, got {got}")
        try:
            size = len(value.encode("utf-8")) + 1
        except UnicodeEncodeError as exc:
            return ValueError(f"{name}: not encodable as UTF-8 ({exc.reason})")
        if size > MAX_LIST_LENGTH:
            return ValueError(f"{name}: Text of {size - 1} bytes exceeds the limit of {MAX_LIST_LENGTH - 1}")
    elif kind == "data":
        if not isinstance(value, _BYTES_LIKE):
            return TypeError(f"{name}: expected bytes, got {got}")
        size = memoryview(value).nbytes
        if size > MAX_LIST_LENGTH:
            return ValueError(f"{name}: Data of {size} bytes exceeds the limit of {MAX_LIST_LENGTH}")
    elif kind in ("data_list", "struct_list"):
        if not isinstance(value, (list, tuple)):
            return TypeError(f"{name}: expected a list, got {got}")
        if len(value) > MAX_LIST_LENGTH:
            return ValueError(f"{name}: {len(value)} elements exceed the limit of {MAX_LIST_LENGTH}")
        element = FieldInfo(field.attr, field.capnp_name, "data", None) if kind == "data_list" else None
        for index, item in enumerate(value):
            item_name = f"{name}[{index}]"
            if element is not None:
                problem = _check_value(item, element, fields, item_name)
            elif type(item) is not field.type_ref:
                problem = TypeError(f"{item_name}: expected {field.type_ref.__name__}, got {type(item).__name__}")
            else:
                problem = find_invalid_field(item, fields, item_name)
            if problem is not None:
                return problem
    return None
