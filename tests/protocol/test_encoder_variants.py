"""The two generated encoders (parts for CPython, bytearray for PyPy) write the same bytes and refuse the same values.

Whichever variant this interpreter uses is also checked against pycapnp (test_conformance, CPython) and the golden
vectors; this module runs both variants on either interpreter.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from scaler.fastpath import codec
from scaler.fastpath._messages import BYTEARRAY_ENCODERS, PARTS_ENCODERS
from scaler.protocol import encode
from tests.protocol.strategies import ANY_MESSAGE
from tests.protocol.test_api import INVALID_MESSAGES

pytestmark = pytest.mark.timeout(60)

VARIANTS = {"parts": PARTS_ENCODERS, "bytearray": BYTEARRAY_ENCODERS}


def run(encoders: dict[type, Any], msg: Any) -> tuple[int, bytes]:
    parts: list[bytes] = []
    size = encoders[type(msg)](msg, parts)
    return size, b"".join(parts)


@settings(max_examples=300, deadline=None)
@given(ANY_MESSAGE)
def test_same_bytes(msg: Any) -> None:
    expected = encode(msg)
    for encoders in VARIANTS.values():
        assert run(encoders, msg) == (len(expected), expected)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("msg", [case[0] for case in INVALID_MESSAGES])
def test_bad_values_are_never_encoded_silently(variant: str, msg: Any) -> None:
    try:
        size, data = run(VARIANTS[variant], msg)
    except codec._ENCODE_FAILURES:
        return  # encode() then names the field (test_api)
    assert len(data) != size, "a bad value went through without encode() noticing"
