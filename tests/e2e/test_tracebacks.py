"""What a user reads when a task fails on a real cluster: the traceback of their own code (file, line, source; none of
Scaler's frames), which task failed on which worker, and a result that cannot be pickled told apart from an argument
that cannot be."""

from __future__ import annotations

import linecache
import os
import sys
import threading
from typing import Iterator, Tuple

import cloudpickle
import pytest

import scaler
from scaler import Client
from scaler.errors import RemoteTraceback, ResultSerializationError
from tests.e2e.monitor import wait_for_status

# Functions travel by value, as those of a script or a notebook do: the workers do not import this module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCALER_DIRECTORY = os.path.dirname(scaler.__file__)


def _half_of(denominator: int) -> float:
    numerator = 1
    return numerator / denominator


def divide(value: int) -> float:
    zero = value - value
    return _half_of(zero)


def unpicklable_result() -> threading.Lock:
    return threading.Lock()


def parent_of_failing_child(client: Client) -> int:
    return client.submit(divide, 3).result() + 1


@pytest.fixture
def client(cluster) -> Iterator[Client]:
    address, _ = cluster
    with Client(address) as client:
        yield client


@pytest.fixture
def worker_names(scheduler, cluster, tmp_path) -> Tuple[str, ...]:
    """The identities of the cluster's workers, as the scheduler publishes them (and scaler_top shows them)."""
    monitor = "ipc://{}".format(os.path.join(tmp_path, "monitor"))  # the scheduler fixture's
    status = wait_for_status(monitor, lambda status: len(status.workers) == 2)
    return tuple(worker.name for worker in status.workers)


def remote_traceback_of(future) -> RemoteTraceback:
    with pytest.raises(BaseException) as raised:
        future.result(timeout=60)
    cause = raised.value.__cause__
    assert isinstance(cause, RemoteTraceback), raised.value
    return cause


def frame_line(function, offset: int) -> str:
    """How a traceback names the line `offset` lines below the `def` of `function`, in this file."""
    return f'File "{__file__}", line {function.__code__.co_firstlineno + offset}, in {function.__name__}'


def test_a_failed_task_shows_the_users_frames_with_file_and_source_and_where_it_ran(client, worker_names) -> None:
    future = client.submit(divide, 5)
    cause = remote_traceback_of(future)
    text = cause.text
    assert text.startswith(f"task {future.task_id.hex()} failed on worker {cause.worker}:\n"), text
    assert cause.worker in worker_names and cause.task_id == future.task_id.hex()
    # the user's frames, outermost first, each with its file, line and source line
    assert f"{frame_line(divide, 2)}\n    return _half_of(zero)\n" in text, text
    assert f"{frame_line(_half_of, 2)}\n    return numerator / denominator\n" in text, text
    assert text.index("in divide") < text.index("in _half_of") and text.rstrip().endswith("division by zero")
    assert "<dynamic-code>" not in text and SCALER_DIRECTORY not in text, text  # none of Scaler's frames


def test_source_lines_the_worker_cannot_read_come_from_the_client(client) -> None:
    """A function from a file only the client has (a notebook cell, which IPython keeps in linecache): the worker
    names the file and line, the client adds the source line."""
    source = "def cell(x):\n    y = x - x\n    return x / y\n"
    filename = os.path.join(os.sep, "no-such-directory", f"cell-{os.getpid()}.py")  # nowhere on the worker
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)
    try:
        text = remote_traceback_of(client.submit(namespace["cell"], 4)).text
    finally:
        del linecache.cache[filename]
    assert f'  File "{filename}", line 3, in cell\n    return x / y\nZeroDivisionError' in text, text


def test_a_nested_task_failure_shows_both_tracebacks_without_scalers_frames(client) -> None:
    text = remote_traceback_of(client.submit(parent_of_failing_child, client)).text
    assert f"{frame_line(_half_of, 2)}\n    return numerator / denominator\n" in text, text  # the child's
    assert f"{frame_line(parent_of_failing_child, 1)}\n" in text, text  # the parent's, waiting on the child
    assert text.count(" failed on worker W|") == 2, text  # each says where it ran
    assert SCALER_DIRECTORY not in text, text  # not the nested client's future.result()


def test_a_result_that_cannot_be_pickled_is_told_apart_from_an_argument_that_cannot(client, worker_names) -> None:
    future = client.submit(unpicklable_result)
    with pytest.raises(ResultSerializationError) as raised:
        future.result(timeout=60)
    message = str(raised.value)
    task = future.task_id.hex()
    assert message.startswith(f"could not pickle the result of task {task} (unpicklable_result) on worker "), message
    assert raised.value.worker in worker_names, message
    assert message.endswith("TypeError: cannot pickle '_thread.lock' object"), message
    assert SCALER_DIRECTORY not in raised.value.__cause__.text  # nothing of the serializer's insides

    with pytest.raises(TypeError, match="cannot pickle '_thread.lock' object") as raised_here:
        client.submit(divide, threading.Lock())
    assert not isinstance(raised_here.value, ResultSerializationError)
    notes = getattr(raised_here.value, "__notes__", [])
    assert notes == ["Scaler: could not serialize argument 0 here on the client; the task was not submitted"], notes
