"""Code generation for the message classes and the general reader, which reads any valid encoding of a message.

The general reader (``_read_*``) follows the Cap'n Proto encoding spec: several segments, far pointers, structs
bigger or smaller than ours (newer and older peers), lists of another element size where the spec allows it, all
within a traversal budget. decode_frame uses it for what the canonical fast reader (emit_fast) does not take.
"""

from __future__ import annotations

import re

from tools.fastpath_codegen.schema import (
    POINTER_KINDS,
    PRIMITIVES,
    SCHEMA_LABEL,
    DataUnit,
    FieldModel,
    StructModel,
    data_units,
    snake_case,
    upper_snake_case,
)


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
        return "\n".join(declare_reused_locals(self.lines)) + "\n"


# Names the generated functions reuse for values of several types (a field's value, then another's; the elements of
# one list, then of another): each function declares the ones it assigns, so that mypy does not take the first type.
REUSED_LOCAL = re.compile(r"^\s+(?:for\s+)?(v|el\d+|items\d+|words\d+)\s+(?:=|in)\s")


def declare_reused_locals(lines: list[str]) -> list[str]:
    """``lines`` with ``name: Any`` or ``name: list`` after each top-level ``def`` for the REUSED_LOCAL names its body
    assigns. A bare annotation in a function body is never evaluated: the generated code runs as fast as without."""
    result: list[str] = []
    body: list[str] = []

    def close() -> None:
        names = sorted({match.group(1) for line in body for match in [REUSED_LOCAL.match(line)] if match})
        if body and names:
            # declarations go after the signature (a def line, or the closing line of a signature split over several)
            at = next(index for index, line in enumerate(body) if line.endswith(":")) + 1
            kinds = [f"    {name}: {'list' if name[0] in 'iw' else 'Any'}" for name in names]
            body[at:at] = kinds
        result.extend(body)
        body.clear()

    for line in lines:
        if line and not line[0].isspace() and not line.startswith(")"):
            close()
            if line.startswith("def "):
                body.append(line)
                continue
            result.append(line)
        elif body:
            body.append(line)
        else:
            result.append(line)
    close()
    return result


def emit_enum(out: Emitter, name: str, members: list[tuple[str, int]]) -> None:
    out()
    out(f"class {name}(IntEnum):")
    for member, value in members:
        out(f"{member} = {value}", 1)
    out()


def emit_class(out: Emitter, model: StructModel, unread_when_routing: tuple[str, ...] = ()) -> None:
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
        routing = "  # None when read by decode_frame_for_routing" if f.capnp_name in unread_when_routing else ""
        out(f"{f.attr}: {annotation(f)}{routing}", 1)
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
        emit_data_fields(out, units, names, "obj", 1)
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


def emit_data_fields(out: Emitter, units: list[DataUnit], names: list[str], obj: str, indent: int) -> None:
    """Assign the fields of a data section from its unpacked units (named ``names``) to ``obj``."""
    for name, unit in zip(names, units):
        inner = indent
        if unit.fields[0].kind == "bool" and len(unit.fields) > 1:  # a 0 byte: every flag at its default
            out(f"if not {name}:", indent)
            for f in unit.fields:
                out(f"{obj}.{f.attr} = {bool(f.default)}", indent + 1)
            out("else:", indent)
            inner = indent + 1
        for f in unit.fields:
            if f.kind == "bool":
                bit = 1 << (f.offset % 8)
                out(f"{obj}.{f.attr} = ({name} & {bit}) {'==' if f.default else '!='} 0", inner)
            elif f.default:
                out(f"{obj}.{f.attr} = {name} ^ {f.default}", indent)
            else:
                out(f"{obj}.{f.attr} = {name}", indent)
