"""Connecting, submitting, results and errors, objects and map, against the protocol test peer."""

from __future__ import annotations

import concurrent.futures
import functools
import pickle
import threading
import time
from typing import Optional

import cloudpickle
import pytest

from scaler.client import Client, ObjectReference
from scaler.config import DEFAULT_CLIENT_CONNECT_TIMEOUT_SECONDS, DEFAULT_INLINE_LIMIT_BYTES
from scaler.errors import ProtocolVersionError, RemoteTraceback, ScalerError, TaskRefusedError, WorkerDiedError
from scaler.protocol import (
    ArgumentKind,
    ObjectDelete,
    ObjectKind,
    ObjectRequest,
    Task,
    TaskCancel,
    TaskResult,
    TaskStatus,
)
from scaler.testing.processes import free_tcp_address, wait_for
from scaler.testing.protocol_peer import ProtocolPeer


def inc(value: int) -> int:
    return value + 1


def add(a, b):
    return a + b


def divide(a: float, b: float) -> float:
    return a / b


def describe(*args, **kwargs):
    return args, kwargs


def size_of(data: bytes) -> int:
    return len(data)


def big_result(size: int) -> bytes:
    return b"r" * size


class Counter:
    def __init__(self) -> None:
        self.base = 10

    def plus(self, value: int) -> int:
        return self.base + value


# ---- connecting ------------------------------------------------------------------------------------------------------


def test_unreachable_scheduler_times_out() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="no answer from the scheduler"):
        Client(free_tcp_address(), timeout_seconds=0.5)
    # far from both 0.5 s and the default: timeout_seconds was honoured, whatever the machine's load
    assert time.monotonic() - started < DEFAULT_CLIENT_CONNECT_TIMEOUT_SECONDS / 2


def test_silent_scheduler_times_out() -> None:
    with ProtocolPeer(answer_hello=False) as peer:
        with pytest.raises(TimeoutError):
            Client(peer.address, timeout_seconds=0.3)


def test_version_refusal_raises_protocol_version_error() -> None:
    reason = "protocol version 1 is not supported: this scheduler speaks version 2"
    with ProtocolPeer(refuse=reason) as peer:
        with pytest.raises(ProtocolVersionError, match="speaks version 2"):
            Client(peer.address, timeout_seconds=5)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="tcp://"):
        Client("localhost:1234")
    with pytest.raises(TypeError, match="serializer"):
        Client("tcp://127.0.0.1:1", serializer=object())
    with pytest.raises(ValueError, match="timeout_seconds"):
        Client("tcp://127.0.0.1:1", timeout_seconds=0)
    with pytest.raises(ValueError, match="cannot connect"):
        Client("tcp://127.0.0.1:notaport", timeout_seconds=1)


def test_heartbeats_are_sent(peer: ProtocolPeer, client: Client) -> None:
    from scaler.protocol import ClientHeartbeat

    wait_for(lambda: len(peer.messages(ClientHeartbeat)) >= 2, 5, "two heartbeats")


# ---- submit ----------------------------------------------------------------------------------------------------------


def test_submit_returns_result(client: Client) -> None:
    future = client.submit(inc, 41)
    assert future.result(10) == 42
    assert isinstance(future.task_id, bytes) and len(future.task_id) == 16


def test_submit_keyword_arguments(peer: ProtocolPeer, client: Client) -> None:
    assert client.submit(describe, 1, 2, x=3, y="four").result(10) == ((1, 2), {"x": 3, "y": "four"})
    (task,) = peer.messages(Task)
    assert [argument.name for argument in task.args] == ["", "", "x", "y"]


def test_submit_rejects_non_callable_at_the_call(peer: ProtocolPeer, client: Client) -> None:
    with pytest.raises(TypeError, match="callable"):
        client.submit(42, 1)
    assert_nothing_was_sent(peer, client)


def test_profiling_keyword_is_not_forwarded(client: Client) -> None:
    future = client.submit(describe, 1, profiling=True)
    assert future.result(10) == ((1,), {})
    info = future.profiling_info()
    assert info.duration_us == 1500 and info.duration_s == pytest.approx(0.0015)
    assert info.cpu_time_s == pytest.approx(0.001) and info.peak_memory == 4096


def test_profiling_info_errors(client: Client) -> None:
    future = client.submit(inc, 1)
    future.result(10)
    with pytest.raises(concurrent.futures.InvalidStateError, match="profiling=True"):
        future.profiling_info()
    with ProtocolPeer(execute=False) as holding, Client(holding.address, profiling=True) as profiled:
        pending = profiled.submit(inc, 1)
        with pytest.raises(concurrent.futures.InvalidStateError, match="result\\(\\) first"):
            pending.profiling_info()
        wait_for(lambda: pending.task_id in holding.held, 5, "the task at the peer")
        holding.release(pending.task_id)
        assert pending.result(10) == 2 and pending.profiling_info().duration_us == 1500


def test_exception_keeps_type_and_remote_traceback(client: Client) -> None:
    future = client.submit(divide, 1, 0)
    with pytest.raises(ZeroDivisionError) as caught:
        future.result(10)
    cause = caught.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "divide" in cause.text and "ZeroDivisionError" in cause.text


def test_worker_died_refused_and_not_found_statuses() -> None:
    statuses = [TaskStatus.worker_died, TaskStatus.refused, TaskStatus.not_found]

    def answer(task: Task) -> TaskResult:
        status = statuses.pop(0)
        return TaskResult(task_id=task.task_id, status=status, error_text="because " + status.name)

    with ProtocolPeer(answer=answer) as peer, Client(peer.address) as client:
        died = client.submit(inc, 1)
        refused = client.submit(inc, 1)
        unknown = client.submit(inc, 1)
        with pytest.raises(ScalerError, match="does not know task"):
            unknown.result(10)
        with pytest.raises(WorkerDiedError, match="because worker_died"):
            died.result(10)
        with pytest.raises(TaskRefusedError, match="because refused"):
            refused.result(10)


def test_function_is_shipped_once_for_ten_thousand_submits(peer: ProtocolPeer, client: Client) -> None:
    futures = [client.submit(inc, i) for i in range(10_000)]
    assert [future.result(30) for future in futures] == [i + 1 for i in range(10_000)]
    assert len(peer.puts_of_kind(ObjectKind.function)) == 1
    assert peer.puts_of_kind(ObjectKind.function)[0].name == "inc"
    assert len(peer.messages(Task)) == 10_000
    assert max(peer.counts().values()) == 10_000
    assert len(set(peer.frames_of(Task))) < 10_000 / 10  # batched: many tasks per frame


def test_submits_of_one_function_with_other_settings_carry_theirs(peer: ProtocolPeer, client: Client) -> None:
    """submit() remembers a function's setup between calls (tasks.SubmitSite): a call with another profiling
    setting or from a view with other options must not reuse the last one's."""
    assert client.submit(inc, 1).result(10) == 2
    assert client.submit(inc, 2, profiling=True).result(10) == 3
    assert client.options(priority=3).submit(inc, 3).result(10) == 4
    assert client.submit(inc, 4).result(10) == 5
    tasks = peer.messages(Task)
    assert [task.profiling for task in tasks] == [False, True, False, False]
    assert [task.priority for task in tasks] == [0, 0, 3, 0]
    assert len({task.function_id for task in tasks}) == 1
    with pytest.raises(TypeError):
        client.submit(inc, 1, 2)  # the remembered signature still checks every call


def test_same_content_is_shipped_once(peer: ProtocolPeer, client: Client) -> None:
    counter = Counter()
    partials = [functools.partial(add, 1) for _ in range(20)]  # distinct objects, identical bytes
    assert [client.submit(counter.plus, i).result(10) for i in range(20)] == [10 + i for i in range(20)]
    assert [client.submit(p, i).result(10) for i, p in enumerate(partials)] == [1 + i for i in range(20)]
    assert len(peer.puts_of_kind(ObjectKind.function)) == 2


def test_large_argument_becomes_an_object_and_is_deleted_after(peer: ProtocolPeer, client: Client) -> None:
    data = b"x" * (DEFAULT_INLINE_LIMIT_BYTES + 1)
    assert client.map(size_of, [(data,)] * 3) == [len(data)] * 3  # one send: three tasks need one object
    (put,) = peer.puts_of_kind(ObjectKind.object)
    for task in peer.messages(Task):
        assert task.args[0].kind == ArgumentKind.object_ref and task.args[0].data == put.object_id
    wait_for(lambda: any(put.object_id in m.object_ids for m in peer.messages(ObjectDelete)), 5, "ObjectDelete")
    # the scheduler no longer has it: the next use ships it again
    assert client.submit(size_of, data).result(10) == len(data)
    assert len(peer.puts_of_kind(ObjectKind.object)) == 2


def test_large_object_travels_in_chunks(monkeypatch, peer: ProtocolPeer, client: Client) -> None:
    monkeypatch.setattr("scaler.config.DEFAULT_OBJECT_CHUNK_BYTES", 100_000)  # read as each object is sent
    data = b"y" * 250_000
    assert client.submit(size_of, data).result(10) == 250_000
    puts = peer.puts_of_kind(ObjectKind.object)
    assert [(p.chunk_index, p.chunk_count) for p in puts] == [(0, 3), (1, 3), (2, 3)]
    assert all(p.total_size > 250_000 for p in puts)


def test_large_result_is_fetched_then_deleted(peer: ProtocolPeer, client: Client) -> None:
    future = client.submit(big_result, DEFAULT_INLINE_LIMIT_BYTES * 2)
    assert future.result(10) == b"r" * (DEFAULT_INLINE_LIMIT_BYTES * 2)
    assert any(future.task_id in m.object_ids for m in peer.messages(ObjectRequest))
    wait_for(lambda: any(future.task_id in m.object_ids for m in peer.messages(ObjectDelete)), 5, "ObjectDelete")


def test_futures_work_with_wait_and_as_completed(client: Client) -> None:
    futures = [client.submit(inc, i) for i in range(50)]
    done, not_done = concurrent.futures.wait(futures, timeout=10)
    assert len(done) == 50 and not not_done
    assert sorted(f.result() for f in concurrent.futures.as_completed(futures, timeout=10)) == list(range(1, 51))
    seen = []
    futures[0].add_done_callback(seen.append)
    assert seen == [futures[0]]


# ---- send_object -----------------------------------------------------------------------------------------------------


def test_send_object_is_shipped_once_and_resolved(peer: ProtocolPeer, client: Client) -> None:
    reference = client.send_object([1, 2, 3, 4, 5], name="large_object")
    assert isinstance(reference, ObjectReference) and reference.name == "large_object"
    assert client.submit(add, reference, [6]).result(10) == [1, 2, 3, 4, 5, 6]
    assert client.submit(add, a=reference, b=[7]).result(10) == [1, 2, 3, 4, 5, 7]
    assert client.map(add, [(reference, [i]) for i in range(3)]) == [[1, 2, 3, 4, 5, i] for i in range(3)]
    (put,) = peer.puts_of_kind(ObjectKind.object)
    assert put.name == "large_object" and put.object_id == reference.object_id
    # nested in a list it is not resolved: the task receives the reference itself
    assert client.submit(describe, [reference]).result(10) == (([reference],), {})


def test_send_object_name_must_be_a_string(client: Client) -> None:
    with pytest.raises(TypeError, match="send_object\\(obj, name=None\\)"):
        client.send_object("large_object", [1, 2, 3])


# ---- map -------------------------------------------------------------------------------------------------------------


def test_map_keeps_order(peer: ProtocolPeer, client: Client) -> None:
    assert client.map(add, [(i, 10 * i) for i in range(500)]) == [11 * i for i in range(500)]
    assert client.starmap(inc, [[1], [2]]) == [2, 3]
    assert client.map(inc, []) == []
    assert len(peer.puts_of_kind(ObjectKind.function)) == 2


def test_map_raises_the_first_failure(client: Client) -> None:
    with pytest.raises(ZeroDivisionError):
        client.map(divide, [(1, 1), (1, 0), (2, 1)])


def test_map_validates_every_element_before_sending(peer: ProtocolPeer, client: Client) -> None:
    with pytest.raises(TypeError, match="element 2 of iterable"):
        client.map(inc, [(1,), (2,), 3])
    with pytest.raises(TypeError, match="callable"):
        client.map(None, [(1,)])
    assert_nothing_was_sent(peer, client)


def assert_nothing_was_sent(peer: ProtocolPeer, client: Client) -> None:
    """The connection keeps order: once a later task is answered, anything sent before it has arrived."""
    assert client.submit(inc, 0).result(10) == 1
    assert len(peer.messages(Task)) == 1


def test_unpicklable_argument_raises_at_the_call(peer: ProtocolPeer, client: Client) -> None:
    with pytest.raises(TypeError):
        client.submit(describe, threading.Lock())
    assert_nothing_was_sent(peer, client)


def test_result_timeout_and_callbacks() -> None:
    with ProtocolPeer(execute=False) as peer, Client(peer.address) as client:
        future = client.submit(inc, 1)
        with pytest.raises(concurrent.futures.TimeoutError):
            future.result(timeout=0.05)
        with pytest.raises(concurrent.futures.TimeoutError):
            future.exception(timeout=0)
        seen = []
        future.add_done_callback(lambda done: seen.append(done.result()))
        future.add_done_callback(lambda done: 1 / 0)  # logged, not raised, and the next callbacks still run
        future.add_done_callback(lambda done: seen.append("last"))
        wait_for(lambda: future.task_id in peer.held, 5, "the task at the peer")
        peer.release(future.task_id)
        assert future.result(10) == 2 and future.exception() is None
        wait_for(lambda: seen == [2, "last"], 5, "the callbacks")


def test_many_threads_submit_at_once(client: Client) -> None:
    def work(offset: int) -> list:
        return [f.result(30) for f in [client.submit(add, offset, i) for i in range(300)]]

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(work, range(0, 6000, 1000)))
    assert results == [[offset + i for i in range(300)] for offset in range(0, 6000, 1000)]


def test_map_failure_cancels_the_other_tasks() -> None:
    def answer(task: Task) -> Optional[TaskResult]:
        if task.args[0].data == inline_one:
            return TaskResult(task_id=task.task_id, status=TaskStatus.failed, payload=cloudpickle.dumps(KeyError("x")))
        return None  # held: never finishes on its own

    inline_one = pickle.dumps(1, protocol=pickle.HIGHEST_PROTOCOL)
    with ProtocolPeer(execute=False, answer=answer) as peer, Client(peer.address) as client:
        with pytest.raises(KeyError):
            client.map(inc, [(0,), (1,), (2,)])
        wait_for(lambda: peer.messages(TaskCancel), 5, "TaskCancel")
        held = [task.task_id for task in peer.messages(Task) if task.args[0].data != inline_one]
        assert sorted(peer.messages(TaskCancel)[0].task_ids) == sorted(held)


def test_large_result_crossing_a_cancel_is_deleted_not_fetched() -> None:
    with ProtocolPeer(execute=False, answer_cancels=False) as peer, Client(peer.address) as client:
        future = client.submit(big_result, DEFAULT_INLINE_LIMIT_BYTES * 2)
        wait_for(lambda: future.task_id in peer.held, 5, "the task at the peer")
        assert future.cancel()
        peer.release(future.task_id)
        wait_for(lambda: any(future.task_id in m.object_ids for m in peer.messages(ObjectDelete)), 5, "ObjectDelete")
        assert not peer.messages(ObjectRequest)
