"""The schema as the generator sees it: structs, fields and their compiled layout, read from scaler.capnp by pycapnp.

Only the schema features Scaler uses are supported; anything else fails here, loudly, rather than producing a wrong
codec. Used by the build tool (tools.fastpath_codegen.generate) only, never at run time.
"""

from __future__ import annotations

import keyword
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

REPO_ROOT = Path(__file__).resolve().parents[2]  # tools/fastpath_codegen/schema.py
SCHEMA_PATH = REPO_ROOT / "scaler" / "protocol" / "scaler.capnp"
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


def message_prefix(schema: Schema, model: StructModel) -> bytes:
    """Segment table (size left 0), root pointer, the root union struct, and the zeroed member struct."""
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
