"""Regenerate the golden vectors from the reference implementation (CPython + pycapnp):

    python3 -m tests.protocol.vectors.make_vectors    # from the repository's root

One JSON file per message type, ``<type in snake_case>.json``:

    {"type": "Task", "member": "task", "which": 5, "vectors": [
        {"name": ..., "layout": ..., "canonical": bool, "values": {capnp field name: value}, "encoded": hex}]}

``values`` use the schema's field names; Data is hex, Text a JSON string, enums and ints numbers, Float32 the exact
float, lists JSON arrays and structs JSON objects. ``encoded`` is one complete message in stream framing written by
pycapnp. ``canonical`` vectors are single-segment messages built by setting fields in schema order and leaving
empty Text/Data/lists unset (null pointers): a conforming encoder that lays out objects in pre-order produces exactly
these bytes. The other layouts must decode to ``values``: pycapnp splitting the message into many segments (far
pointers), double-far pointers, and peers built from an older schema (last field of each struct missing: it reads as
its default) or a newer one (two extra fields per struct: they are ignored).

Values come from a fixed seed, so running this twice gives identical files.
"""

from __future__ import annotations

import json
import random
import re
import struct
import tempfile
from pathlib import Path
from typing import Any

import capnp

from scaler.fastpath._messages import FIELDS, MESSAGE_TYPES
from tests.protocol import capnp_bridge
from tests.protocol.wirebuild import scatter
from tools.fastpath_codegen.generate import snake_case

VECTOR_DIR = Path(__file__).resolve().parent
REPO_ROOT = VECTOR_DIR.parents[2]
SEED = 20240601
INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}
TEXT_ALPHABET = "abcXYZ019 _-|/\n\tüßé€中文字😀🚀𝄞"


def int_range(kind: str) -> tuple[int, int]:
    bits = 16 if kind == "enum" else INT_BITS[kind]
    if kind.startswith("int"):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def float32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def make_value(field: Any, style: str, rng: random.Random) -> Any:
    """A field value for one case style: "max" (largest everything), "min" (smallest non-empty) or "random"."""
    kind = field.kind
    if kind == "bool":
        return rng.random() < 0.5 if style == "random" else style == "max"
    if kind in INT_BITS or kind == "enum":
        low, high = int_range(kind)
        if kind == "enum" and style == "random":
            return rng.randrange(len(field.type_ref))
        return {"max": high, "min": low if low < 0 else 1}.get(style, rng.randint(low, high))
    if kind == "float32":
        return {"max": float32(3.4028234663852886e38), "min": -float32(1.401298464324817e-45)}.get(
            style, float32(rng.uniform(-1e6, 1e6))
        )
    if kind == "float64":
        return {"max": 1.7976931348623157e308, "min": -5e-324}.get(style, rng.uniform(-1e12, 1e12))
    if kind == "text":
        length = {"max": 40, "min": 1}.get(style, rng.randint(0, 24))
        return "".join(rng.choice(TEXT_ALPHABET) for _ in range(length))
    if kind == "data":
        return {"max": bytes(range(256)), "min": b"\0"}.get(style, rng.randbytes(rng.randint(0, 40)))
    count = {"max": 3, "min": 1}.get(style, rng.randint(0, 4))
    if kind == "data_list":
        return [make_value(field._replace(kind="data"), style, rng) for _ in range(count)]
    if style == "min":
        return [field.type_ref()]  # one all-default element
    return [make_struct(field.type_ref, style, rng) for _ in range(count)]


def make_struct(cls: type, style: str, rng: random.Random) -> Any:
    if style == "defaults":
        return cls()
    return cls(**{field.attr: make_value(field, style, rng) for field in FIELDS[cls]})


def to_json(obj: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for field in FIELDS[type(obj)]:
        value = getattr(obj, field.attr)
        if field.kind == "data":
            value = value.hex()
        elif field.kind == "data_list":
            value = [item.hex() for item in value]
        elif field.kind == "struct_list":
            value = [to_json(item) for item in value]
        values[field.capnp_name] = value
    return values


def variant_schema(kind: str) -> Any:
    """Load the schema as an older peer (last field of each struct dropped) or a newer one (two fields added)."""
    text = capnp_bridge.SCHEMA_PATH.read_text()
    file_id = "@0xd4a2c7e91b3f5a61;" if kind == "older" else "@0xd4a2c7e91b3f5a62;"  # must differ from the real one
    text = re.sub(r"^@0x[0-9a-f]+;", file_id, text, flags=re.M)

    def rewrite(match: re.Match[str]) -> str:
        name, body = match.group(1), match.group(2)
        if name == "Message":
            return match.group(0)
        lines = body.split("\n")
        field_lines = [i for i, line in enumerate(lines) if re.search(r"@\d+\s*:", line)]
        if kind == "older":
            if len(field_lines) > 1:
                del lines[field_lines[-1]]
        else:
            next_ordinal = len(field_lines)
            lines.append(f"  futureNumber @{next_ordinal} :UInt64;")
            lines.append(f"  futureText @{next_ordinal + 1} :Text;")
        return f"struct {name} {{" + "\n".join(lines) + "\n}"

    text = re.sub(r"struct (\w+) \{(.*?)\n\}", rewrite, text, flags=re.S)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / f"scaler_{kind}.capnp"
        path.write_text(text)
        return capnp.load(str(path))


def fill_variant(builder: Any, obj: Any, newer: bool) -> None:
    """Like capnp_bridge.fill_builder, but skips fields the variant lacks and sets the newer schema's extras."""
    known = set(builder.schema.fieldnames)
    for field in FIELDS[type(obj)]:
        if field.capnp_name not in known:
            continue
        value = getattr(obj, field.attr)
        if field.kind == "struct_list":
            if value:
                items = builder.init(field.capnp_name, len(value))
                for index, item in enumerate(value):
                    fill_variant(items[index], item, newer)
        elif field.kind == "data_list":
            if value:
                items = builder.init(field.capnp_name, len(value))
                for index, item in enumerate(value):
                    items[index] = item
        elif value or field.kind not in ("text", "data"):
            setattr(builder, field.capnp_name, int(value) if field.kind == "enum" else value)
    if newer:
        builder.futureNumber = 0xFEEDFACECAFEBEEF
        builder.futureText = "from the future"


def as_older_peer_sees(obj: Any, older: Any) -> Any:
    """``obj`` with every field unknown to the older schema back at its default."""
    cls = type(obj)
    values = {}
    known = set(getattr(older, cls.__name__).schema.fieldnames)
    for field in FIELDS[cls]:
        if field.capnp_name not in known:
            continue
        value = getattr(obj, field.attr)
        if field.kind == "struct_list":
            value = [as_older_peer_sees(item, older) for item in value]
        values[field.attr] = value
    return cls(**values)


def variant_bytes(obj: Any, schema: Any, newer: bool) -> bytes:
    builder = schema.Message.new_message()
    fill_variant(builder.init(capnp_bridge.MEMBER_NAMES[obj.WHICH]), obj, newer)
    return builder.to_bytes()


def vectors_for(cls: type, older: Any, newer: Any) -> list[dict[str, Any]]:
    rng = random.Random(f"{SEED}-{cls.__name__}")
    cases = [("defaults", make_struct(cls, "defaults", rng))]
    cases += [(style, make_struct(cls, style, rng)) for style in ("max", "min", "random", "random")]
    cases[-1] = ("random-2", cases[-1][1])
    vectors = []
    for name, obj in cases:
        encoded = capnp_bridge.reference_bytes(obj)
        vectors.append(vector(name, "single-segment", True, obj, encoded))
    sample = cases[1][1]  # the "max" case: every pointer is set, so every one can be moved behind a far pointer
    single = capnp_bridge.reference_bytes(sample)
    variants = [
        ("max multi-segment", "multi-segment", sample, capnp_bridge.reference_multi_segment_bytes(sample)),
        ("max double-far", "double-far", sample, scatter(single, "d")),
        ("max mixed far", "mixed-far", sample, scatter(single, "sd-")),
        ("max from older peer", "older-peer", as_older_peer_sees(sample, older), variant_bytes(sample, older, False)),
        ("max from newer peer", "newer-peer", sample, variant_bytes(sample, newer, True)),
    ]
    vectors += [vector(name, layout, False, obj, encoded) for name, layout, obj, encoded in variants]
    return vectors


def vector(name: str, layout: str, canonical: bool, obj: Any, encoded: bytes) -> dict[str, Any]:
    decoded = capnp_bridge.reference_decode(encoded)
    assert decoded == obj, f"pycapnp does not read back {name}: {decoded!r} != {obj!r}"
    return {"name": name, "layout": layout, "canonical": canonical, "values": to_json(obj), "encoded": encoded.hex()}


def main() -> None:
    older = variant_schema("older")
    newer = variant_schema("newer")
    for cls in MESSAGE_TYPES:
        document = {
            "type": cls.__name__,
            "member": capnp_bridge.MEMBER_NAMES[cls.WHICH],
            "which": cls.WHICH,
            "vectors": vectors_for(cls, older, newer),
        }
        path = VECTOR_DIR / f"{snake_case(cls.__name__)}.json"
        path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(REPO_ROOT)} ({len(document['vectors'])} vectors)")


if __name__ == "__main__":
    main()
