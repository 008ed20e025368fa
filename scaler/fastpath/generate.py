"""Build tool: generate scaler/fastpath/_messages.py from the Cap'n Proto schema.

Run with CPython and pycapnp installed: ``python3 -m scaler.fastpath.generate`` (``--check`` only compares).

pycapnp gives us the compiled layout (offsets, sizes, defaults), so the generated code can use literal offsets and
precompiled ``struct.Struct`` objects: flat straight-line code that PyPy's JIT turns into a handful of loads. Only the
schema features Scaler uses are supported; anything else fails here, loudly, rather than producing a wrong codec.
"""

from __future__ import annotations

import argparse
import keyword
import re
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPO_ROOT / "scaler" / "protocol" / "scaler.capnp"
OUTPUT_PATH = REPO_ROOT / "scaler" / "fastpath" / "_messages.py"
SCHEMA_LABEL = "scaler/protocol/scaler.capnp"
ROOT_STRUCT = "Message"
MAX_DEPTH = 64

# kind -> (bytes, struct format char, python annotation); bool is special-cased (bits).
PRIMITIVES = {
    "int8": (1, "b", "int"),
    "int16": (2, "h", "int"),
    "int32": (4, "i", "int"),
    "int64": (8, "q", "int"),
    "uint8": (1, "B", "int"),
    "uint16": (2, "H", "int"),
    "uint32": (4, "I", "int"),
    "uint64": (8, "Q", "int"),
    "float32": (4, "f", "float"),
    "float64": (8, "d", "float"),
    "enum": (2, "H", "int"),
}
POINTER_KINDS = ("text", "data", "data_list", "struct_list")
RESERVED_ATTRS = {"raw", "WHICH"}


@dataclass(frozen=True)
class FieldModel:
    attr: str
    capnp_name: str
    kind: str  # "bool", a PRIMITIVES key, or one of POINTER_KINDS
    offset: int  # slot offset in units of the field's size (bits for bool, pointer index for pointers)
    default: Union[int, float, bool]
    type_name: Optional[str]  # enum name for "enum", element struct name for "struct_list"


@dataclass
class StructModel:
    name: str
    type_id: int
    data_words: int
    pointer_count: int
    fields: list[FieldModel]
    which: Optional[int] = None  # discriminant in the root union, for top-level message types


@dataclass
class Schema:
    enums: list[tuple[str, list[tuple[str, int]]]] = field(default_factory=list)
    consts: list[tuple[str, int]] = field(default_factory=list)
    structs: list[StructModel] = field(default_factory=list)
    root_data_words: int = 0
    root_pointer_count: int = 0
    root_discriminant_offset: int = 0
    root_member_pointer: int = 0
    root_members: dict[str, int] = field(default_factory=dict)  # struct name -> union discriminant


def snake_case(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def upper_snake_case(name: str) -> str:
    return snake_case(name).upper()


def load_schema(path: Path = SCHEMA_PATH) -> Schema:
    import capnp  # only the build tool needs pycapnp

    capnp.remove_import_hook()
    module = capnp.load(str(path))
    schema = Schema()
    names_by_id: dict[int, str] = {}
    struct_nodes = []
    for nested in module.schema.node.nestedNodes:
        node = module.schema.get_nested(nested.name).node
        names_by_id[node.id] = nested.name
        kind = node.which()
        if kind == "enum":
            members = [(snake_case(e.name), value) for value, e in enumerate(node.enum.enumerants)]
            for member, _ in members:
                if keyword.iskeyword(member) or member in ("name", "value") or member.startswith("_"):
                    raise NotImplementedError(f"enumerant {nested.name}.{member} clashes with Python/IntEnum names")
            schema.enums.append((nested.name, members))
        elif kind == "const":
            value_kind = node.const.value.which()
            if value_kind not in PRIMITIVES or value_kind == "enum":
                raise NotImplementedError(f"const {nested.name}: only numeric consts are supported")
            schema.consts.append((upper_snake_case(nested.name), getattr(node.const.value, value_kind)))
        elif kind == "struct":
            struct_nodes.append((nested.name, node))
        else:
            raise NotImplementedError(f"{nested.name}: {kind} declarations are not supported")
    for name, node in struct_nodes:
        if name == ROOT_STRUCT:
            _load_root(schema, node, names_by_id)
        else:
            schema.structs.append(_load_struct(name, node, names_by_id))
    _check_not_recursive(schema)
    return schema


def _load_struct(name: str, node: Any, names_by_id: dict[int, str]) -> StructModel:
    layout = node.struct
    if layout.discriminantCount or layout.isGroup or node.nestedNodes:
        raise NotImplementedError(f"struct {name}: unions, groups and nested declarations are not supported")
    fields = []
    for capnp_field in layout.fields:
        if capnp_field.which() != "slot":
            raise NotImplementedError(f"{name}.{capnp_field.name}: groups are not supported")
        fields.append(_load_field(name, capnp_field, names_by_id))
    if len({f.attr for f in fields}) != len(fields):
        raise NotImplementedError(f"struct {name}: two fields have the same snake_case name")
    return StructModel(name, node.id, layout.dataWordCount, layout.pointerCount, fields)


def _load_field(struct_name: str, capnp_field: Any, names_by_id: dict[int, str]) -> FieldModel:
    slot = capnp_field.slot
    where = f"{struct_name}.{capnp_field.name}"
    attr = snake_case(capnp_field.name)
    if keyword.iskeyword(attr) or attr in RESERVED_ATTRS:
        raise NotImplementedError(f"{where}: attribute name {attr!r} is reserved")
    kind = slot.type.which()
    type_name = None
    default: Union[int, float, bool] = 0
    if kind == "bool" or kind in PRIMITIVES:
        default = getattr(slot.defaultValue, kind)
        if kind.startswith("float") and default != 0:
            raise NotImplementedError(f"{where}: non-zero float defaults are not supported")
        if kind == "enum":
            type_name = names_by_id[slot.type.enum.typeId]
    elif kind in ("text", "data"):
        if slot.hadExplicitDefault:
            raise NotImplementedError(f"{where}: Text/Data defaults are not supported")
    elif kind == "list":
        element = slot.type.list.elementType
        if slot.hadExplicitDefault:
            raise NotImplementedError(f"{where}: list defaults are not supported")
        if element.which() == "data":
            kind = "data_list"
        elif element.which() == "struct":
            kind = "struct_list"
            type_name = names_by_id[element.struct.typeId]
        else:
            raise NotImplementedError(f"{where}: List({element.which()}) is not supported")
    else:
        raise NotImplementedError(f"{where}: {kind} fields are not supported")
    return FieldModel(attr, capnp_field.name, kind, slot.offset, default, type_name)


def _load_root(schema: Schema, node: Any, names_by_id: dict[int, str]) -> None:
    layout = node.struct
    schema.root_data_words = layout.dataWordCount
    schema.root_pointer_count = layout.pointerCount
    schema.root_discriminant_offset = layout.discriminantOffset
    members: dict[str, int] = {}
    pointer_slots = set()
    for capnp_field in layout.fields:
        if capnp_field.discriminantValue == 0xFFFF or capnp_field.which() != "slot":
            raise NotImplementedError(f"{ROOT_STRUCT}.{capnp_field.name}: the root must be a union of structs")
        if capnp_field.slot.type.which() != "struct":
            raise NotImplementedError(f"{ROOT_STRUCT}.{capnp_field.name}: union members must be structs")
        members[names_by_id[capnp_field.slot.type.struct.typeId]] = capnp_field.discriminantValue
        pointer_slots.add(capnp_field.slot.offset)
    if len(pointer_slots) != 1 or sorted(members.values()) != list(range(len(members))):
        raise NotImplementedError(f"{ROOT_STRUCT}: union members must share one pointer and be numbered 0..n-1")
    schema.root_member_pointer = pointer_slots.pop()
    schema.root_members = members


def _check_not_recursive(schema: Schema) -> None:
    """The decoder recurses once per nesting level; refuse recursive schemas instead of emitting a depth counter."""
    by_name = {s.name: s for s in schema.structs}
    members = schema.root_members

    def depth(name: str, seen: tuple[str, ...]) -> int:
        if name in seen:
            raise NotImplementedError(f"recursive struct {name}: the decoder would need a runtime depth limit")
        children = [f.type_name for f in by_name[name].fields if f.kind == "struct_list"]
        return 1 + max((depth(child, seen + (name,)) for child in children if child), default=0)

    for name, which in members.items():
        by_name[name].which = which
        if depth(name, ()) + 1 > MAX_DEPTH:
            raise NotImplementedError(f"{name}: nesting deeper than {MAX_DEPTH}")


# ---------------------------------------------------------------------------------------------------------------
# Code emission


@dataclass
class DataUnit:
    """One value read or written in a data section: a whole field, or a byte holding several bools."""

    byte: int
    fmt: str
    fields: list[FieldModel]

    @property
    def size(self) -> int:
        return struct.calcsize("<" + self.fmt)


def data_units(model: StructModel) -> list[DataUnit]:
    units: dict[int, DataUnit] = {}
    for f in model.fields:
        if f.kind == "bool":
            unit = units.setdefault(f.offset // 8, DataUnit(f.offset // 8, "B", []))
            if unit.fields and unit.fields[0].kind != "bool":
                raise NotImplementedError(f"{model.name}.{f.capnp_name}: overlapping data fields")
            unit.fields.append(f)
        elif f.kind in PRIMITIVES:
            size, fmt, _ = PRIMITIVES[f.kind]
            if f.offset * size in units:
                raise NotImplementedError(f"{model.name}.{f.capnp_name}: overlapping data fields")
            units[f.offset * size] = DataUnit(f.offset * size, fmt, [f])
    ordered = [units[byte] for byte in sorted(units)]
    for before, after in zip(ordered, ordered[1:]):
        if before.byte + before.size > after.byte:
            raise NotImplementedError(f"{model.name}: overlapping data fields")
    return ordered


def data_format(units: list[DataUnit]) -> str:
    fmt = "<"
    position = 0
    for unit in units:
        fmt += "x" * (unit.byte - position) + unit.fmt
        position = unit.byte + unit.size
    return fmt


def func_name(prefix: str, struct_name: str) -> str:
    return f"_{prefix}_{snake_case(struct_name)}"


def annotation(f: FieldModel) -> str:
    if f.kind == "bool":
        return "bool"
    if f.kind in PRIMITIVES:
        return PRIMITIVES[f.kind][2]
    return {"text": "str", "data": "bytes", "data_list": "list[bytes]"}.get(f.kind, f"list[{f.type_name}]")


def default_literal(f: FieldModel) -> str:
    if f.kind in ("data_list", "struct_list"):
        return "None"
    if f.kind == "bool":
        return repr(bool(f.default))
    if f.kind.startswith("float"):
        return "0.0"
    return {"text": '""', "data": 'b""'}.get(f.kind, repr(f.default))


class Emitter:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str = "", indent: int = 0) -> None:
        self.lines.append("    " * indent + line if line else "")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def emit_header(out: Emitter, schema: Schema) -> None:
    out(f"# Generated by scaler.fastpath.generate from {SCHEMA_LABEL}. Do not edit.")
    out('"""Message classes and their specialized Cap\'n Proto encoders/decoders (see scaler.fastpath.generate)."""')
    out()
    out("from __future__ import annotations")
    out()
    out("import struct")
    out("from enum import IntEnum")
    out("from typing import Callable, Optional")
    out()
    out("from scaler.fastpath.wire import (")
    for name in (
        "Blobs",
        "FieldInfo",
        "Reader",
        "as_list",
        "begin_struct_list",
        "bool_bit",
        "enum_repr",
        "read_data",
        "read_data_list",
        "read_text",
        "short_repr",
        "struct_list_at",
        "write_data",
        "write_data_list",
        "write_text",
    ):
        out(f"{name},", 1)
    out(")")
    out()
    public = [name for name, _ in schema.consts] + [name for name, _ in schema.enums]
    public += [model.name for model in schema.structs] + ["MESSAGE_TYPES"]
    out("__all__ = [")
    for name in public:
        out(f'"{name}",', 1)
    out("]")
    out()
    out("_new = object.__new__")
    out('_SEGMENT_SIZE = struct.Struct("<I")')
    for fmt in sorted({unit.fmt for s in schema.structs for unit in data_units(s)} - {"B"}):
        out(f'_UNIT_{fmt} = struct.Struct("<{fmt}")')
    out()
    for name, value in schema.consts:
        out(f"{name} = {value!r}")
    out()


def emit_enum(out: Emitter, name: str, members: list[tuple[str, int]]) -> None:
    out()
    out(f"class {name}(IntEnum):")
    for member, value in members:
        out(f"{member} = {value}", 1)
    out()


def emit_class(out: Emitter, model: StructModel) -> None:
    top_level = model.which is not None
    attrs = [f.attr for f in model.fields] + (["raw"] if top_level else [])
    out()
    out(f"class {model.name}:")
    out(f'"""Cap\'n Proto struct {model.name} (@0x{model.type_id:016x}), see {SCHEMA_LABEL}."""', 1)
    out()
    out("__slots__ = (", 1)
    for attr in attrs:
        out(f'"{attr}",', 2)
    out(")", 1)
    if top_level:
        out(f"WHICH = {model.which}", 1)
    out()
    for f in model.fields:
        out(f"{f.attr}: {annotation(f)}", 1)
    if top_level:
        out("raw: Optional[bytes]  # the whole encoded message this was decoded from; not part of eq/repr", 1)
    out()
    params = []
    for f in model.fields:
        hint = annotation(f)
        hint = f"Optional[{hint}]" if f.kind in ("data_list", "struct_list") else hint
        params.append(f"{f.attr}: {hint} = {default_literal(f)}")
    out("def __init__(", 1)
    out("self,", 2)
    if params:
        out("*,", 2)
    for param in params:
        out(f"{param},", 2)
    out(") -> None:", 1)
    for f in model.fields:
        if f.kind in ("data_list", "struct_list"):
            out(f"self.{f.attr} = [] if {f.attr} is None else {f.attr}", 2)
        else:
            out(f"self.{f.attr} = {f.attr}", 2)
    if top_level:
        out("self.raw = None", 2)
    if not attrs:
        out("pass", 2)
    out()
    out("def __eq__(self, other: object) -> bool:", 1)
    out(f"if type(other) is not {model.name}:", 2)
    out("return NotImplemented", 3)
    if not model.fields:
        out("return True", 2)
    else:
        out("return (", 2)
        for index, f in enumerate(model.fields):
            out(f"{'and ' if index else ''}self.{f.attr} == other.{f.attr}", 3)
        out(")", 2)
    out()
    out("def __repr__(self) -> str:", 1)
    out("return (", 2)
    out(f'"{model.name}("', 3)
    for index, f in enumerate(model.fields):
        value = f"enum_repr({f.type_name}, self.{f.attr})" if f.kind == "enum" else f"short_repr(self.{f.attr})"
        out(f'+ "{", " if index else ""}{f.attr}=" + {value}', 3)
    out('+ ")"', 3)
    out(")", 2)
    out()


def emit_read(out: Emitter, model: StructModel) -> None:
    units = data_units(model)
    full_size = units[-1].byte + units[-1].size if units else 0
    out()
    out(
        f"def {func_name('read', model.name)}(r: Reader, lo: int, hi: int, d: int, dn: int, p: int, pn: int) -> "
        f"{model.name}:"
    )
    if units:
        out("buf = r.buf", 1)
    out(f"obj = _new({model.name})", 1)
    if units:
        names = [f"u{index}" for index in range(len(units))]
        # One unpack when the peer's data section is at least as big as ours, else field by field (older peers).
        indent = 1
        if len(units) > 1:
            out(f"if dn >= {full_size}:", 1)
            out(f"{', '.join(names)} = _DATA_{upper_snake_case(model.name)}.unpack_from(buf, d)", 2)
            out("else:", 1)
            indent = 2
        for name, unit in zip(names, units):
            zero = "0.0" if unit.fmt in "fd" else "0"
            at = f"d + {unit.byte}" if unit.byte else "d"
            value = f"buf[{at}]" if unit.fmt == "B" else f"_UNIT_{unit.fmt}.unpack_from(buf, {at})[0]"
            out(f"{name} = {value} if dn >= {unit.byte + unit.size} else {zero}", indent)
        for name, unit in zip(names, units):
            for f in unit.fields:
                if f.kind == "bool":
                    bit = 1 << (f.offset % 8)
                    out(f"obj.{f.attr} = ({name} & {bit}) {'==' if f.default else '!='} 0", 1)
                elif f.default:
                    out(f"obj.{f.attr} = {name} ^ {f.default}", 1)
                else:
                    out(f"obj.{f.attr} = {name}", 1)
    for f in model.fields:
        if f.kind not in POINTER_KINDS:
            continue
        at = f"p + {f.offset * 8}" if f.offset else "p"
        reader = {
            "text": ("read_text", '""'),
            "data": ("read_data", 'b""'),
            "data_list": ("read_data_list", "[]"),
        }.get(f.kind, (func_name("read_list", f.type_name or ""), "[]"))
        out(f"obj.{f.attr} = {reader[0]}(r, lo, hi, {at}) if pn > {f.offset} else {reader[1]}", 1)
    if model.which is not None:
        out("obj.raw = None", 1)
    out("return obj", 1)
    out()


def emit_read_list(out: Emitter, model: StructModel) -> None:
    out()
    out(f"def {func_name('read_list', model.name)}(r: Reader, lo: int, hi: int, at: int) -> list[{model.name}]:")
    out(f"items: list[{model.name}] = []", 1)
    out("found = struct_list_at(r, lo, hi, at)", 1)
    out("if found is not None:", 1)
    out("lo, hi, pos, count, step, dn, pn = found", 2)
    out("for _ in range(count):", 2)
    out(f"items.append({func_name('read', model.name)}(r, lo, hi, pos, dn, pos + dn, pn))", 3)
    out("pos += step", 3)
    out("return items", 1)
    out()


def bool_bits_expression(f: FieldModel) -> str:
    bit = f.offset % 8
    stored_if_true = 0 if f.default else 1 << bit
    stored_if_false = (1 << bit) if f.default else 0
    shift = f" << {bit}" if bit else ""
    fallback = f"(bool_bit(v) ^ 1){shift}" if f.default else f"bool_bit(v){shift}"
    return f"{stored_if_true} if v is True else {stored_if_false} if v is False else {fallback}"


def emit_fill(out: Emitter, model: StructModel) -> None:
    units = data_units(model)
    out()
    out(f"def {func_name('fill', model.name)}(buf: bytearray, blobs: Blobs, start: int, obj: {model.name}) -> None:")
    names = [f"u{index}" for index in range(len(units))]
    for name, unit in zip(names, units):
        if unit.fields[0].kind == "bool":
            for index, f in enumerate(unit.fields):
                out(f"v = obj.{f.attr}", 1)
                out(f"{name} {'|=' if index else '='} {bool_bits_expression(f)}", 1)
    if units:
        values = []
        for name, unit in zip(names, units):
            f = unit.fields[0]
            if f.kind == "bool":
                values.append(name)
            elif f.default:
                values.append(f"obj.{f.attr} ^ {f.default}")
            else:
                values.append(f"obj.{f.attr}")
        call = f"_DATA_{upper_snake_case(model.name)}.pack_into(buf, start, {', '.join(values)})"
        if len(call) <= 100:
            out(call, 1)
        else:
            out(f"_DATA_{upper_snake_case(model.name)}.pack_into(", 1)
            out("buf,", 2)
            out("start,", 2)
            for value in values:
                out(f"{value},", 2)
            out(")", 1)
    for f in model.fields:
        if f.kind not in POINTER_KINDS:
            continue
        at = model.data_words * 8 + f.offset * 8
        writer = {"text": "write_text", "data": "write_data", "data_list": "write_data_list"}.get(
            f.kind, func_name("write_list", f.type_name or "")
        )
        blobs = "" if f.kind == "text" else "blobs, "
        out(f"{writer}(buf, {blobs}start + {at}, obj.{f.attr})", 1)
    if not units and not any(f.kind in POINTER_KINDS for f in model.fields):
        out("pass", 1)
    out()


def emit_write_list(out: Emitter, model: StructModel) -> None:
    size = (model.data_words + model.pointer_count) * 8
    out()
    params = f"buf: bytearray, blobs: Blobs, at: int, items: list[{model.name}]"
    out(f"def {func_name('write_list', model.name)}({params}) -> None:")
    out("if items.__class__ is not list:", 1)
    out("items = as_list(items)", 2)
    out("if items:", 1)
    out(f"pos = begin_struct_list(buf, at, len(items), {model.data_words}, {model.pointer_count})", 2)
    out("for item in items:", 2)
    out(f"if item.__class__ is not {model.name}:", 3)
    out(f'raise TypeError("expected {model.name}, got " + type(item).__name__)', 4)
    out(f"{func_name('fill', model.name)}(buf, blobs, pos, item)", 3)
    out(f"pos += {size}", 3)
    out()


def message_prefix(schema: Schema, model: StructModel) -> bytes:
    """Segment table (size patched later), root pointer, the root union struct, and the zeroed member struct."""
    root_words = schema.root_data_words + schema.root_pointer_count
    prefix = bytearray(8 + 8 + root_words * 8 + (model.data_words + model.pointer_count) * 8)
    struct.pack_into("<iHH", prefix, 8, 0, schema.root_data_words, schema.root_pointer_count)
    struct.pack_into("<H", prefix, 16 + schema.root_discriminant_offset * 2, model.which)
    member_at = 16 + schema.root_data_words * 8 + schema.root_member_pointer * 8
    body = 16 + root_words * 8
    body_words = model.data_words + model.pointer_count
    offset_bits = (body - member_at - 8) >> 1 if body_words else -4  # -4: offset -1, the empty-struct convention
    struct.pack_into("<iHH", prefix, member_at, offset_bits, model.data_words, model.pointer_count)
    return bytes(prefix)


def emit_encode(out: Emitter, schema: Schema, model: StructModel) -> None:
    prefix = message_prefix(schema, model)
    body = len(prefix) - (model.data_words + model.pointer_count) * 8
    const = f"_PREFIX_{upper_snake_case(model.name)}"
    out()
    out(f'{const} = bytes.fromhex("{prefix[:body].hex()}") + bytes({len(prefix) - body})')
    out()
    out()
    out(f"def {func_name('encode', model.name)}(buf: bytearray, blobs: Blobs, msg: {model.name}) -> None:")
    out("base = len(buf)", 1)
    out(f"buf += {const}", 1)
    out(f"{func_name('fill', model.name)}(buf, blobs, base + {body}, msg)", 1)
    out("_SEGMENT_SIZE.pack_into(buf, base + 4, (len(buf) - base - 8) >> 3)", 1)
    out()


def emit_tables(out: Emitter, schema: Schema, top_level: list[StructModel]) -> None:
    out()
    out(f"ROOT_DISCRIMINANT_BYTE = {schema.root_discriminant_offset * 2}")
    out(f"ROOT_MEMBER_POINTER_BYTE = {schema.root_member_pointer * 8}")
    out()
    out("MESSAGE_TYPES = (")
    for model in top_level:
        out(f"{model.name},", 1)
    out(")")
    out()
    out("BODY_READERS: tuple[Callable[[Reader, int, int, int, int, int, int], object], ...] = (")
    for model in top_level:
        out(f"{func_name('read', model.name)},", 1)
    out(")")
    out()
    out("ENCODERS: dict[type, Callable[[bytearray, Blobs, object], None]] = {")
    for model in top_level:
        out(f"{model.name}: {func_name('encode', model.name)},", 1)
    out("}")
    out()
    out("FIELDS: dict[type, tuple[FieldInfo, ...]] = {")
    for model in schema.structs:
        out(f"{model.name}: (", 1)
        for f in model.fields:
            ref = f.type_name if f.kind in ("enum", "struct_list") else None
            out(f'FieldInfo("{f.attr}", "{f.capnp_name}", "{f.kind}", {ref}),', 2)
        out("),", 1)
    out("}")


def render(schema_path: Path = SCHEMA_PATH) -> str:
    schema = load_schema(schema_path)
    out = Emitter()
    emit_header(out, schema)
    for name, members in schema.enums:
        emit_enum(out, name, members)
    for model in schema.structs:
        emit_class(out, model)
    for model in schema.structs:
        units = data_units(model)
        if units:
            out(f'_DATA_{upper_snake_case(model.name)} = struct.Struct("{data_format(units)}")')
    out()
    listed = {f.type_name for s in schema.structs for f in s.fields if f.kind == "struct_list"}
    for model in schema.structs:
        emit_read(out, model)
        if model.name in listed:
            emit_read_list(out, model)
        emit_fill(out, model)
        if model.name in listed:
            emit_write_list(out, model)
    top_level = sorted((s for s in schema.structs if s.which is not None), key=lambda s: s.which or 0)
    for model in top_level:
        emit_encode(out, schema, model)
    emit_tables(out, schema, top_level)
    return out.text()


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed file is out of date")
    args = parser.parse_args(argv)
    code = render()
    if args.check:
        current = OUTPUT_PATH.read_text() if OUTPUT_PATH.exists() else ""
        if current != code:
            print(f"{OUTPUT_PATH} is out of date; run python3 -m scaler.fastpath.generate", file=sys.stderr)
            return 1
        return 0
    OUTPUT_PATH.write_text(code)
    print(f"wrote {OUTPUT_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
