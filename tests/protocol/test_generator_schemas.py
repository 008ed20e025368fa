"""The generator on a schema that uses what ours does not yet: nested lists, every scalar kind, an empty struct.

Others append fields and messages to scaler.capnp; the code generated for them must be as right as for today's.
The module generated from SCHEMA below is checked against pycapnp in both directions, with both encoders and the
fast reader (CPython, pycapnp).
"""

from __future__ import annotations

import importlib.util
import random
import sys
from types import ModuleType
from typing import Any

import pytest

# pycapnp, the reference, is CPython only: skipped on PyPy, but on CPython a missing pycapnp fails instead of skipping
if sys.implementation.name != "cpython":
    pytest.skip("pycapnp is CPython only", allow_module_level=True)

import capnp  # noqa: E402

from scaler.fastpath.wire import BLOB_THRESHOLD  # noqa: E402
from tests.protocol import capnp_bridge  # noqa: E402
from tools.fastpath_codegen import generate  # noqa: E402

pytestmark = pytest.mark.timeout(120)

SCHEMA = """@0xe3c1a7f0b2d4e6f8;
enum Color { red @0; green @1; blue @2; }
struct Leaf {
  tags @0 :List(Data);
  label @1 :Text;
  weight @2 :Float64;
  flag @3 :Bool;
  code @4 :Int8;
  small @5 :Int16 = -3;
}
struct Branch {
  leaves @0 :List(Leaf);
  name @1 :Text;
  color @2 :Color = green;
  bits @3 :Bool;
  more @4 :Bool = true;
  count @5 :UInt16 = 7;
  offset @6 :Int32;
}
struct Tree {
  branches @0 :List(Branch);
  id @1 :Data;
  blobs @2 :List(Data);
  ratio @3 :Float32;
  big @4 :Int64;
  huge @5 :UInt64 = 12345;
  leaf @6 :List(Leaf);
}
struct Empty {}
struct Flags {
  a @0 :Bool; b @1 :Bool = true; c @2 :Bool; d @3 :Bool; e @4 :Bool; f @5 :Bool; g @6 :Bool; h @7 :Bool;
  i @8 :Bool = true; j @9 :UInt8; k @10 :Bool;
}
struct Message { union { tree @0 :Tree; empty @1 :Empty; flags @2 :Flags; leaf @3 :Leaf; } }
"""

INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, Any]:
    folder = tmp_path_factory.mktemp("schema")
    schema_path = folder / "grown.capnp"
    schema_path.write_text(SCHEMA)
    module_path = folder / "grown_messages.py"
    module_path.write_text(generate.render(schema_path))
    spec = importlib.util.spec_from_file_location("grown_messages", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, capnp.load(str(schema_path))


def random_value(field: Any, fields: dict[type, Any], rng: random.Random, depth: int) -> Any:
    kind = field.kind
    if kind == "bool":
        return rng.random() < 0.5
    if kind in INT_BITS:
        bits = INT_BITS[kind]
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if kind.startswith("int") else (0, (1 << bits) - 1)
        return rng.choice([low, high, 0, rng.randint(low, high)])
    if kind == "enum":
        return rng.randrange(4)  # 3 is no enumerant: a newer peer's value, kept as an int
    if kind in ("float32", "float64"):
        return rng.choice([0.0, 1.5, -2.25, 1e10])  # exact in float32 too
    if kind == "text":
        return rng.choice(["", "x", "héllo", "z" * 9])
    if kind == "data":
        return rng.choice([b"", b"d", bytes(range(16)), bytes(BLOB_THRESHOLD + 3)])
    count = rng.randrange(4) if depth < 3 else 0
    if kind == "data_list":
        return [rng.choice([b"", b"ab", bytes(BLOB_THRESHOLD)]) for _ in range(count)]
    return [random_struct(field.type_ref, fields, rng, depth + 1) for _ in range(count)]


def random_struct(cls: type, fields: dict[type, Any], rng: random.Random, depth: int = 0) -> Any:
    return cls(**{field.attr: random_value(field, fields, rng, depth) for field in fields[cls]})


def has_blob(obj: Any, fields: dict[type, Any]) -> bool:
    for field in fields[type(obj)]:
        value = getattr(obj, field.attr)
        if field.kind == "data" and len(value) >= BLOB_THRESHOLD:
            return True
        if field.kind == "data_list" and any(len(item) >= BLOB_THRESHOLD for item in value):
            return True
        if field.kind == "struct_list" and any(has_blob(item, fields) for item in value):
            return True
    return False


def test_generated_code_agrees_with_pycapnp(generated: tuple[ModuleType, Any]) -> None:
    module, schema = generated
    members = {field.discriminantValue: field.name for field in schema.Message.schema.node.struct.fields}
    rng = random.Random(17)
    for _ in range(400):
        cls = rng.choice(module.MESSAGE_TYPES)
        msg = random_struct(cls, module.FIELDS, rng)
        encoded = []
        for encoders in (module.PARTS_ENCODERS, module.BYTEARRAY_ENCODERS):
            parts: list[bytes] = []
            size = encoders[cls](msg, parts)
            encoded.append(b"".join(parts))
            assert len(encoded[-1]) == size
        assert encoded[0] == encoded[1], msg
        ours = encoded[0]
        builder = schema.Message.new_message(num_first_segment_words=len(ours) // 8)
        capnp_bridge.fill_builder(builder.init(members[cls.WHICH]), msg, fields=module.FIELDS)
        reference = builder.to_bytes()
        if not has_blob(msg, module.FIELDS):
            assert ours == reference, msg
        with schema.Message.from_bytes(ours, traversal_limit_in_words=1 << 40) as reader:
            assert capnp_bridge.read_struct(getattr(reader, reader.which()), cls, module.FIELDS) == msg
        for data in (ours, reference):
            decoded = module.FAST_READERS[cls.WHICH](data, 0)
            assert decoded == msg and decoded.raw == data
