"""The default serializer's layout with out-of-band buffers: arrays read back in place from writable memory (a private
mapping of a holder's shared memory), copied once from read-only memory (a received frame), and plain pickles read as
always."""

from __future__ import annotations

import io
import pickle

import numpy
import pytest

from scaler.io.shared_bytes import SharedBytes
from scaler.serializer import DefaultSerializer, default_loads, dump_with_buffers


def laid_out(value: object) -> bytes:
    with io.BytesIO() as file:
        dump_with_buffers(value, file)
        return file.getvalue()


def test_arrays_are_read_in_place_from_writable_memory() -> None:
    array = numpy.arange(100_000, dtype=numpy.float64)
    shared = SharedBytes.create(laid_out({"a": array, "rest": [1, "two"]}))
    view = shared.private_view()
    value = default_loads(view)
    assert numpy.array_equal(value["a"], array) and value["rest"] == [1, "two"]
    assert numpy.shares_memory(value["a"], numpy.frombuffer(view, dtype=numpy.uint8)), "no copy"
    assert value["a"].ctypes.data % 64 == 0, "aligned"
    value["a"][0] = -1.0  # writable, and the holder's memory keeps its own
    assert default_loads(shared.private_view())["a"][0] == 0.0


def test_arrays_from_read_only_memory_are_copied_once_and_writable() -> None:
    array = numpy.arange(1000, dtype=numpy.int32).reshape(10, 100)
    payload = laid_out(array)
    value = default_loads(memoryview(payload))  # bytes: read-only
    assert numpy.array_equal(value, array) and value.flags.writeable


def test_a_value_without_buffers_and_plain_pickles_read_as_before() -> None:
    assert default_loads(laid_out([1, b"x" * 1000])) == [1, b"x" * 1000]
    assert default_loads(DefaultSerializer.serialize({"k": 3})) == {"k": 3}
    assert DefaultSerializer.deserialize is default_loads


def test_garbage_fails_as_pickle_says() -> None:
    with pytest.raises(pickle.UnpicklingError):
        default_loads(b"\x00not ours")
