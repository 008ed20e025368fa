"""The pieces of a readable task traceback, without a cluster: functions pickled by value keep their file name, the
worker's text leaves Scaler's frames out, the client fills in the source lines the worker could not read."""

from __future__ import annotations

import linecache
import os
import pickle
import sys

import pytest

from scaler.serializer import DefaultSerializer
from scaler.tracebacks import fill_in_source, task_traceback

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


def _call_through_scaler(function, *args):
    """`function` called from a frame of Scaler's own (as the processor calls a task's function)."""
    from scaler import task_context

    namespace = {"function": function, "args": args}
    code = compile("def call():\n    return function(*args)\n", task_context.__file__, "exec")
    exec(code, namespace)
    return namespace["call"]()


def _raise_value_error() -> None:
    raise ValueError("inner")


def _fail_after_catching() -> None:
    try:
        _call_through_scaler(_raise_value_error)
    except ValueError as error:
        raise KeyError("outer") from error


def test_the_worker_text_keeps_the_users_frames_and_causes_and_leaves_scalers_out() -> None:
    with pytest.raises(KeyError) as raised:
        _call_through_scaler(_fail_after_catching)
    text = task_traceback(raised.value)
    assert "scaler" + os.sep not in text.replace(HERE, ""), text
    assert f'File "{HERE}"' in text and "in _fail_after_catching" in text and "in _raise_value_error" in text
    assert 'raise ValueError("inner")' in text  # the worker reads the lines of the frames it keeps
    assert "The above exception was the direct cause of the following exception" in text
    assert text.rstrip().endswith("KeyError: 'outer'")


def test_the_client_fills_in_the_source_lines_the_worker_could_not_read() -> None:
    filename = f"/no-such-directory/cell-{os.getpid()}.py"
    worker_text = (
        "task 00ff failed on worker W|host|1|ab:\n"
        "Traceback (most recent call last):\n"
        f'  File "{filename}", line 4, in outer\n'
        f'  File "{filename}", line 3, in inner\n'
        f'  File "{HERE}", line 1, in read_by_the_worker\n'
        "    the worker's own line\n"
        "ZeroDivisionError: division by zero\n"
    )
    assert fill_in_source(worker_text) == worker_text  # the client has no copy either
    linecache.cache[filename] = (len(SOURCE), None, SOURCE.splitlines(True), filename)
    try:
        filled = fill_in_source(worker_text)
    finally:
        del linecache.cache[filename]
    assert filled == (
        "task 00ff failed on worker W|host|1|ab:\n"
        "Traceback (most recent call last):\n"
        f'  File "{filename}", line 4, in outer\n'
        "    return inner(x - x)\n"
        f'  File "{filename}", line 3, in inner\n'
        "    return 1 / y\n"
        f'  File "{HERE}", line 1, in read_by_the_worker\n'
        "    the worker's own line\n"
        "ZeroDivisionError: division by zero\n"
    )


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception groups")
def test_exception_groups_keep_their_margins() -> None:
    filename = f"/no-such-directory/group-{os.getpid()}.py"
    linecache.cache[filename] = (len(SOURCE), None, SOURCE.splitlines(True), filename)
    try:
        filled = fill_in_source(f'  |   File "{filename}", line 3, in inner\n  | ZeroDivisionError: division by zero')
    finally:
        del linecache.cache[filename]
    frame = f'  |   File "{filename}", line 3, in inner\n'
    assert filled == f"{frame}  |     return 1 / y\n  | ZeroDivisionError: division by zero"
