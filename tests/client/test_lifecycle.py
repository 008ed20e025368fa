"""Cancel, clear, disconnect, shutdown, Goodbye, custom serializers, pickling and nested tasks."""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import signal
import struct
import time
from typing import Any

import cloudpickle
import pytest

from scaler import task_context as context
from scaler.client import Client, Serializer
from scaler.client import client as client_module
from scaler.errors import DisconnectedError, ScalerError, SchedulerGoneError
from scaler.protocol import (
    ClientDisconnect,
    Goodbye,
    Hello,
    ObjectDelete,
    ObjectKind,
    Task,
    TaskCancel,
)
from scaler.testing.processes import wait_for
from scaler.testing.protocol_peer import ProtocolPeer


@pytest.fixture(autouse=True)
def close_shared_connections():
    """Clients unpickled in a process share one connection, kept open for the process's life (a worker's next tasks
    use it). Here the process is pytest's: what a test opened is closed after it, or its IO thread would go on
    reconnecting to a peer that is gone while later tests run."""
    yield
    with client_module._shared_lock:
        shared = list(client_module._shared_connections.values())
        client_module._shared_connections.clear()
    for connection in shared:
        connection.close(shutdown_cluster=False, timeout_seconds=0)


def inc(value: int) -> int:
    return value + 1


def fibonacci(client: Client, n: int) -> int:
    if n == 0:
        return 0
    elif n == 1:
        return 1
    a = client.submit(fibonacci, client, n - 1)
    b = client.submit(fibonacci, client, n - 2)
    return a.result() + b.result()


# ---- cancel ----------------------------------------------------------------------------------------------------------


def test_cancel_before_the_result() -> None:
    with ProtocolPeer(execute=False) as peer, Client(peer.address) as client:
        future = client.submit(inc, 1)
        assert future.cancel() is True
        assert future.cancelled() and future.done()
        done, _ = concurrent.futures.wait([future], timeout=1)  # a cancelled future counts as done at once
        assert done == {future}
        with pytest.raises(concurrent.futures.CancelledError):
            future.result(1)
        wait_for(lambda: any(future.task_id in m.task_ids for m in peer.messages(TaskCancel)), 5, "TaskCancel")
        assert future.cancel() is True  # cancelling again is harmless


def test_a_result_crossing_the_cancel_is_ignored() -> None:
    with ProtocolPeer(execute=False, answer_cancels=False) as peer, Client(peer.address) as client:
        future = client.submit(inc, 1)
        wait_for(lambda: future.task_id in peer.held, 5, "the task at the peer")
        assert future.cancel() is True
        wait_for(lambda: peer.messages(TaskCancel), 5, "TaskCancel")
        peer.release(future.task_id)  # its success result arrives after the client decided to cancel
        later = client.submit(inc, 2)
        wait_for(lambda: later.task_id in peer.held, 5, "a later task")
        peer.release(later.task_id)
        assert later.result(10) == 3  # so the crossing result has been handled too
        assert future.cancelled()


def test_cancel_after_done_returns_false(client: Client) -> None:
    future = client.submit(inc, 1)
    assert future.result(10) == 2
    assert future.cancel() is False
    assert not future.cancelled()


def test_canceled_answer_from_the_scheduler_cancels_the_future() -> None:
    with ProtocolPeer(execute=False) as peer, Client(peer.address) as client:
        future = client.submit(inc, 1)
        wait_for(lambda: future.task_id in peer.held, 5, "the task at the peer")
        client._connection.cancel_task(future.task_id)  # as if a parent task was canceled at the scheduler
        with pytest.raises(concurrent.futures.CancelledError):
            future.result(10)


def test_clear_cancels_tasks_and_deletes_objects() -> None:
    with ProtocolPeer(execute=False) as peer, Client(peer.address) as client:
        reference = client.send_object("payload")
        futures = [client.submit(inc, i) for i in range(5)]
        client.clear()
        assert all(future.cancelled() for future in futures)
        wait_for(lambda: peer.messages(ObjectDelete), 5, "ObjectDelete")
        (deleted,) = peer.messages(ObjectDelete)
        assert reference.object_id in deleted.object_ids
        (cancel,) = peer.messages(TaskCancel)
        assert set(cancel.task_ids) == {future.task_id for future in futures}
        again = client.submit(inc, 1)  # the function was deleted too: it is shipped again
        wait_for(lambda: again.task_id in peer.held, 5, "the task at the peer")
        assert len(peer.puts_of_kind(ObjectKind.function)) == 2


# ---- disconnect and shutdown -----------------------------------------------------------------------------------------


def test_disconnect_is_idempotent_and_later_calls_raise_at_once(peer: ProtocolPeer) -> None:
    client = Client(peer.address)
    client.disconnect()
    client.disconnect()
    assert len(peer.messages(ClientDisconnect)) == 1
    assert not peer.messages(ClientDisconnect)[0].shutdown_cluster
    for call in (
        lambda: client.submit(inc, 1),
        lambda: client.map(inc, [(1,)]),
        lambda: client.get({"a": 1}, ["a"]),
        lambda: client.submit_graph({"a": 1}, ["a"]),
        lambda: client.send_object(1),
        lambda: client.clear(),
        lambda: client.shutdown(),
    ):
        with pytest.raises(DisconnectedError):
            call()
    assert issubclass(DisconnectedError, ScalerError)


def test_disconnect_cancels_unfinished_futures() -> None:
    with ProtocolPeer(execute=False) as peer:
        with Client(peer.address) as client:
            future = client.submit(inc, 1)
        assert future.cancelled()


def test_shutdown_refused_raises_and_the_client_stays_usable(peer: ProtocolPeer, client: Client) -> None:
    with pytest.raises(ValueError, match="protected mode"):
        client.shutdown()
    assert client.submit(inc, 1).result(10) == 2


def test_shutdown_accepted_returns() -> None:
    with ProtocolPeer(protected=False) as peer:
        client = Client(peer.address)
        client.shutdown()
        (message,) = peer.messages(ClientDisconnect)
        assert message.shutdown_cluster
        with pytest.raises(DisconnectedError):
            client.submit(inc, 1)
        client.disconnect()


def test_goodbye_fails_pending_futures() -> None:
    with ProtocolPeer(execute=False) as peer:
        client = Client(peer.address)
        future = client.submit(inc, 1)
        wait_for(lambda: future.task_id in peer.held, 5, "the task at the peer")
        peer.send_to_all(Goodbye(reason="scheduler stopping"))
        with pytest.raises(SchedulerGoneError, match="scheduler stopping"):
            future.result(10)
        with pytest.raises(DisconnectedError, match="scheduler stopping"):
            client.submit(inc, 1)
        client.disconnect()


def test_silent_scheduler_fails_pending_futures_within_the_clients_timeout() -> None:
    # The scheduler's own client timeout (10 minutes here) does not matter: the client's timeout_seconds decides.
    with ProtocolPeer(execute=False, heartbeat_interval_ms=1000, peer_timeout_ms=600_000) as peer:
        client = Client(peer.address, timeout_seconds=1.5)
        future = client.submit(inc, 1)
        wait_for(lambda: future.task_id in peer.held, 5, "the task at the peer")
        peer.close()  # stops answering anything
        silent_since = time.monotonic()
        with pytest.raises(SchedulerGoneError, match="no message from the scheduler") as raised:
            future.result(30)
        assert isinstance(raised.value, TimeoutError)
        # 1.5 s window from the last message heard, which came before the peer closed; 1 s for a loaded machine
        assert time.monotonic() - silent_since < 1.5 + 1.0
        client.disconnect()


# ---- custom serializer -----------------------------------------------------------------------------------------------


class TaggingSerializer(Serializer):
    """Integers as 4 bytes behind b"I", everything else cloudpickled behind b"G", as in the docs' example."""

    @staticmethod
    def serialize(obj: Any) -> bytes:
        if type(obj) is int:
            return b"I" + struct.pack("I", obj)
        return b"G" + cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        if payload[:1] == b"I":
            return struct.unpack("I", payload[1:])[0]
        return cloudpickle.loads(payload[1:])


def test_custom_serializer_is_shipped_once_and_used_everywhere(peer: ProtocolPeer) -> None:
    with Client(peer.address, serializer=TaggingSerializer) as client:
        assert client.submit(inc, 41).result(10) == 42
        assert client.map(inc, [(1,), (2,)]) == [2, 3]
        (serializer_put,) = peer.puts_of_kind(ObjectKind.serializer)
        assert cloudpickle.loads(serializer_put.payload) is TaggingSerializer
        (function_put,) = peer.puts_of_kind(ObjectKind.function)
        assert function_put.payload[:1] == b"G"
        for task in peer.messages(Task):
            assert task.serializer_id == serializer_put.object_id
            assert task.args[0].data[:1] == b"I"
        assert peer.finished[peer.messages(Task)[0].task_id][2] == b"I" + struct.pack("I", 42)


def test_default_serializer_leaves_serializer_id_empty(peer: ProtocolPeer, client: Client) -> None:
    client.submit(inc, 1).result(10)
    assert peer.messages(Task)[0].serializer_id == b""
    assert not peer.puts_of_kind(ObjectKind.serializer)


def test_serializer_instances_work_and_abstract_ones_are_refused(peer: ProtocolPeer) -> None:
    with Client(peer.address, serializer=TaggingSerializer()) as client:
        assert client.submit(inc, 1).result(10) == 2

    class Incomplete(Serializer):
        @staticmethod
        def serialize(obj: Any) -> bytes:
            return b""

    with pytest.raises(TypeError, match="deserialize"):
        Client(peer.address, serializer=Incomplete)


# ---- pickling and nested tasks ---------------------------------------------------------------------------------------


def test_a_client_pickles_its_settings_only(peer: ProtocolPeer) -> None:
    options = dict(
        serializer=TaggingSerializer,
        profiling=True,
        timeout_seconds=7,
        reconnect_seconds=9,
        tcp_keepalive_idle_seconds=30,
    )
    with Client(peer.address, **options) as client:
        copy = cloudpickle.loads(cloudpickle.dumps(client))
        assert copy.__getstate__() == {
            "address": peer.address,
            "serializer": TaggingSerializer,
            "profiling": True,
            "timeout_seconds": 7.0,
            "curve_files": (None, None),
            "reconnect_seconds": 9.0,
            "stream_output": False,
            "keepalive": (True, 30, 10, 6),
            "options": {"resources": None, "priority": 0, "retries": 0, "timeout_seconds": None, "profiling": None},
        }
        assert "not connected yet" in repr(copy)


def test_an_unpickled_client_connects_lazily_and_tags_its_parent(peer: ProtocolPeer, client: Client) -> None:
    copy = pickle.loads(pickle.dumps(client))
    context.current_task_id = b"p" * 16
    try:
        future = copy.submit(inc, 1)
    finally:
        context.current_task_id = None
    assert future.result(10) == 2
    assert peer.messages(Task)[-1].parent_task_id == b"p" * 16
    assert client.submit(inc, 1).result(10) == 2
    assert peer.messages(Task)[-1].parent_task_id == b""
    # every client unpickled in this process shares one connection
    other = pickle.loads(pickle.dumps(client))
    assert other.submit(inc, 2).result(10) == 3
    assert other._connection is copy._connection is not client._connection
    copy.disconnect()  # detaches this copy only
    assert other.submit(inc, 3).result(10) == 4
    with pytest.raises(DisconnectedError):
        copy.submit(inc, 1)


def test_seeds_fibonacci_runs_nested_tasks() -> None:
    with ProtocolPeer(threaded=True) as peer, Client(peer.address) as client:
        assert client.submit(fibonacci, client, 8).result(20) == 21
        assert len(peer.messages(Task)) == 67  # fib(8) makes 67 calls
        assert len({hello.name for hello in peer.messages(Hello)}) == 2  # the nested calls share one connection


def test_wait_and_as_completed_on_pending_futures() -> None:
    with ProtocolPeer(execute=False) as peer, Client(peer.address) as client:
        futures = [client.submit(inc, i) for i in range(3)]
        wait_for(lambda: len(peer.held) == 3, 5, "three held tasks")
        done, not_done = concurrent.futures.wait(futures, timeout=0.05)
        assert not done and len(not_done) == 3
        completed = concurrent.futures.as_completed(futures, timeout=10)
        for future in reversed(futures):
            peer.release(future.task_id)
            assert next(completed) is future
        first = client.submit(inc, 10)
        wait_for(lambda: first.task_id in peer.held, 5, "a held task")
        peer.release(first.task_id)
        done, _ = concurrent.futures.wait([first, client.submit(inc, 0)], return_when="FIRST_COMPLETED", timeout=10)
        assert first in done and first.result() == 11


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # the child only raises
def test_a_forked_child_cannot_use_the_parents_client(client: Client) -> None:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what submit raised, then leave without running any cleanup
        try:
            client.submit(inc, 1)
            outcome = b"no error"
        except DisconnectedError as error:
            outcome = b"fork" if "fork" in str(error) else str(error).encode()
        os.write(write_end, outcome)
        os._exit(0)
    os.close(write_end)
    try:  # bounded: a child stuck in submit (say, on a lock forked held) must fail the test, not outlive it
        wait_for(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, 10, "the forked child to exit")
    except AssertionError:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    assert os.read(read_end, 1000) == b"fork"
    os.close(read_end)
    assert client.submit(inc, 1).result(10) == 2
