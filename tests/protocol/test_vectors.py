"""Golden vectors written by pycapnp (see vectors/make_vectors.py); runs on CPython and PyPy without pycapnp."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scaler.fastpath._messages import FIELDS
from scaler.protocol import MESSAGE_TYPES, decode_frame, encode, encode_many

pytestmark = pytest.mark.timeout(60)

VECTOR_FILES = sorted((Path(__file__).parent / "vectors").glob("*.json"))
DOCUMENTS = [json.loads(path.read_text(encoding="utf-8")) for path in VECTOR_FILES]
CLASSES = {cls.__name__: cls for cls in MESSAGE_TYPES}
CASES = [
    pytest.param(CLASSES[doc["type"]], vector, id=f"{doc['type']}:{vector['name']}")
    for doc in DOCUMENTS
    for vector in doc["vectors"]
]


def covers_schema(cls: type, values: dict[str, Any]) -> bool:
    """Whether a vector sets every field the schema has now (older vectors read like messages from older peers)."""
    if {field.capnp_name for field in FIELDS[cls]} != set(values):
        return False
    return all(
        covers_schema(field.type_ref, item)
        for field in FIELDS[cls]
        if field.kind == "struct_list"
        for item in values[field.capnp_name]
    )


def from_json(cls: type, values: dict[str, Any]) -> Any:
    fields = FIELDS[cls]
    assert set(values) <= {field.capnp_name for field in fields}, f"{cls.__name__}: vector has unknown fields"
    kwargs = {}
    for field in fields:
        if field.capnp_name not in values:
            continue  # added to the schema after the vector was made: it must read as its default
        value = values[field.capnp_name]
        if field.kind == "data":
            value = bytes.fromhex(value)
        elif field.kind == "data_list":
            value = [bytes.fromhex(item) for item in value]
        elif field.kind == "struct_list":
            value = [from_json(field.type_ref, item) for item in value]
        kwargs[field.attr] = value
    return cls(**kwargs)


def assert_plain_values(obj: Any) -> None:
    """Decoded values have the documented plain types: enums are ints (not IntEnum), bools are bools."""
    for field in FIELDS[type(obj)]:
        value = getattr(obj, field.attr)
        plain = {"bool": bool, "text": str, "data": bytes, "float32": float, "float64": float, "data_list": list}
        expected = plain.get(field.kind, int)
        if field.kind == "struct_list":
            assert type(value) is list
            for item in value:
                assert_plain_values(item)
        else:
            assert type(value) is expected, f"{field.attr} decoded as {type(value).__name__}"


def test_every_message_type_has_vectors_in_union_order() -> None:
    assert [doc["type"] for doc in sorted(DOCUMENTS, key=lambda d: d["which"])] == [c.__name__ for c in MESSAGE_TYPES]
    for index, cls in enumerate(MESSAGE_TYPES):
        assert cls.WHICH == index
    layouts = {vector["layout"] for doc in DOCUMENTS for vector in doc["vectors"]}
    assert layouts == {"single-segment", "multi-segment", "double-far", "mixed-far", "older-peer", "newer-peer"}


def test_vectors_cover_the_current_schema() -> None:
    stale = [doc["type"] for doc in DOCUMENTS if not covers_schema(CLASSES[doc["type"]], doc["vectors"][1]["values"])]
    assert not stale, (
        f"{stale}: schema changed since the vectors were made, run python3 -m tests.protocol.vectors.make_vectors"
    )


@pytest.mark.parametrize(("cls", "vector"), CASES)
def test_decode_reference_bytes(cls: type, vector: dict[str, Any]) -> None:
    encoded = bytes.fromhex(vector["encoded"])
    (decoded,) = decode_frame(encoded)
    assert type(decoded) is cls
    assert decoded == from_json(cls, vector["values"])
    assert decoded.raw == encoded
    assert_plain_values(decoded)


@pytest.mark.parametrize(("cls", "vector"), CASES)
def test_encode_expected_values(cls: type, vector: dict[str, Any]) -> None:
    expected = from_json(cls, vector["values"])
    encoded = encode(expected)
    if vector["canonical"] and covers_schema(cls, vector["values"]):
        assert encoded.hex() == vector["encoded"], "encoder layout differs from pycapnp's canonical single segment"
    (decoded,) = decode_frame(encoded)
    assert decoded == expected
    assert decoded.raw == encoded


@pytest.mark.parametrize("doc", DOCUMENTS, ids=[doc["type"] for doc in DOCUMENTS])
def test_frame_of_concatenated_reference_messages(doc: dict[str, Any]) -> None:
    cls = CLASSES[doc["type"]]
    encoded = [bytes.fromhex(vector["encoded"]) for vector in doc["vectors"]]
    decoded = decode_frame(b"".join(encoded))
    assert decoded == [from_json(cls, vector["values"]) for vector in doc["vectors"]]
    assert [msg.raw for msg in decoded] == encoded


def test_encode_many_round_trips_every_type() -> None:
    messages = [from_json(CLASSES[doc["type"]], vector["values"]) for doc in DOCUMENTS for vector in doc["vectors"]]
    frame = encode_many(messages)
    assert frame == b"".join(encode(msg) for msg in messages)
    decoded = decode_frame(frame)
    assert decoded == messages
    assert [msg.raw for msg in decoded] == [encode(msg) for msg in messages]
