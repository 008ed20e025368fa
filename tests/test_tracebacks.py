"""The pieces of a readable task traceback, without a cluster: functions pickled by value keep their file name."""

from __future__ import annotations

import os
import pickle

import pytest

from scaler.serializer import DefaultSerializer

HERE = os.path.abspath(__file__)
SOURCE = "def outer(x):\n    def inner(y):\n        return 1 / y\n    return inner(x - x)\n"


def _by_value_function(filename: str):
    """A function cloudpickle pickles by value (its module, __main__, is not importable elsewhere)."""
    namespace = {"__name__": "__main__"}
    exec(compile(SOURCE, filename, "exec"), namespace)
    return namespace["outer"]


def test_a_function_pickled_by_value_keeps_its_file_name_and_the_same_bytes() -> None:
    outer = _by_value_function("/somewhere/script.py")
    payload = DefaultSerializer.serialize(outer)
    assert payload == DefaultSerializer.serialize(outer)  # content ids stay stable
    assert b"<dynamic-code>" not in payload
    loaded = pickle.loads(payload)  # plain pickle reads it, as workers do
    inner_code = next(const for const in loaded.__code__.co_consts if hasattr(const, "co_filename"))
    assert loaded.__code__.co_filename == inner_code.co_filename == "/somewhere/script.py"
    with pytest.raises(ZeroDivisionError) as raised:
        loaded(3)
    frames = [(frame.filename, frame.lineno, frame.name) for frame in _frames(raised.value)]
    assert frames[-2:] == [("/somewhere/script.py", 4, "outer"), ("/somewhere/script.py", 3, "inner")]


def _frames(error: BaseException):
    import traceback

    return traceback.extract_tb(error.__traceback__)
