"""Hypothesis strategies for every message type, derived from the schema's field kinds (pure Python)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from scaler.fastpath._messages import FIELDS, MESSAGE_TYPES
from scaler.fastpath.wire import BLOB_THRESHOLD

INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}
# Astral characters included; NUL excluded here (it is legal: see test_text_with_nul_survives_both_directions).
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=40)
# Now and then bigger than BLOB_THRESHOLD, which the encoder lays out after the other objects.
BIG_DATA = st.one_of(
    st.binary(min_size=BLOB_THRESHOLD - 1, max_size=BLOB_THRESHOLD + 9),
    st.integers(4, 9).map(lambda count: bytes(range(256)) * count),
)
DATA = st.one_of(st.binary(max_size=300), st.binary(max_size=300), st.binary(max_size=300), BIG_DATA)


def int_range(kind: str) -> tuple[int, int]:
    bits = 16 if kind == "enum" else INT_BITS[kind]
    if kind.startswith("int"):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def int_strategy(kind: str) -> st.SearchStrategy[int]:
    low, high = int_range(kind)
    return st.one_of(st.sampled_from([low, high, 0, 1, high - 1]), st.integers(low, high))


def value_strategy(field: Any) -> st.SearchStrategy[Any]:
    kind = field.kind
    if kind == "bool":
        return st.booleans()
    if kind == "enum":
        return st.one_of(st.sampled_from(list(field.type_ref)), int_strategy("enum"))  # unknown values too
    if kind in INT_BITS:
        return int_strategy(kind)
    if kind == "float32":
        return st.floats(width=32, allow_nan=False)
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "text":
        return TEXT
    if kind == "data":
        return DATA
    if kind == "data_list":
        return st.lists(st.one_of(st.binary(max_size=40), BIG_DATA), max_size=12)
    return st.lists(struct_strategy(field.type_ref), max_size=6)


def struct_strategy(cls: type) -> st.SearchStrategy[Any]:
    return st.builds(cls, **{field.attr: value_strategy(field) for field in FIELDS[cls]})


ANY_MESSAGE = st.one_of([struct_strategy(cls) for cls in MESSAGE_TYPES])


def has_blob(obj: Any) -> bool:
    """Whether ``obj`` holds Data the encoder moves out of pycapnp's pre-order layout."""
    for field in FIELDS[type(obj)]:
        value = getattr(obj, field.attr)
        if field.kind == "data" and len(value) >= BLOB_THRESHOLD:
            return True
        if field.kind == "data_list" and any(len(item) >= BLOB_THRESHOLD for item in value):
            return True
        if field.kind == "struct_list" and any(has_blob(item) for item in value):
            return True
    return False
