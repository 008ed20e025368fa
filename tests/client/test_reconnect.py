"""A client whose scheduler is lost: it waits for one to come back on the address, registers again and resubmits
what is unanswered under the same ids, objects first, graphs as the nodes still needed; or fails in time.

The scheduler is a ProtocolPeer (a real ROUTER): closing it and binding another on the same address is what a
restarted scheduler looks like to a client."""

from __future__ import annotations

import time

import pytest

from scaler.client import Client, Serializer
from scaler.drop_streak import DROPS_BEFORE_STOPPING
from scaler.errors import SchedulerGoneError
from scaler.protocol import Goodbye, Hello, ObjectKind, ObjectPut, Task, TaskCancel
from scaler.testing.processes import wait_for
from scaler.testing.protocol_peer import ProtocolPeer

pytestmark = pytest.mark.timeout(60)


def inc(value: int) -> int:
    return value + 1


def add(left, right):
    return left + right


class Tagging(Serializer):
    @staticmethod
    def serialize(obj) -> bytes:
        import cloudpickle

        return b"T" + cloudpickle.dumps(obj)

    @staticmethod
    def deserialize(payload: bytes):
        import cloudpickle

        assert payload[:1] == b"T"
        return cloudpickle.loads(payload[1:])


def held(peer: ProtocolPeer, count: int) -> None:
    wait_for(lambda: len(peer.held) >= count, 10, f"{count} task(s) held by the peer")


def test_a_new_scheduler_gets_every_unanswered_task_again_with_its_objects_under_the_same_ids() -> None:
    first = ProtocolPeer(execute=False)
    client = Client(first.address, serializer=Tagging, timeout_seconds=10)
    try:
        reference = client.send_object([1, 2, 3], name="numbers")
        big = list(range(40_000))  # over the inline limit: an argument object, held by its task
        futures = [client.submit(inc, index) for index in range(5)]
        futures.append(client.submit(add, reference, [4]))
        futures.append(client.submit(len, big))
        held(first, 7)
        first.release(futures[0].task_id)  # answered before the loss: not sent again
        assert futures[0].result(10) == 1
        cancelled = futures.pop(1)
        first.close()
        assert cancelled.cancel(), "cancelled while the scheduler is away: forgotten, not resubmitted"

        with ProtocolPeer(address=first.address) as second:
            assert [future.result(20) for future in futures[1:]] == [3, 4, 5, [1, 2, 3, 4], 40_000]
            resubmitted = {task.task_id for task in second.messages(Task)}
            assert resubmitted == {future.task_id for future in futures[1:]}, "the same ids, and only the unanswered"
            kinds = {put.kind for put in second.messages(ObjectPut)}
            assert kinds == {ObjectKind.object, ObjectKind.function, ObjectKind.serializer}
            (hello,) = second.messages(Hello)
            assert hello.previous_registrations == 1
            # the reference still works, and the client goes on as before
            assert client.submit(add, reference, [5]).result(10) == [1, 2, 3, 5]
    finally:
        client.disconnect()


def test_a_graph_resubmits_only_the_nodes_its_unanswered_keys_need_with_answered_keys_as_results() -> None:
    first = ProtocolPeer(execute=False)
    client = Client(first.address, timeout_seconds=10)
    try:
        graph = {"a": 1, "b": (inc, "a"), "c": (inc, "b"), "d": (add, "c", "b"), "e": (inc, "d")}
        futures = client.get(graph, ["b", "e"], block=False)
        held(first, 4)
        first.release(futures["b"].task_id)
        assert futures["b"].result(10) == 2
        first.close()
        with ProtocolPeer(address=first.address) as second:
            assert futures["e"].result(20) == 6
            nodes = second.messages(Task)
            assert len(nodes) == 3 and futures["b"].task_id not in {task.task_id for task in nodes}, "c, d and e"
            (put,) = [put for put in second.messages(ObjectPut) if put.kind == ObjectKind.result]
            assert put.object_id == futures["b"].task_id, "b's result goes back as a result object for c and d"
            assert len(set(second.frames_of(Task))) == 1, "a graph's nodes travel in one frame"
    finally:
        client.disconnect()


def test_the_same_scheduler_asking_for_a_hello_again_keeps_the_session() -> None:
    with ProtocolPeer(execute=False) as peer:
        client = Client(peer.address, timeout_seconds=10)
        future = client.submit(inc, 1)
        held(peer, 1)
        peer.send_to_all(Goodbye(reason="not registered: send Hello first", reconnect=True))
        wait_for(lambda: len(peer.messages(Hello)) == 2, 10, "a second Hello")
        wait_for(lambda: len(peer.messages(Task)) == 2, 10, "the task sent again, for the peer to ignore")
        peer.release(future.task_id)
        assert future.result(10) == 2
        later = client.submit(inc, 2)
        wait_for(lambda: later.task_id in peer.held, 10, "a task sent after the Hello again")
        peer.release(later.task_id)
        assert later.result(10) == 3
        client.disconnect()


@pytest.mark.parametrize(
    "timeout_seconds, reconnect_seconds, error, waited",
    [
        (10, 0, "closed", (0.0, 2.0)),
        (10, 1.5, "no message from the scheduler", (0.75, 1.5 + 1.0)),
        (1.5, None, "no message from the scheduler", (0.75, 1.5 + 1.0)),
    ],
    ids=["recovery off: at once", "not back within reconnect_seconds", "reconnect_seconds defaults to timeout_seconds"],
)
def test_a_scheduler_that_does_not_come_back_fails_pending_futures(
    timeout_seconds, reconnect_seconds, error, waited
) -> None:
    peer = ProtocolPeer(execute=False)
    client = Client(peer.address, timeout_seconds=timeout_seconds, reconnect_seconds=reconnect_seconds)
    future = client.submit(inc, 1)
    held(peer, 1)
    peer.close()
    closed_at = time.monotonic()
    with pytest.raises(SchedulerGoneError, match=error) as raised:
        future.result(10)
    assert isinstance(raised.value, TimeoutError)
    # counted from the last message heard, a heartbeat or so before the close; slack above for a loaded machine
    assert waited[0] <= time.monotonic() - closed_at < waited[1]
    client.disconnect()


def test_reconnect_seconds_is_checked() -> None:
    for bad in (-1, "5", True):
        with pytest.raises(ValueError, match="reconnect_seconds"):
            Client("tcp://127.0.0.1:1", reconnect_seconds=bad)


def test_a_cancel_lost_with_the_connection_is_sent_again_to_the_same_scheduler() -> None:
    with ProtocolPeer(execute=False, answer_cancels=False) as peer:
        client = Client(peer.address, timeout_seconds=10)
        future = client.submit(inc, 1)
        held(peer, 1)
        assert future.cancel()
        wait_for(lambda: peer.messages(TaskCancel), 10, "the cancel")
        peer.send_to_all(Goodbye(reason="not registered: send Hello first", reconnect=True))
        wait_for(lambda: len(peer.messages(TaskCancel)) == 2, 10, "the cancel sent again")
        assert future.task_id not in {task.task_id for task in peer.messages(Task)[1:]}
        client.disconnect()


def test_a_client_dropped_again_and_again_for_a_large_frame_stops_and_says_why() -> None:
    """An older scheduler announces no frame limit: the client sends a 20 MB object in one chunk, is dropped, registers
    again and sends it again. It stops after a few rounds and fails its futures with the reason."""
    with ProtocolPeer(max_frame_bytes=2 * 1024 * 1024, execute=False) as peer:
        client = Client(peer.address, timeout_seconds=10, reconnect_seconds=60)
        try:
            future = client.submit(len, b"x" * 20_000_000)
            with pytest.raises(SchedulerGoneError, match=r"3 times in a row.*--max-frame-bytes"):
                future.result(timeout=40)
            assert len(peer.messages(Hello)) == DROPS_BEFORE_STOPPING
        finally:
            client.disconnect()
