"""Build and read Scaler messages with pycapnp, the reference implementation (CPython only).

Builders set fields in schema order and skip empty Text/Data/lists, which is what makes pycapnp's single-segment
output byte-identical to our encoder's. Only field *names* come from our FIELDS table; layout is pycapnp's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import capnp

from scaler.fastpath._messages import FIELDS, MESSAGE_TYPES

capnp.remove_import_hook()
SCHEMA_PATH = Path(__file__).resolve().parents[2] / "scaler" / "protocol" / "scaler.capnp"
SCHEMA = capnp.load(str(SCHEMA_PATH))
MEMBER_NAMES = {f.discriminantValue: f.name for f in SCHEMA.Message.schema.node.struct.fields}
SCALAR_KINDS = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"}


def new_builder(msg: Any, set_empty: bool = False, **options: Any) -> Any:
    """A pycapnp Message builder holding ``msg``; options go to new_message (segment size, allocator).

    ``set_empty`` also sets empty Text/Data/lists, which pycapnp then encodes as non-null zero-length objects.
    """
    builder = SCHEMA.Message.new_message(**options)
    fill_builder(builder.init(MEMBER_NAMES[msg.WHICH]), msg, set_empty)
    return builder


def fill_builder(builder: Any, obj: Any, set_empty: bool = False, fields: Optional[dict[type, Any]] = None) -> None:
    """Set ``obj``'s fields on a pycapnp builder; ``fields`` is the FIELDS table of another generated module."""
    fields = FIELDS if fields is None else fields
    for field in fields[type(obj)]:
        value = getattr(obj, field.attr)
        if field.kind in SCALAR_KINDS or field.kind == "enum":
            setattr(builder, field.capnp_name, int(value) if field.kind == "enum" else value)
        elif field.kind in ("text", "data"):
            if value or set_empty:
                setattr(builder, field.capnp_name, value)
        elif value or set_empty:
            items = builder.init(field.capnp_name, len(value))
            for index, item in enumerate(value):
                if field.kind == "struct_list":
                    fill_builder(items[index], item, set_empty, fields)
                elif item or set_empty:
                    items[index] = item


def reference_bytes(msg: Any) -> bytes:
    """pycapnp's single-segment encoding of ``msg``."""
    return new_builder(msg).to_bytes()


def exact_segments(minimum_words: int) -> bytearray:
    """Allocator giving pycapnp exactly what it asks for, so every object after the first lands in a new segment."""
    return bytearray(minimum_words * 8)


def reference_multi_segment_bytes(msg: Any, allocate: Optional[Callable[[int], bytearray]] = None) -> bytes:
    builder = new_builder(msg, num_first_segment_words=1, allocate_seg_callable=allocate or exact_segments)
    return builder.to_bytes()


def reference_decode(data: bytes) -> Any:
    """Read ``data`` with pycapnp into our classes (every field converted to plain Python values)."""
    with SCHEMA.Message.from_bytes(data, traversal_limit_in_words=1 << 62) as reader:
        which = reader.which()
        cls = next(c for c in MESSAGE_TYPES if MEMBER_NAMES[c.WHICH] == which)
        return read_struct(getattr(reader, which), cls)


def read_struct(reader: Any, cls: type, fields: Optional[dict[type, Any]] = None) -> Any:
    fields = FIELDS if fields is None else fields
    values = {}
    for field in fields[cls]:
        value = getattr(reader, field.capnp_name)
        if field.kind == "enum":
            value = value.raw
        elif field.kind == "data_list":
            value = [bytes(item) for item in value]
        elif field.kind == "struct_list":
            value = [read_struct(item, field.type_ref, fields) for item in value]
        elif field.kind == "data":
            value = bytes(value)
        values[field.attr] = value
    return cls(**values)
