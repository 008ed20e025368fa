"""Code generation for the bytearray encoders, the variant that is fastest on PyPy (helpers in writers.py).

Each struct has a ``_fill_*`` function that packs its data section into a bytearray at a known offset and appends its
children; lists of structs have a ``_write_list_*``. The layout is the one emit_fast's encoders produce.
"""

from __future__ import annotations

from tools.fastpath_codegen.emit_fast import emit_call, emit_data_values
from tools.fastpath_codegen.emit_general import Emitter, func_name
from tools.fastpath_codegen.schema import (
    POINTER_KINDS,
    Schema,
    StructModel,
    data_units,
    message_prefix,
    upper_snake_case,
)


def emit_fill(out: Emitter, model: StructModel) -> None:
    out()
    out(f"def {func_name('fill', model.name)}(buf: bytearray, blobs: Blobs, start: int, obj: {model.name}) -> None:")
    values = emit_data_values(out, model, "obj", "u", 1)
    if values:
        emit_call(out, f"_DATA_{upper_snake_case(model.name)}.pack_into(", ["buf", "start", *values], 1)
    for f in model.fields:
        if f.kind not in POINTER_KINDS:
            continue
        at = model.data_words * 8 + f.offset * 8
        writer = {"text": "write_text", "data": "write_data", "data_list": "write_data_list"}.get(
            f.kind, func_name("write_list", f.type_name or "")
        )
        blobs = "" if f.kind == "text" else "blobs, "
        out(f"{writer}(buf, {blobs}start + {at}, obj.{f.attr})", 1)
    if not data_units(model) and not any(f.kind in POINTER_KINDS for f in model.fields):
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


def emit_bytearray_encoder(out: Emitter, schema: Schema, model: StructModel) -> None:
    prefix = message_prefix(schema, model)
    body = len(prefix) - (model.data_words + model.pointer_count) * 8
    const = f"_PREFIX_{upper_snake_case(model.name)}"
    out()
    out(f'{const} = bytes.fromhex("{prefix[:body].hex()}") + bytes({len(prefix) - body})')
    out()
    out()
    out(f"def {func_name('build', model.name)}(msg: {model.name}, parts: list) -> int:")
    out(f"buf = bytearray({const})", 1)
    out("blobs: Blobs = []", 1)
    out(f"{func_name('fill', model.name)}(buf, blobs, {body}, msg)", 1)
    out("return finish_message(parts, buf, blobs)", 1)
    out()
