"""Property tests against pycapnp, the reference implementation: both directions, every message type (CPython)."""

from __future__ import annotations

import struct
import sys
from typing import Any

import pytest

# pycapnp, the reference, is CPython only: skipped on PyPy, but on CPython a missing pycapnp fails instead of skipping
if sys.implementation.name != "cpython":
    pytest.skip("pycapnp is CPython only", allow_module_level=True)

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from scaler.fastpath._messages import FIELDS  # noqa: E402
from scaler.fastpath.wire import BLOB_THRESHOLD  # noqa: E402
from scaler.protocol import (  # noqa: E402
    MESSAGE_TYPES,
    Argument,
    ObjectPut,
    ObjectResponse,
    Resource,
    SchedulerStatus,
    Task,
    WorkerStatus,
    decode_frame,
    encode,
)
from tests.protocol import capnp_bridge  # noqa: E402
from tests.protocol.strategies import ANY_MESSAGE, INT_BITS, has_blob, int_range, struct_strategy  # noqa: E402
from tests.protocol.test_fast_reader import decode_frame_generally, read_fast  # noqa: E402

pytestmark = pytest.mark.timeout(120)

PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def single_segment_reference(msg: Any) -> bytes:
    # A first segment big enough for the whole message keeps pycapnp to one segment, however large the values.
    return capnp_bridge.new_builder(msg, num_first_segment_words=len(encode(msg)) // 8).to_bytes()


@pytest.mark.parametrize("cls", MESSAGE_TYPES, ids=lambda cls: cls.__name__)
@PROPERTY_SETTINGS
@given(data=st.data())
def test_fastpath_bytes_read_by_pycapnp(cls: type, data: st.DataObject) -> None:
    msg = data.draw(struct_strategy(cls))
    assert capnp_bridge.reference_decode(encode(msg)) == msg


@pytest.mark.parametrize("cls", MESSAGE_TYPES, ids=lambda cls: cls.__name__)
@PROPERTY_SETTINGS
@given(data=st.data())
def test_pycapnp_bytes_read_by_fastpath(cls: type, data: st.DataObject) -> None:
    msg = data.draw(struct_strategy(cls))
    reference = single_segment_reference(msg)
    (decoded,) = decode_frame(reference)
    assert decoded == msg
    assert decoded.raw == reference
    assert read_fast(reference) == msg, "pycapnp's single segment should take the fast path"
    if not has_blob(msg):
        assert encode(msg) == reference, "our layout should be pycapnp's, byte for byte"
    # Empty values set explicitly become non-null zero-length objects (Text "" is a lone NUL): still defaults.
    assert decode_frame(capnp_bridge.new_builder(msg, set_empty=True).to_bytes()) == [msg]


@pytest.mark.parametrize("cls", MESSAGE_TYPES, ids=lambda cls: cls.__name__)
@PROPERTY_SETTINGS
@given(data=st.data())
def test_pycapnp_multi_segment_read_by_fastpath(cls: type, data: st.DataObject) -> None:
    msg = data.draw(struct_strategy(cls))
    reference = capnp_bridge.reference_multi_segment_bytes(msg)
    assert decode_frame(reference) == [msg]


@PROPERTY_SETTINGS
@given(st.lists(ANY_MESSAGE, min_size=1, max_size=5))
def test_frame_with_several_pycapnp_messages(messages: list[Any]) -> None:
    frame = b"".join(capnp_bridge.reference_bytes(msg) for msg in messages)
    assert decode_frame(frame) == messages


def extreme(cls: type, pick: str) -> Any:
    """Every numeric field at its minimum or maximum, lists with one such element."""
    values: dict[str, Any] = {}
    for field in FIELDS[cls]:
        kind = field.kind
        if kind in INT_BITS or kind == "enum":
            low, high = int_range(kind)
            values[field.attr] = high if pick == "max" else low
        elif kind == "float32":
            values[field.attr] = struct.unpack("<f", b"\xff\xff\x7f\x7f" if pick == "max" else b"\xff\xff\x7f\xff")[0]
        elif kind == "bool":
            values[field.attr] = pick == "max"
        elif kind == "struct_list":
            values[field.attr] = [extreme(field.type_ref, pick)]
        elif kind == "data_list":
            values[field.attr] = [b"\xff" * 9, b""]
    return cls(**values)


@pytest.mark.parametrize("pick", ["min", "max"])
@pytest.mark.parametrize("cls", MESSAGE_TYPES, ids=lambda cls: cls.__name__)
def test_extreme_numbers_both_directions(cls: type, pick: str) -> None:
    msg = extreme(cls, pick)
    assert capnp_bridge.reference_decode(encode(msg)) == msg
    assert decode_frame(capnp_bridge.reference_bytes(msg)) == [msg]
    assert encode(msg) == capnp_bridge.reference_bytes(msg)


@pytest.mark.parametrize("report_result", [False, True])
def test_report_result_default_is_true_on_the_wire(report_result: bool) -> None:
    msg = Task(task_id=b"t", report_result=report_result, profiling=not report_result)
    reference = capnp_bridge.reference_bytes(msg)
    assert encode(msg) == reference
    assert decode_frame(reference)[0].report_result is report_result
    assert capnp_bridge.reference_decode(encode(msg)).report_result is report_result
    assert Task().report_result is True and decode_frame(encode(Task()))[0].report_result is True


# The encoders and fast readers take Task's usually-empty fields and its flags at their defaults in one test each
# (see USUALLY_EMPTY in tools/fastpath_codegen/emit_fast.py): each one set alone must leave that shortcut and still
# match the reference.
SET_ALONE = {
    "dependencies": [b"d" * 16],
    "parent_task_id": b"p" * 16,
    "serializer_id": b"s" * 3,
    "resources": [Resource(name="gpu", amount=1.0)],
    "profiling": True,
    "report_result": False,
    "stream_output": True,
}


@pytest.mark.parametrize("field", [None, *SET_ALONE], ids=str)
def test_task_usual_defaults_and_each_exception(field: Any) -> None:
    msg = Task(task_id=b"t" * 16, function_id=b"f" * 16, args=[Argument(data=b"a" * 20)])
    if field is not None:
        setattr(msg, field, SET_ALONE[field])
    reference = capnp_bridge.reference_bytes(msg)
    assert encode(msg) == reference
    assert read_fast(reference) == msg
    assert decode_frame_generally(reference) == [msg]


@pytest.mark.parametrize("chunk_count", [0, 1, 2, 0xFFFFFFFF])
@pytest.mark.parametrize("cls", [ObjectPut, ObjectResponse])
def test_chunk_count_default_is_one_on_the_wire(cls: type, chunk_count: int) -> None:
    msg = cls(object_id=b"o", chunk_count=chunk_count, total_size=5)
    reference = capnp_bridge.reference_bytes(msg)
    assert encode(msg) == reference
    assert decode_frame(reference)[0].chunk_count == chunk_count
    assert capnp_bridge.reference_decode(encode(msg)).chunk_count == chunk_count
    assert cls().chunk_count == 1


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 65536, 1 << 20])
def test_large_data_both_directions(size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + b"\x5a" * (size % 256)
    msg = ObjectPut(object_id=b"\x01" * 16, name="big", payload=payload, total_size=size)
    assert capnp_bridge.reference_decode(encode(msg)) == msg
    default_builder = capnp_bridge.reference_bytes(msg)  # pycapnp moves big payloads to their own segment
    if size >= 1 << 16:
        assert struct.unpack_from("<I", default_builder)[0] > 0, "expected pycapnp to use several segments"
    (decoded,) = decode_frame(default_builder)
    assert decoded == msg
    assert decode_frame(capnp_bridge.reference_multi_segment_bytes(msg)) == [msg]


def test_several_big_data_in_one_message() -> None:
    big = [bytes([index]) * (BLOB_THRESHOLD + index) for index in range(5)]
    msg = Task(
        task_id=big[0],
        args=[Argument(name="a", data=big[1]), Argument(data=b"small"), Argument(name="c", data=big[2])],
        dependencies=[big[3], b"d", big[4]],
        serializer_id=b"s",
    )
    encoded = encode(msg)
    assert capnp_bridge.reference_decode(encoded) == msg
    assert decode_frame(encoded) == [msg]
    assert decode_frame(capnp_bridge.reference_bytes(msg)) == [msg]


def test_long_lists_both_directions() -> None:
    workers = [WorkerStatus(name=f"W|{index}|😀", free=index, processed=index * 1000) for index in range(2000)]
    msg = SchedulerStatus(time_us=1, workers=workers, task_states=[])
    assert capnp_bridge.reference_decode(encode(msg)) == msg
    assert decode_frame(capnp_bridge.reference_bytes(msg)) == [msg]
    dependencies = [index.to_bytes(16, "little") for index in range(5000)]
    task = Task(task_id=b"t", dependencies=dependencies)
    assert capnp_bridge.reference_decode(encode(task)) == task
    assert decode_frame(capnp_bridge.reference_bytes(task)) == [task]


def test_text_with_nul_survives_both_directions() -> None:
    msg = SchedulerStatus(sent=[], workers=[WorkerStatus(name="a\0b\0")])
    assert capnp_bridge.reference_decode(encode(msg)) == msg
    assert decode_frame(capnp_bridge.reference_bytes(msg)) == [msg]


def test_field_names_match_the_schema() -> None:
    for cls in FIELDS:
        capnp_fields = getattr(capnp_bridge.SCHEMA, cls.__name__).schema.fieldnames
        assert tuple(field.capnp_name for field in FIELDS[cls]) == tuple(capnp_fields)
