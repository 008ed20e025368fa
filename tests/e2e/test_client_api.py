"""Every public call of the Client, end to end: a scheduler and workers started from the CLIs, as on other hosts."""

from __future__ import annotations

import concurrent.futures
import os

import pytest

from scaler import Client, ObjectReference, ScalerFuture, Serializer
from scaler.errors import DisconnectedError, MissingObjectError, ProcessorDiedError, RemoteTraceback
from scaler.testing.processes import wait_for
from tests.e2e.monitor import counters, wait_for_status


def _fail(message: str) -> None:
    raise KeyError(message)


def _die() -> None:
    os._exit(3)


class _TaggingSerializer(Serializer):
    """Marks every payload, so the test can tell it was used for function, arguments and result alike."""

    @staticmethod
    def serialize(obj: object) -> bytes:
        import cloudpickle

        return b"T" + cloudpickle.dumps(obj)

    @staticmethod
    def deserialize(payload: bytes) -> object:
        import cloudpickle

        assert payload[:1] == b"T", "payload not made by _TaggingSerializer"
        return cloudpickle.loads(payload[1:])


@pytest.fixture
def client(cluster):
    address, _ = cluster
    with Client(address, timeout_seconds=20) as connected:
        yield connected


def test_submit_map_starmap(client: Client) -> None:
    future = client.submit(pow, 2, 10)
    assert isinstance(future, ScalerFuture) and isinstance(future, concurrent.futures.Future)
    assert future.result(timeout=30) == 1024 and len(future.task_id) == 16
    assert client.submit(sorted, [3, 1, 2], reverse=True).result(timeout=30) == [3, 2, 1]
    assert client.map(divmod, [(7, 2), (9, 4)]) == [(3, 1), (2, 1)]
    assert client.starmap(max, iter([(1, 5), (7, 2)])) == [5, 7]


def test_futures_work_with_concurrent_futures_helpers(client: Client) -> None:
    futures = [client.submit(abs, -n) for n in range(50)]
    done, not_done = concurrent.futures.wait(futures, timeout=30)
    assert not not_done and len(done) == 50
    assert sorted(f.result() for f in concurrent.futures.as_completed(futures, timeout=30)) == list(range(50))
    seen: list = []
    future = client.submit(len, "abc")
    future.add_done_callback(lambda f: seen.append(f.result()))
    future.result(timeout=30)
    # the result wakes this thread before the callbacks run (as in concurrent.futures): poll for the callback
    wait_for(lambda: seen == [3], 5, "the done callback")


def test_exception_keeps_its_type_and_the_remote_traceback(client: Client) -> None:
    with pytest.raises(KeyError, match="missing") as raised:
        client.submit(_fail, "missing").result(timeout=30)
    cause = raised.value.__cause__
    assert isinstance(cause, RemoteTraceback) and "_fail" in cause.text and "KeyError" in cause.text


def test_a_task_that_kills_its_process_fails_and_the_worker_goes_on(client: Client) -> None:
    with pytest.raises(ProcessorDiedError):
        client.submit(_die).result(timeout=60)
    assert client.submit(int, "7").result(timeout=60) == 7


def test_send_object_graphs_and_profiling(client: Client) -> None:
    ref = client.send_object(list(range(100_000)), name="numbers")
    assert isinstance(ref, ObjectReference)
    assert client.submit(sum, ref).result(timeout=30) == sum(range(100_000))
    assert client.map(len, [(ref,), (ref,)]) == [100_000, 100_000]
    graph = {"x": 4, "y": (pow, "x", 2), "z": (sum, ["x", "y"]), "n": (len, ref)}
    assert client.get(graph, keys=["z", "n"]) == {"z": 20, "n": 100_000}
    futures = client.get(graph, keys=["y"], block=False)
    assert futures["y"].result(timeout=30) == 16
    assert [f.result(timeout=30) for f in client.submit_graph(graph, keys=["z", "y"])] == [20, 16]
    profiled = client.submit(sum, range(1_000_000), profiling=True)
    assert profiled.result(timeout=30) == sum(range(1_000_000))
    info = profiled.profiling_info()
    # a task left unprofiled reports zeros: a measured one took time and CPU (peak memory may stay 0: RSS growth)
    assert info.duration_us > 0 and info.duration_s == info.duration_us / 1e6
    assert info.cpu_time_s > 0


def test_custom_serializer_is_used_end_to_end(cluster) -> None:
    address, _ = cluster
    with Client(address, serializer=_TaggingSerializer, timeout_seconds=20) as client:
        assert client.submit(str.upper, "abc").result(timeout=30) == "ABC"
        ref = client.send_object({"k": 1})
        assert client.submit(dict.get, ref, "k").result(timeout=30) == 1


def test_bad_arguments_raise_at_the_call(client: Client) -> None:
    with pytest.raises(TypeError):
        client.submit(42)
    with pytest.raises(TypeError):
        client.map(abs, [1, 2])
    with pytest.raises(TypeError):
        client.send_object([1], name=3)
    with pytest.raises(TypeError):
        client.submit(abs, 1, profiling="yes")
    with pytest.raises(ValueError):
        client.get({"a": (abs, "b"), "b": (abs, "a")}, keys=["a"])


def test_clear_cancels_and_disconnect_is_final(cluster) -> None:
    address, _ = cluster
    client = Client(address, timeout_seconds=20)
    ref = client.send_object(b"x" * 10)
    client.clear()
    with pytest.raises(MissingObjectError, match="deleted by clear"):
        client.submit(len, ref)  # the object was deleted with clear(): refused at the call
    assert client.submit(len, "ok").result(timeout=30) == 2
    client.disconnect()
    client.disconnect()
    with pytest.raises(DisconnectedError):
        client.submit(len, "late")


def test_one_function_submitted_many_times_is_shipped_once(scheduler, cluster, tmp_path) -> None:
    address, scheduler_process = scheduler
    monitor = f"ipc://{tmp_path}/monitor"
    assert monitor in scheduler_process.output()
    with Client(address, timeout_seconds=20) as client:
        before = counters(wait_for_status(monitor, lambda s: True).received).get("ObjectPut", 0)
        futures = [client.submit(abs, -n) for n in range(20_000)]
        assert [f.result(timeout=60) for f in futures] == list(range(20_000))
        status = wait_for_status(monitor, lambda s: counters(s.received).get("Task", 0) >= 20_000)
    # one ObjectPut for the function (and one for the client's serializer at most), not one per task
    assert counters(status.received).get("ObjectPut", 0) - before <= 2
