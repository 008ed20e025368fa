"""Running tasks: arguments, objects, serializers, results, exceptions, profiling."""

from __future__ import annotations

import pickle
import sys
import time

import cloudpickle
import pytest

from scaler import config
from scaler.errors import ScalerError
from scaler.protocol import ObjectKind, ObjectPut, TaskResult, TaskStatus
from scaler.testing.processes import wait_for
from tests.worker.peer import Ref, TaskRef

# Functions and classes of this module travel by value, as a client's __main__ would.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def add(a, b, c=0):
    return a + b + c


def concat(left, right):
    return left + right


def current_task_id():
    from scaler import task_context as context

    return context.current_task_id


class CustomError(Exception):
    pass


class UnpicklableError(Exception):
    def __init__(self, code, detail):  # unpickling calls __init__ with args=(code,) only, and fails
        super().__init__(code)
        self.detail = detail


def fail(kind):
    if kind == "value":
        raise ValueError("boom")
    if kind == "custom":
        raise CustomError("custom boom")
    raise UnpicklableError(7, "detail")


class PrefixSerializer:
    """A custom serializer: cloudpickle behind a marker, so the test can tell who serialized what."""

    @staticmethod
    def serialize(obj):
        return b"PFX" + cloudpickle.dumps(obj)

    @staticmethod
    def deserialize(payload):
        assert payload[:3] == b"PFX", "deserialized with the wrong serializer"
        return cloudpickle.loads(payload[3:])


def value_of(result):
    assert result.status == TaskStatus.success, result.error_text
    return cloudpickle.loads(result.payload)


def test_inline_positional_and_keyword_arguments(peer, worker):
    assert value_of(peer.run(worker.identity, peer.task(add, 1, 2, c=39))) == 42


def test_object_ref_argument_is_fetched_once_per_worker(peer, worker):
    object_id = peer.put_object(cloudpickle.dumps([1, 2, 3]))
    first = peer.task(concat, Ref(object_id), [4])
    second = peer.task(concat, Ref(object_id), right=[5])
    peer.send(worker.identity, first, second)
    assert value_of(peer.result_of(first)) == [1, 2, 3, 4]
    assert value_of(peer.result_of(second)) == [1, 2, 3, 5]
    assert peer.object_requests.count(object_id) == 1
    assert peer.object_requests.count(first.function_id) == 1


def test_chunked_object_is_reassembled(peer, worker):
    peer.chunk_bytes = 1000
    data = bytes(range(256)) * 20
    object_id = peer.put_object(cloudpickle.dumps(data))
    assert value_of(peer.run(worker.identity, peer.task(concat, Ref(object_id), b"!"))) == data + b"!"


def test_task_ref_argument_is_the_stored_result(peer, worker):
    producer_id = b"p" * 16
    peer.objects[producer_id] = (ObjectKind.result, cloudpickle.dumps(41))
    assert value_of(peer.run(worker.identity, peer.task(add, TaskRef(producer_id), 1))) == 42


def test_missing_object_fails_the_task(peer, worker):
    result = peer.run(worker.identity, peer.task(concat, Ref(b"n" * 16), [1]))
    assert result.status == TaskStatus.failed
    assert isinstance(cloudpickle.loads(result.payload), ScalerError)
    assert "not found" in result.error_text


def test_custom_serializer_is_used_for_function_arguments_and_result(peer, worker):
    serializer_id = peer.put_object(cloudpickle.dumps(PrefixSerializer), ObjectKind.serializer)
    object_id = peer.put_object(PrefixSerializer.serialize([1]))
    task = peer.task(concat, Ref(object_id), right=[2], serializer=PrefixSerializer, serializer_id=serializer_id)
    result = peer.run(worker.identity, task)
    assert result.status == TaskStatus.success, result.error_text
    assert PrefixSerializer.deserialize(result.payload) == [1, 2]


def test_current_task_id_is_set_during_the_call(peer, worker):
    task = peer.task(current_task_id)
    assert value_of(peer.run(worker.identity, task)) == task.task_id


@pytest.mark.parametrize(
    "kind, expected_type, expected_text",
    [
        ("value", ValueError, "ValueError: boom"),
        ("custom", CustomError, "CustomError: custom boom"),
    ],
)
def test_exception_is_cloudpickled_with_its_traceback(peer, worker, kind, expected_type, expected_text):
    result = peer.run(worker.identity, peer.task(fail, kind))
    assert result.status == TaskStatus.failed
    error = cloudpickle.loads(result.payload)
    assert type(error) is expected_type
    assert expected_text in result.error_text
    assert "in fail" in result.error_text and "Traceback" in result.error_text


def test_exception_that_cannot_be_unpickled_becomes_runtime_error(peer, worker):
    result = peer.run(worker.identity, peer.task(fail, "unpicklable"))
    assert result.status == TaskStatus.failed
    error = pickle.loads(result.payload)
    assert type(error) is RuntimeError and "UnpicklableError" in str(error)
    assert "UnpicklableError: 7" in result.error_text


def test_large_result_travels_as_an_object(peer, worker):
    size = config.DEFAULT_INLINE_LIMIT_BYTES + 1
    task = peer.task(concat, b"x" * (size - 1), b"y")
    result = peer.run(worker.identity, task)
    assert result.status == TaskStatus.success and result.in_object and result.payload == b""
    # The ObjectPut was sent before the TaskResult, so it is already here.
    puts = [message for _, message in peer.inbox if type(message) is ObjectPut]
    assert len(puts) == 1
    put = puts[0]
    assert put.object_id == task.task_id and put.kind == ObjectKind.result
    assert put.chunk_count == 1 and put.total_size == len(put.payload)
    assert cloudpickle.loads(put.payload) == b"x" * (size - 1) + b"y"


def allocate_and_spin(megabytes, seconds):
    block = b"x" * (megabytes * 1024 * 1024)
    # spins for `seconds` of its own CPU time, which no load on the machine can shorten
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass
    return len(block)


def test_profiling_measures_time_cpu_and_peak_memory(peer, worker):
    result = peer.run(worker.identity, peer.task(allocate_and_spin, 64, 0.3, profiling=True))
    assert value_of(result) == 64 * 1024 * 1024
    # upper bound: a unit slip (ms or ns) fails, a slow machine does not
    assert 300_000 <= result.duration_us < 60_000_000
    assert 300_000 <= result.cpu_time_us <= result.duration_us * 1.5
    assert 60 * 1024 * 1024 <= result.peak_memory < 1024 * 1024 * 1024


def test_no_profiling_fields_unless_asked(peer, worker):
    result = peer.run(worker.identity, peer.task(allocate_and_spin, 1, 0.01))
    assert (result.duration_us, result.cpu_time_us, result.peak_memory) == (0, 0, 0)


def test_objects_are_fetched_again_after_retention(peer, start_cluster):
    start_cluster("--object-retention", "0.3", "--garbage-collect-interval", "0.1")
    identity, _ = peer.accept()
    object_id = peer.put_object(cloudpickle.dumps([1]))
    assert value_of(peer.run(identity, peer.task(concat, Ref(object_id), [2]))) == [1, 2]

    def fetched_again() -> bool:
        peer.pump_for(0.5)  # idle for longer than the retention: each try gives the collector a chance to evict it
        assert value_of(peer.run(identity, peer.task(concat, Ref(object_id), [3]))) == [1, 3]
        return peer.object_requests.count(object_id) == 2

    wait_for(fetched_again, 15, "the object fetched again once its retention expired", interval=0)


def make_bytes(size):
    return b"z" * size


def test_result_larger_than_a_chunk_travels_in_several_object_puts(peer, worker):
    size = config.DEFAULT_OBJECT_CHUNK_BYTES + 1000
    task = peer.task(make_bytes, size)
    result = peer.run(worker.identity, task, timeout_seconds=30)
    assert result.status == TaskStatus.success and result.in_object
    puts = sorted((message for _, message in peer.inbox if type(message) is ObjectPut), key=lambda put: put.chunk_index)
    assert [(put.chunk_index, put.chunk_count) for put in puts] == [(0, 2), (1, 2)]
    assert all(put.object_id == task.task_id and put.total_size == puts[0].total_size for put in puts)
    payload = b"".join(put.payload for put in puts)
    assert len(payload) == puts[0].total_size and cloudpickle.loads(payload) == b"z" * size


def value_once_exists(path, value):
    """As short or as long as the test wants: returns once `path` exists (bounded, in case it never does)."""
    import os

    deadline = time.monotonic() + 30
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.005)
    return value


def test_a_short_result_does_not_wait_for_the_long_task_handed_after_it(peer, worker, tmp_path):
    """A function seen to be short is handed to the processor several at a time, so a short task's result may wait
    for the results of the tasks after it (they batch); it must not wait for one of them that runs long this once."""
    done = tmp_path / "exists"
    done.touch()
    for _ in range(3):  # the worker learns that the function is short
        assert (
            peer.run(worker.identity, peer.task(value_once_exists, str(done), "warm-up")).status == TaskStatus.success
        )
    marker = tmp_path / "long-task-may-end"
    short = peer.task(value_once_exists, str(done), "short")
    long = peer.task(value_once_exists, str(marker), "long")
    peer.send(worker.identity, short, long)  # one frame: both handed to the one processor together
    try:
        result = peer.result_of(short, timeout_seconds=10)  # fails after 10 s when it waits for the long task
        assert result.status == TaskStatus.success and cloudpickle.loads(result.payload) == "short"
        assert not [m for _, m in peer.inbox if type(m) is TaskResult and m.task_id == long.task_id], "still running"
    finally:
        marker.touch()
    assert cloudpickle.loads(peer.result_of(long).payload) == "long"
