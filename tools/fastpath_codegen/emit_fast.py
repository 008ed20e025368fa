"""Code generation for the canonical layout: one encoder and one fast reader per message type.

The canonical layout is what our encoder writes and what pycapnp writes into a single segment: the root struct, then
every object in pre-order, each starting exactly where the previous one ended, structs exactly the size our schema
gives them. Only Data at least BLOB_THRESHOLD long may instead follow all the other objects, in the same order (see
wire.BLOB_THRESHOLD).

The fast reader checks that a message is laid out exactly so while it reads it: every pointer must point at the
cursor (the end of the previous object), and the last object must end where the message ends. That one comparison
per pointer replaces bounds checks and the traversal budget (objects that follow each other cannot alias), so the
generated code is flat: one ``unpack_from`` per struct (``iter_unpack`` over a list of structs on CPython), a slice
per Data, no helper calls. Anything else, valid or not, raises NotCanonical and decode_frame hands the message to the
general reader (``_read_*``), which reads every valid layout and names what is wrong with an invalid one. Both
readers must agree on every message the fast one accepts; tests/protocol/test_fast_reader.py checks that on fuzzed
frames.

The encoder computes each pointer from the running position ``c`` (bytes from the start of the message, segment
table included) while it appends each child's bytes to ``parts``, then packs each struct with one ``pack`` call. It
only checks what ``pack`` and ``b"".join`` do not; codec.encode re-checks a failure slowly to name the field.
"""

from __future__ import annotations

from typing import Optional

from scaler.fastpath.wire import BLOB_THRESHOLD
from tools.fastpath_codegen.emit_general import Emitter, bool_bits_expression, emit_data_fields, func_name
from tools.fastpath_codegen.schema import (
    POINTER_KINDS,
    FieldModel,
    Schema,
    StructModel,
    data_units,
    message_prefix,
    upper_snake_case,
)

# What the routing readers store for a field they leave unread; the class annotates the field with the type it has
# when read, which is what every other reader of the field needs to see.
UNREAD = "None  # type: ignore[assignment]"

Models = dict[str, StructModel]  # every struct of the schema by name


def header_bytes(schema: Schema) -> int:
    """Bytes before a message's body: segment table, root pointer, the root struct (the union of message types)."""
    return 16 + (schema.root_data_words + schema.root_pointer_count) * 8


def section_format(model: StructModel) -> str:
    """struct format of a struct's data section (padded to whole words) and pointers (each as low, high)."""
    units = data_units(model)
    fmt = ""
    position = 0
    for unit in units:
        fmt += "x" * (unit.byte - position) + unit.fmt
        position = unit.byte + unit.size
    fmt += "x" * (model.data_words * 8 - position)
    return fmt + "iI" * model.pointer_count


def element_words(model: StructModel) -> int:
    return model.data_words + model.pointer_count


def pointer_fields(model: StructModel) -> list[FieldModel]:
    return [f for f in model.fields if f.kind in POINTER_KINDS]


def may_hold_blobs(model: StructModel, by_name: Models) -> bool:
    for f in model.fields:
        if f.kind in ("data", "data_list"):
            return True
        if f.kind == "struct_list" and may_hold_blobs(by_name[f.type_name or ""], by_name):
            return True
    return False


# Pointer fields of top-level messages that are empty in nearly every message sent (a performance hint, never a
# rule: any value still encodes and decodes). When such fields end a message's pointer section, the encoder tests
# them all at once and packs the message without them, and the fast reader compares their pointers, read as one
# bytes value, with zeros. Names the schema lacks are ignored.
USUALLY_EMPTY = {"Task": ("dependencies", "parentTaskId", "serializerId", "resources")}
EMPTY_VALUES = {"text": '""', "data": 'b""', "data_list": "[]", "struct_list": "[]"}

# Fields that a peer forwarding a message's bytes untouched does not read. Its routing reader (``*_for_routing``)
# checks them exactly as the fast reader does, so both accept and refuse the same messages, but builds nothing and
# leaves them None. The scheduler forwards a Task's arguments as they came: under PyPy, building an Argument object
# and a slice per argument was a quarter of its Task decode.
UNREAD_WHEN_ROUTING = {"Task": ("args",)}


def cold_tail(model: StructModel) -> list[FieldModel]:
    """The usually-empty pointer fields that end ``model``'s pointer section (at least two), else none."""
    names = USUALLY_EMPTY.get(model.name, ())
    tail: list[FieldModel] = []
    for f in reversed(pointer_fields(model)):
        if f.capnp_name not in names or f.offset != model.pointer_count - 1 - len(tail):
            break
        tail.insert(0, f)
    return tail if len(tail) >= 2 else []


def message_format(schema: Schema, model: StructModel, cold_code: str = "") -> str:
    """struct format of a message up to the end of its body; ``cold_code`` stands for the pointers of its cold tail."""
    fmt = f"<II{header_bytes(schema) - 8}s{section_format(model)}"
    tail = len(cold_tail(model))
    return fmt[: len(fmt) - 2 * tail] + cold_code.format(8 * tail) if cold_code and tail else fmt


def emit_constants(out: Emitter, schema: Schema, structs: list[StructModel], top_level: list[StructModel]) -> None:
    listed = {f.type_name for s in structs for f in s.fields if f.kind == "struct_list"}
    for model in structs:
        if model.name in listed:
            out(f'_CANON_{upper_snake_case(model.name)} = struct.Struct("<{section_format(model)}")')
    for model in top_level:
        name = upper_snake_case(model.name)
        header = header_bytes(schema)
        out(f'_HEAD_{name} = bytes.fromhex("{message_prefix(schema, model)[8:header].hex()}")')
        out(f'_MESSAGE_{name} = struct.Struct("{message_format(schema, model)}")')
        tail = cold_tail(model)
        if tail:
            out(f'_EMPTY_TAIL_{name} = struct.Struct("{message_format(schema, model, "{}x")}")')
            out(f'_HEADER_{name} = struct.Struct("{message_format(schema, model, "{}s")}")')
            out(f'_TAIL_{name} = struct.Struct("<{"iI" * len(tail)}")')
            out(f"_NULL_TAIL_{name} = bytes({8 * len(tail)})")
    out()


class Position:
    """Where a pointer is, as ``var + const`` bytes from the start of the message (var None for fixed places)."""

    def __init__(self, var: Optional[str], const: int) -> None:
        self.var = var
        self.const = const

    def plus(self, extra: int) -> Position:
        return Position(self.var, self.const + extra)

    def __str__(self) -> str:
        if self.var is None:
            return str(self.const)
        return f"{self.var} + {self.const}" if self.const else self.var

    def cursor_offset(self) -> str:
        """Expression: the low word of a list pointer here that points at the cursor ``c``.

        That is (c - (here + 8)) / 8 words, shifted left by 2, plus 1 (the list kind): since c - (here + 8) is a
        multiple of 8, (c - (here + 6)) >> 1 is the same number in two operations fewer.
        """
        var = f" - {self.var}" if self.var else ""
        return f"c{var} - {self.const + 6} >> 1"

    def points_at_cursor(self, low: str, holds: bool = True) -> str:
        """Condition: the pointer low word ``low`` here points (or, ``holds`` false, does not) at the cursor.

        That is cursor_offset() == low, both sides doubled: additions and comparisons of small ints have specialized
        bytecodes in CPython 3.11, shifts do not.
        """
        var = f" - {self.var}" if self.var else ""
        return f"{low} + {low} {'==' if holds else '!='} c{var} - {self.const + 6}"


# ---------------------------------------------------------------------------------------------------------------
# Fast readers


def emit_fast_reader(out: Emitter, schema: Schema, model: StructModel, by_name: Models, routing: bool = False) -> None:
    """The fast reader of a message; with ``routing``, the variant that leaves UNREAD_WHEN_ROUTING fields None."""
    name = upper_snake_case(model.name)
    unread = UNREAD_WHEN_ROUTING.get(model.name, ()) if routing else ()
    units = data_units(model)
    unit_names = [f"u{index}" for index in range(len(units))]
    pointer_names = [(f"a{index}", f"b{index}") for index in range(model.pointer_count)]
    tail = cold_tail(model)
    words = [word for pair in pointer_names[: model.pointer_count - len(tail)] for word in pair]
    targets = ["segments", "words", "head", *unit_names, *words, *(["tail"] if tail else [])]
    out()
    suffix = "_for_routing" if routing else ""
    out(f"def {func_name('decode', model.name)}{suffix}(frame: bytes, pos: int) -> {model.name}:")
    out(f"{', '.join(targets)} = _{'HEADER' if tail else 'MESSAGE'}_{name}.unpack_from(frame, pos)", 1)
    out(f"if segments or head != _HEAD_{name}:", 1)
    out("raise NotCanonical", 2)
    out("size = words * 8 + 8", 1)
    out("if pos or size != len(frame):  # not the frame's only message", 1)
    out("m = frame[pos : pos + size]", 2)
    out("if len(m) != size:", 2)
    out("raise NotCanonical  # truncated", 3)
    out("else:", 1)
    out("m = frame", 2)
    out(f"obj = _new({model.name})", 1)
    emit_data_fields(out, units, unit_names, "obj", 1)
    end = header_bytes(schema) + element_words(model) * 8
    fields = pointer_fields(model)
    if not fields:
        out(f"if size != {end}:", 1)
        out("raise NotCanonical", 2)
    else:
        out(f"c = {end}", 1)
        blobs = may_hold_blobs(model, by_name)
        if blobs:
            out("blobs = None", 1)
        pointers = Position(None, header_bytes(schema) + model.data_words * 8)
        for f in fields:
            indent = 1
            if tail and f is tail[0]:
                out(f"if tail == _NULL_TAIL_{name}:", 1)
                for g in tail:
                    out(f"obj.{g.attr} = {UNREAD if g.capnp_name in unread else EMPTY_VALUES[g.kind]}", 2)
                out("else:", 1)
                tail_words = [word for g in tail for word in pointer_names[g.offset]]
                out(f"{', '.join(tail_words)} = _TAIL_{name}.unpack(tail)", 2)
            if f in tail:
                indent = 2
            a, b = pointer_names[f.offset]
            target = None if f.capnp_name in unread else "obj." + f.attr + " = {}"
            emit_read_pointer(out, f, a, b, pointers.plus(8 * f.offset), target, 1, indent, by_name)
            if target is None:
                out(f"obj.{f.attr} = {UNREAD}", indent)
        if blobs:
            out("if blobs is not None:", 1)
            out("c = end_of_blobs(blobs, c)", 2)
        out("if c != size:", 1)
        out("raise NotCanonical", 2)
    out("obj.raw = m", 1)
    out("return obj", 1)
    out()


def emit_read_pointer(
    out: Emitter,
    f: FieldModel,
    a: str,
    b: str,
    at: Position,
    target: Optional[str],
    depth: int,
    indent: int,
    by_name: Models,
) -> None:
    """Read the field whose pointer words are ``a``, ``b`` (at ``at``) and store it with ``target.format(value)``.

    With ``target`` None, only check the field as its reading would, building nothing (see UNREAD_WHEN_ROUTING).
    """
    kind = f.kind
    out(f"if {b}:", indent)
    if kind == "data":
        emit_read_data(out, a, b, at, target, indent + 1)
    elif kind == "text":
        out(f"n = {b} >> 3", indent + 1)
        out(f"if {at.points_at_cursor(a, False)} or {b} & 7 != 2 or not n or m[c + n - 1]:", indent + 1)
        out("raise NotCanonical", indent + 2)
        if target is None:
            out("m[c : c + n - 1].decode()  # refused as the fast reader would: UnicodeDecodeError", indent + 1)
        else:
            out(target.format("m[c : c + n - 1].decode()"), indent + 1)
        out("c += n + 7 & -8", indent + 1)
    elif kind == "data_list":
        at_var, items, x, y = f"at{depth}", f"items{depth}", f"x{depth}", f"y{depth}"
        out(f"if {at.points_at_cursor(a, False)} or {b} & 7 != 6:", indent + 1)
        out("raise NotCanonical", indent + 2)
        out(f"{at_var} = c", indent + 1)
        out(f"c += {b} >> 3 << 3", indent + 1)
        if target is not None:
            out(f"{items} = []", indent + 1)
        out(f"for {at_var} in range({at_var}, c, 8):", indent + 1)
        out(f"{x}, {y} = _POINTER.unpack_from(m, {at_var})", indent + 2)
        out(f"if {y}:", indent + 2)
        item = None if target is None else items + ".append({})"
        emit_read_data(out, x, y, Position(at_var, 0), item, indent + 3)
        out(f"elif {x}:", indent + 2)
        out("raise NotCanonical", indent + 3)
        if target is not None:
            out("else:", indent + 2)
            out(f'{items}.append(b"")', indent + 3)
            out(target.format(items), indent + 1)
    else:
        emit_read_struct_list(out, by_name[f.type_name], a, b, at, target, depth, indent + 1, by_name)
    out(f"elif {a}:", indent)
    out("raise NotCanonical", indent + 1)
    if target is not None:
        out("else:", indent)
        out(target.format(EMPTY_VALUES[kind]), indent + 1)


def emit_read_data(out: Emitter, a: str, b: str, at: Position, target: Optional[str], indent: int) -> None:
    """A non-null Data pointer: at the cursor, or a big Data placed after everything else (checked at the end)."""
    out(f"n = {b} >> 3", indent)
    out(f"if {at.points_at_cursor(a)} and {b} & 7 == 2:", indent)
    if target is not None:
        out(target.format("m[c : c + n]"), indent + 1)
    out("c += n + 7 & -8", indent + 1)
    out(f"elif n >= {BLOB_THRESHOLD} and {b} & 7 == 2 and {a} & 3 == 1:", indent)
    out(f"s = {at.plus(8)} + ({a} >> 2 << 3)", indent + 1)
    if target is not None:
        out(target.format("m[s : s + n]"), indent + 1)
    out("blobs = defer_blob(blobs, s, n)", indent + 1)
    out("else:", indent)
    out("raise NotCanonical", indent + 1)


def emit_read_struct_list(
    out: Emitter,
    element: StructModel,
    a: str,
    b: str,
    at: Position,
    target: Optional[str],
    depth: int,
    indent: int,
    by_name: Models,
) -> None:
    words = element_words(element)
    if not words:
        out("raise NotCanonical  # zero-sized elements: the general reader charges them to its budget", indent)
        return
    e, items, el = f"e{depth}", f"items{depth}", f"el{depth}"
    units = data_units(element)
    unit_names = [f"u{depth}_{index}" for index in range(len(units))]
    pointer_names = [(f"a{depth}_{index}", f"b{depth}_{index}") for index in range(element.pointer_count)]
    targets = [*unit_names, *(name for pair in pointer_names for name in pair)]
    tag_high = element.data_words | element.pointer_count << 16
    out(f"if {at.points_at_cursor(a, False)} or {b} & 7 != 7:", indent)
    out("raise NotCanonical", indent + 1)
    out("t, u = _POINTER_BITS.unpack_from(m, c)", indent)
    out(f"if t & 3 or u != {tag_high} or (t >> 2) * {words} != {b} >> 3:", indent)
    out("raise NotCanonical", indent + 1)
    out(f"{e} = c + 8", indent)
    out(f"c = {e} + ({b} >> 3 << 3)", indent)
    build = target is not None
    if build:
        out(f"{items} = []", indent)
    body = Emitter()
    if build:
        body(f"{el} = _new({element.name})")
        emit_data_fields(body, units, unit_names, el, 0)
    pointers = Position(e, element.data_words * 8)
    for f in pointer_fields(element):
        pa, pb = pointer_names[f.offset]
        element_target = el + "." + f.attr + " = {}" if build else None
        emit_read_pointer(body, f, pa, pb, pointers.plus(8 * f.offset), element_target, depth + 1, 0, by_name)
    if build:
        body(f"{items}.append({el})")
    elif not body.lines:
        body("pass")
    canon = f"_CANON_{upper_snake_case(element.name)}"
    loop_targets = ", ".join(targets) + ("," if len(targets) == 1 else "") if targets else "_"
    # The same loop twice: CPython runs iter_unpack's C iterator fastest, PyPy's JIT one unpack_from per element.
    out("if ITER_UNPACK:", indent)
    out(f"for {loop_targets} in {canon}.iter_unpack(m[{e} : c]):", indent + 1)
    emit_lines(out, body, indent + 2)
    out(f"{e} += {words * 8}", indent + 2)
    out("else:", indent)
    out(f"for {e} in range({e}, c, {words * 8}):", indent + 1)
    if targets:
        out(f"{loop_targets} = {canon}.unpack_from(m, {e})", indent + 2)
    emit_lines(out, body, indent + 2)
    if build:
        out(target.format(items), indent)


def emit_lines(out: Emitter, block: Emitter, indent: int) -> None:
    """Emit the lines of ``block`` (emitted at indent 0) at ``indent``."""
    for line in block.lines:
        out(line, indent if line else 0)


# ---------------------------------------------------------------------------------------------------------------
# Encoders


def emit_encoder(out: Emitter, schema: Schema, model: StructModel, by_name: Models) -> None:
    """The encoder of a message: appends the message's parts to a list and returns its size in bytes."""
    name = upper_snake_case(model.name)
    end = header_bytes(schema) + element_words(model) * 8
    out()
    out(f"def {func_name('encode', model.name)}(msg: {model.name}, parts: list) -> int:")
    fields = pointer_fields(model)
    values = emit_data_values(out, model, "msg", "u", 1)
    args = ["0", "c - 8 >> 3" if fields else str((end - 8) >> 3), f"_HEAD_{name}", *values]
    args += [name for index in range(model.pointer_count) for name in pointer_value_names(model, index, "a", "b")]
    if not fields:
        emit_call(out, f"parts.append(_MESSAGE_{name}.pack(", args, 1, "))")
        out(f"return {end}", 1)
        out()
        return
    out("base = len(parts)", 1)
    out('parts.append(b"")', 1)
    out(f"c = {end}", 1)
    blobs = may_hold_blobs(model, by_name)
    if blobs:
        out("blobs = None", 1)
    pointers = Position(None, header_bytes(schema) + model.data_words * 8)
    tail = cold_tail(model)
    if not tail:
        emit_write_pointers(out, model, pointers, "msg", 0, 1, by_name)
        emit_call(out, f"parts[base] = _MESSAGE_{name}.pack(", args, 1)
    else:
        emit_write_pointers(out, model, pointers, "msg", 0, 1, by_name, fields[: -len(tail)])
        tests = []
        for f in tail:
            value = f"msg.{f.attr}"
            if f.kind in ("data_list", "struct_list"):
                tests.append(f"{value}.__class__ is list and not {value}")
            else:  # CPython keeps one empty bytes and one empty str; anything else takes the general path
                tests.append(f"{value} is {'_EMPTY_TEXT' if f.kind == 'text' else '_EMPTY_DATA'}")
        emit_condition(out, tests, 1)
        emit_call(out, f"parts[base] = _EMPTY_TAIL_{name}.pack(", args[: len(args) - 2 * len(tail)], 2)
        out("else:", 1)
        emit_write_pointers(out, model, pointers, "msg", 0, 2, by_name, tail)
        emit_call(out, f"parts[base] = _MESSAGE_{name}.pack(", args, 2)
    if blobs:
        out("if blobs is not None:", 1)
        out("return place_blobs(parts, base, blobs, c)", 2)
    out("return c", 1)
    out()


def emit_write_pointers(
    out: Emitter,
    model: StructModel,
    pointers: Position,
    src: str,
    depth: int,
    indent: int,
    by_name: Models,
    fields: Optional[list[FieldModel]] = None,
) -> None:
    """Lay out the pointer fields of ``src`` (``fields``, by default all) at the cursor, leaving their pointer words
    in locals."""
    suffix = f"{depth}_" if depth else ""
    for f in pointer_fields(model) if fields is None else fields:
        a, b = f"a{suffix}{f.offset}", f"b{suffix}{f.offset}"
        at = pointers.plus(8 * f.offset)
        value = f"{src}.{f.attr}"
        if f.kind == "data":
            emit_write_data_field(out, a, b, at, value, indent)
        elif f.kind == "text":
            emit_write_text_field(out, a, b, at, value, indent)
        elif f.kind == "data_list":
            emit_write_data_list(out, a, b, at, value, depth + 1, indent)
        else:
            emit_write_struct_list(out, by_name[f.type_name], a, b, at, value, depth + 1, indent, by_name)


def pointer_value_names(model: StructModel, index: int, a: str, b: str) -> tuple[str, str]:
    """Names of the pointer words of slot ``index``; slots no field uses (none today) stay null."""
    if any(f.offset == index for f in pointer_fields(model)):
        return f"{a}{index}", f"{b}{index}"
    return "0", "0"


def emit_condition(out: Emitter, tests: list[str], indent: int) -> None:
    """``if`` all of ``tests``, on one line if it fits."""
    line = "if " + " and ".join(tests) + ":"
    if len(line) + 4 * indent <= 120:
        out(line, indent)
        return
    out("if (", indent)
    for index, test in enumerate(tests):
        out(("and " if index else "") + test, indent + 1)
    out("):", indent)


def emit_call(out: Emitter, opening: str, args: list[str], indent: int, closing: str = ")") -> None:
    line = opening + ", ".join(args) + closing
    if len(line) + 4 * indent <= 120:
        out(line, indent)
        return
    out(opening, indent)
    for arg in args:
        out(arg + ",", indent + 1)
    out(closing, indent)


def emit_data_values(out: Emitter, model: StructModel, src: str, prefix: str, indent: int) -> list[str]:
    """Emit what bool bytes need, return the expressions to pack for the data section, in format order."""
    values = []
    for index, unit in enumerate(data_units(model)):
        f = unit.fields[0]
        if f.kind == "bool":
            name = f"{prefix}{index}"
            inner = indent
            if len(unit.fields) > 1:  # flags are mostly all at their defaults: one test, the byte is 0
                emit_condition(
                    out, [f"{src}.{bit_field.attr} is {bool(bit_field.default)}" for bit_field in unit.fields], indent
                )
                out(f"{name} = 0", indent + 1)
                out("else:", indent)
                inner = indent + 1
            for position, bit_field in enumerate(unit.fields):
                out(f"v = {src}.{bit_field.attr}", inner)
                out(f"{name} {'|=' if position else '='} {bool_bits_expression(bit_field)}", inner)
            values.append(name)
        elif f.default:
            values.append(f"{src}.{f.attr} ^ {f.default}")
        else:
            values.append(f"{src}.{f.attr}")
    return values


def emit_append_data(out: Emitter, indent: int) -> None:
    """Append Data ``v`` of ``n`` bytes at the cursor."""
    out("parts.append(v)", indent)
    out("parts.append(PADDING[n & 7])", indent)
    out("c += n + 7 & -8", indent)


def emit_write_data_field(out: Emitter, a: str, b: str, at: Position, value: str, indent: int) -> None:
    out(f"v = {value}", indent)
    out("if v:", indent)
    out("n = len(v)", indent + 1)
    out(f"if n < {BLOB_THRESHOLD}:", indent + 1)
    out(f"{a} = {at.cursor_offset()}", indent + 2)
    out(f"{b} = n * 8 + 2", indent + 2)
    emit_append_data(out, indent + 2)
    out("else:", indent + 1)
    out(f"{a} = {b} = 0", indent + 2)
    out(f"blobs = defer_blob(blobs, {at}, v)", indent + 2)
    out("elif v.__class__ is bytes:", indent)
    out(f"{a} = {b} = 0", indent + 1)
    out("else:", indent)
    out("raise NotCanonical  # None, or an empty value of another type: looked into by the careful path", indent + 1)


def emit_write_text_field(out: Emitter, a: str, b: str, at: Position, value: str, indent: int) -> None:
    out(f"v = {value}", indent)
    out("if v.__class__ is not str:", indent)
    out("raise NotCanonical", indent + 1)
    out("if v:", indent)
    out("v = v.encode()", indent + 1)
    out("n = len(v)", indent + 1)
    out(f"{a} = {at.cursor_offset()}", indent + 1)
    out(f"{b} = n * 8 + 10  # n + 1 bytes with the NUL, in a list of bytes (2)", indent + 1)
    out("parts.append(v)", indent + 1)
    out("parts.append(TEXT_END[n & 7])", indent + 1)
    out("c += n + 8 & -8", indent + 1)
    out("else:", indent)
    out(f"{a} = {b} = 0", indent + 1)


def emit_list_start(out: Emitter, a: str, b: str, at: Position, src: str, depth: int, size: str, indent: int) -> None:
    """Open a non-empty list ``src`` (``items{depth}``, ``count{depth}``), reserving a part for its pointer words.

    ``size`` is the list pointer's high word as an expression of ``count{depth}``.
    """
    items, count, slot = f"items{depth}", f"count{depth}", f"slot{depth}"
    out(f"{items} = {src}", indent)
    out(f"if {items}.__class__ is not list:", indent)
    out("raise NotCanonical", indent + 1)
    out(f"if {items}:", indent)
    out(f"{count} = len({items})", indent + 1)
    out(f"{a} = {at.cursor_offset()}", indent + 1)
    out(f"{b} = {size}", indent + 1)
    out(f"{slot} = len(parts)", indent + 1)
    out('parts.append(b"")', indent + 1)


def emit_list_end(out: Emitter, a: str, b: str, depth: int, words: str, indent: int) -> None:
    out(f'parts[slot{depth}] = b"".join({words})', indent + 1)
    out("else:", indent)
    out(f"{a} = {b} = 0", indent + 1)


def emit_write_data_list(out: Emitter, a: str, b: str, at: Position, src: str, depth: int, indent: int) -> None:
    at_var, words, count = f"at{depth}", f"words{depth}", f"count{depth}"
    emit_list_start(out, a, b, at, src, depth, f"{count} * 8 + 6", indent)
    out(f"{words} = []", indent + 1)
    out(f"{at_var} = c", indent + 1)
    out(f"c += {count} << 3", indent + 1)
    out(f"for v in items{depth}:", indent + 1)
    out("n = len(v)", indent + 2)
    out("if not n:", indent + 2)
    out(f"{words}.append(NULL_POINTER)", indent + 3)
    out(f"elif n < {BLOB_THRESHOLD}:", indent + 2)
    out(f"{words}.append(_POINTER.pack({Position(at_var, 0).cursor_offset()}, n * 8 + 2))", indent + 3)
    emit_append_data(out, indent + 3)
    out("else:", indent + 2)
    out(f"{words}.append(NULL_POINTER)", indent + 3)
    out(f"blobs = defer_blob(blobs, {at_var}, v)", indent + 3)
    out(f"{at_var} += 8", indent + 2)
    emit_list_end(out, a, b, depth, words, indent)


def emit_write_struct_list(
    out: Emitter, element: StructModel, a: str, b: str, at: Position, src: str, depth: int, indent: int, by_name: Models
) -> None:
    """The tag and element bodies are packed as the elements' children are laid out, then joined into their slot."""
    words = element_words(element)
    e, el, bodies, count = f"e{depth}", f"el{depth}", f"bodies{depth}", f"count{depth}"
    tag_high = element.data_words | element.pointer_count << 16
    emit_list_start(out, a, b, at, src, depth, f"{count} * {words * 8} + 7", indent)
    out(f"{bodies} = [_POINTER_BITS.pack({count} << 2, {tag_high})]", indent + 1)
    out(f"{e} = c + 8", indent + 1)
    out(f"c = {e} + {count} * {words * 8}", indent + 1)
    out(f"for {el} in items{depth}:", indent + 1)
    out(f"if {el}.__class__ is not {element.name}:", indent + 2)
    out("raise NotCanonical", indent + 3)
    values = emit_data_values(out, element, el, f"u{depth}_", indent + 2)
    emit_write_pointers(out, element, Position(e, element.data_words * 8), el, depth, indent + 2, by_name)
    for index in range(element.pointer_count):
        values += pointer_value_names(element, index, f"a{depth}_", f"b{depth}_")
    emit_call(out, f"{bodies}.append(_CANON_{upper_snake_case(element.name)}.pack(", values, indent + 2, "))")
    out(f"{e} += {words * 8}", indent + 2)
    emit_list_end(out, a, b, depth, bodies, indent)
