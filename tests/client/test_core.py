"""The client's sans-IO core (scaler/client/core.py) without sockets, threads or sleeps: the handshake, submissions
(the general path, template-encoded tasks, graphs), results and failures, cancels, the fetch of results held by
workers, a lost scheduler (no reconnect, a new scheduler, the same one resumed, a refusal, a goodbye), heartbeats and
clear(); then a seeded simulation that interleaves all of it against a fake scheduler and checks that every future
settles exactly once, with the right outcome. `ClientCore.validate()` runs after every step."""

from __future__ import annotations

import io
import logging
import os
import pickle
import random
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import pytest

from scaler.client.core import (
    CADENCE,
    DISCONNECTED,
    FETCH,
    HANDSHAKE,
    REGISTER_AGAIN,
    REGISTERED,
    STOP,
    UPLOAD,
    ClientCore,
    Command,
)
from scaler.client.future import ScalerFuture
from scaler.client.ledger import ObjectNeed
from scaler.client.objects import LargeObject, object_puts
from scaler.client.resubmission import GraphRecord
from scaler.config import DEFAULT_INLINE_LIMIT_BYTES
from scaler.errors import DisconnectedError, ScalerError, SchedulerGoneError, TaskNotFoundError, WorkerDiedError
from scaler.io.shared_bytes import SharedBytes
from scaler.protocol import (
    PROTOCOL_VERSION,
    Argument,
    ArgumentKind,
    ClientDisconnect,
    DisconnectReply,
    Goodbye,
    HeartbeatEcho,
    HelloReply,
    ObjectDelete,
    ObjectKind,
    ObjectPut,
    ObjectRequest,
    ObjectResponse,
    Task,
    TaskCancel,
    TaskResult,
    TaskStatus,
    decode_frame,
    encode,
    encode_many,
)
from scaler.serializer import default_loads, dump_with_buffers

pytestmark = pytest.mark.timeout(60)

SUCCESS = int(TaskStatus.success)
FAILED = int(TaskStatus.failed)
CANCELED = int(TaskStatus.canceled)
WORKER_DIED = int(TaskStatus.worker_died)
NOT_FOUND = int(TaskStatus.not_found)
OBJECT_REF = int(ArgumentKind.object_ref)
KIND_OBJECT = int(ObjectKind.object)
KIND_FUNCTION = int(ObjectKind.function)
KIND_RESULT = int(ObjectKind.result)

FUNCTION = b"function-id-0001"  # the one function every task calls
LARGE = [bytes([65 + index]) * 16 for index in range(3)]  # ids of large argument objects, reused (content ids)
HOLDER = "tcp://10.0.0.7:2346"  # the data address of the worker holding a result


def value_of(task_id: bytes) -> Tuple[str, bytes]:
    """What every task returns: its own id, so that a value settled on the wrong future shows."""
    return ("value", task_id)


def payload_of(task_id: bytes) -> bytes:
    return pickle.dumps(value_of(task_id))


def large_payload(object_id: bytes) -> bytes:
    return object_id * ((DEFAULT_INLINE_LIMIT_BYTES // len(object_id)) + 16)  # above the inline limit


def function_puts() -> List[Any]:
    return object_puts(FUNCTION, KIND_FUNCTION, "f", b"pickled function")


def decode_outgoing(items: Sequence[Any]) -> List[Any]:
    """What the IO thread would send of the queue's items, as the scheduler decodes it."""
    messages: List[Any] = []
    for item in items:
        if type(item) is LargeObject:
            for frame in item.frames(1 << 20):
                messages.extend(decode_frame(frame))
        elif type(item) is list:  # a run of template-encoded tasks
            messages.extend(decode_frame(b"".join(item)))
        elif isinstance(item, bytes):  # Encoded (a task), or a frame of its own (a graph)
            messages.extend(decode_frame(bytes(item)))
        else:
            messages.extend(decode_frame(encode(item)))
    return messages


def of_type(messages: Sequence[Any], kind: type) -> List[Any]:
    return [message for message in messages if type(message) is kind]


class Canceller:
    """What a connection is to its futures: cancel() tells the core."""

    def __init__(self, core: ClientCore) -> None:
        self.core = core

    def cancel_task(self, task_id: bytes) -> None:
        self.core.cancel_tasks([task_id])


class Harness:
    """A core, the clock the shell would give it, and the futures it made, with their done callbacks counted.

    Every step validates the core and takes its commands (`commands` holds those of the last step)."""

    def __init__(self, reconnect_seconds: float = 5.0, handshake: bool = True) -> None:
        self.wakes = 0
        self.core = ClientCore(
            b"C|test|4242", "tcp://127.0.0.1:2345", "testhost", 4242, b"prefix08", reconnect_seconds, self._wake
        )
        self.now = 1000.0
        self.futures: Dict[bytes, ScalerFuture] = {}
        self.calls: Dict[bytes, int] = {}  # task id -> done callbacks run
        self.commands: List[Command] = []
        self.step()
        if handshake:
            self.receive(HelloReply(protocol_version=PROTOCOL_VERSION, accepted=True, heartbeat_interval_ms=1000))
            assert [command[0] for command in self.commands] == [REGISTERED, CADENCE, HANDSHAKE]

    def _wake(self) -> None:
        self.wakes += 1

    def step(self) -> List[Command]:
        self.core.validate()
        self.commands, self.core.commands = self.core.commands, []
        for task_id, calls in self.calls.items():
            assert calls <= 1, f"the future of task {task_id.hex()} settled {calls} times"
        return self.commands

    def receive(self, *messages: Any) -> List[Command]:
        """Scheduler messages, in one frame, encoded and decoded as on the wire."""
        self.core.receive(decode_frame(encode_many(list(messages))), self.now)
        return self.step()

    def take(self) -> List[Any]:
        items = self.core.take_outgoing()
        self.step()
        return decode_outgoing(items)

    # ---- submissions, as tasks.py and graph_encoding.py make them ------------------------------------------------

    def future(self, task_id: Optional[bytes] = None) -> ScalerFuture:
        task_id = task_id if task_id is not None else self.core.new_task_id()
        future = ScalerFuture(task_id, Canceller(self.core))
        self.futures[task_id] = future
        self.calls[task_id] = 0
        future.add_done_callback(self._done)
        return future

    def _done(self, future: Any) -> None:
        self.calls[future.task_id] += 1

    def task(self, held: Sequence[bytes] = (), parent: bytes = b"") -> Tuple[ScalerFuture, Task, List[ObjectNeed]]:
        future = self.future()
        arguments = [Argument(data=b"inline argument")]
        arguments.extend(Argument(kind=OBJECT_REF, data=object_id) for object_id in held)
        task = Task(task_id=future.task_id, function_id=FUNCTION, args=arguments, parent_task_id=parent)
        needs: List[ObjectNeed] = [
            (object_id, object_puts(object_id, KIND_OBJECT, "", large_payload(object_id))) for object_id in held
        ]
        return future, task, needs

    def submit(self, held: Sequence[bytes] = (), parent: bytes = b"", retries: int = 0) -> ScalerFuture:
        """The general path: the function's id as cached first, its ObjectPuts again if clear() deleted it."""
        future, task, needs = self.task(held, parent)
        held_by = {future.task_id: list(held)} if held else None
        if not self.core.send([(FUNCTION, None), *needs], [task], [future], [task], retries, held_by):
            self.step()
            assert self.core.send([(FUNCTION, function_puts()), *needs], [task], [future], [task], retries, held_by)
        self.step()
        return future

    def submit_encoded(self, parent: bytes = b"") -> ScalerFuture:
        """A call encoded by template (send_task), or the general path if the scheduler lacks the function."""
        future = self.future()
        task = Task(task_id=future.task_id, function_id=FUNCTION, args=[Argument(data=b"x")], parent_task_id=parent)
        encoded = encode(task)
        if not self.core.send_task([FUNCTION], encoded, future, 0):
            self.step()
            assert self.core.send([(FUNCTION, function_puts())], [encoded], [future], [encoded])
        self.step()
        return future

    def graph(
        self, dependencies: Sequence[Sequence[int]], requested: Sequence[bool], held: Sequence[bytes] = ()
    ) -> Tuple[List[Optional[ScalerFuture]], GraphRecord]:
        """A graph: node i depends on the nodes `dependencies[i]` (earlier ones); the requested nodes get futures."""
        task_ids = [self.core.new_task_id() for _ in dependencies]
        tasks: List[Task] = []
        futures: List[Optional[ScalerFuture]] = []
        unreported: List[bytes] = []
        for index, task_id in enumerate(task_ids):
            arguments = [Argument(kind=OBJECT_REF, data=object_id) for object_id in held]
            depends = [task_ids[other] for other in dependencies[index]]
            arguments.extend(Argument(kind=int(ArgumentKind.task_ref), data=other) for other in depends)
            tasks.append(
                Task(
                    task_id=task_id,
                    function_id=FUNCTION,
                    args=arguments,
                    dependencies=depends,
                    report_result=requested[index],
                )
            )
            if requested[index]:
                futures.append(self.future(task_id))
            else:
                futures.append(None)
                unreported.append(task_id)
        record = GraphRecord(tasks, {future.task_id: future for future in futures if future is not None}, unreported)
        needs: List[ObjectNeed] = [
            (object_id, object_puts(object_id, KIND_OBJECT, "", large_payload(object_id))) for object_id in held
        ]
        frame = encode_many(tasks)
        if not self.core.send_graph([(FUNCTION, None), *needs], frame, record, 0, list(held) or None):
            self.step()
            assert self.core.send_graph([(FUNCTION, function_puts()), *needs], frame, record, 0, list(held) or None)
        self.step()
        return futures, record

    # ---- the scheduler ---------------------------------------------------------------------------------------------

    def answer(self, task_id: bytes, status: int = SUCCESS, in_object: bool = False) -> List[Command]:
        payload = b"" if in_object or status != SUCCESS else payload_of(task_id)
        return self.receive(TaskResult(task_id=task_id, status=status, payload=payload, in_object=in_object))

    def lose(self) -> None:
        self.core.lost("the scheduler's connection closed")
        assert self.step() == [(REGISTER_AGAIN,)]
        assert not self.core.registered

    def register(self, resumed: bool, **settings: Any) -> List[Command]:
        hello = self.core.hello()
        assert hello.previous_registrations == self.core.registrations
        reply = HelloReply(protocol_version=PROTOCOL_VERSION, accepted=True, resumed=resumed, **settings)
        commands = self.receive(reply)
        assert [command[0] for command in commands] == [REGISTERED, CADENCE] and self.core.registered
        return commands


def connected(reconnect_seconds: float = 5.0) -> Harness:
    """A registered harness whose scheduler holds the function (a first task was sent and answered)."""
    harness = Harness(reconnect_seconds)
    first = harness.submit()
    harness.take()
    harness.answer(first.task_id)
    harness.futures.pop(first.task_id)
    harness.calls.pop(first.task_id)
    return harness


# ---- focused tests ---------------------------------------------------------------------------------------------------


def test_handshake_registers_and_takes_the_schedulers_settings() -> None:
    harness = Harness(handshake=False)
    core = harness.core
    hello = core.hello()
    assert hello.protocol_version == PROTOCOL_VERSION and hello.name == "C|test|4242" and hello.pid == 4242
    assert hello.previous_registrations == 0 and hello.fetches_from_holders
    assert not core.registered and not core.handshaken
    reply = HelloReply(
        protocol_version=PROTOCOL_VERSION, accepted=True, task_policies=True, actors=True, max_frame_bytes=123_456
    )
    commands = harness.receive(reply)
    assert [command[0] for command in commands] == [REGISTERED, CADENCE, HANDSHAKE]
    assert commands[0][1] == reply and commands[1][1] == 1.0 and commands[2][1] == reply  # 5 s window: 1 s at most
    assert core.registered and core.handshaken and core.registrations == 1
    assert core.task_policies and core.actors and core.max_frame_bytes == 123_456
    assert harness.receive(reply) == [], "a second answer to a Hello sent again changes nothing"


def test_a_refused_handshake_is_handed_to_the_creating_thread_and_not_registered() -> None:
    harness = Harness(handshake=False)
    reply = HelloReply(protocol_version=PROTOCOL_VERSION, accepted=False, reason="too old")
    commands = harness.receive(reply)
    assert commands == [(HANDSHAKE, reply)]
    assert not harness.core.registered and harness.core.handshaken


def test_send_task_is_refused_until_the_function_was_sent() -> None:
    harness = Harness()
    core = harness.core
    future = harness.future()
    encoded = encode(Task(task_id=future.task_id, function_id=FUNCTION))
    assert not core.send_task([FUNCTION], encoded, future, 0)
    harness.step()
    assert not core.pending and not core.send_queue.items, "nothing tracked or queued"
    assert not core.send([(FUNCTION, None)], [encoded], [future], [encoded]), "no puts for a missing object"
    harness.step()
    assert not core.pending and not core.send_queue.items
    first = harness.submit()
    assert core.send_task([FUNCTION], encoded, future, 2)
    harness.step()
    assert set(core.pending) == {first.task_id, future.task_id} and core.retries == {future.task_id: 2}
    items = core.take_outgoing()
    harness.step()
    assert [type(item) for item in items] == [ObjectPut, Task, list], "the function first, then the tasks"
    messages = decode_outgoing(items)
    assert [message.task_id for message in of_type(messages, Task)] == [first.task_id, future.task_id]
    assert harness.wakes == 1, "woken once, when the queue went from idle to busy"


def test_a_result_settles_its_future_once_and_drops_the_tasks_record() -> None:
    harness = connected()
    core = harness.core
    plain, encoded = harness.submit(), harness.submit_encoded()
    harness.take()
    assert set(core.messages) == {plain.task_id, encoded.task_id}
    harness.receive(
        TaskResult(task_id=plain.task_id, status=SUCCESS, payload=payload_of(plain.task_id)),
        TaskResult(task_id=encoded.task_id, status=SUCCESS, payload=payload_of(encoded.task_id)),
    )
    assert plain.result() == value_of(plain.task_id) and encoded.result() == value_of(encoded.task_id)
    assert not core.pending and not core.messages and not core.retries
    harness.answer(plain.task_id)  # a late copy: nobody waits for it
    assert plain.result() == value_of(plain.task_id)
    assert harness.calls == {plain.task_id: 1, encoded.task_id: 1}


def test_a_held_object_is_deleted_when_the_last_task_holding_it_is_answered() -> None:
    harness = connected()
    core = harness.core
    first = harness.submit(held=[LARGE[0]])
    second = harness.submit(held=[LARGE[0]])
    sent = harness.take()
    assert [type(message) for message in sent] == [ObjectPut, Task, Task], "the object once, before its tasks"
    assert core.ledger.uses() == {LARGE[0]: 2}
    harness.answer(first.task_id)
    assert first.result() == value_of(first.task_id)
    assert not of_type(harness.take(), ObjectDelete), "the second task still needs it"
    harness.answer(second.task_id, WORKER_DIED)
    assert isinstance(second.exception(), WorkerDiedError)
    (delete,) = of_type(harness.take(), ObjectDelete)
    assert delete.object_ids == [LARGE[0]]
    assert not core.ledger.uses() and not core.held and not core.pending


def test_a_failure_fails_its_future_with_the_mapped_error() -> None:
    harness = connected()
    raised, died, refused = harness.submit(), harness.submit(), harness.submit()
    harness.take()
    harness.receive(
        TaskResult(task_id=raised.task_id, status=FAILED, payload=pickle.dumps(ValueError("boom"))),
        TaskResult(task_id=died.task_id, status=WORKER_DIED, error_text="worker 3 died"),
        TaskResult(task_id=refused.task_id, status=int(TaskStatus.refused)),
    )
    error = raised.exception()
    assert type(error) is ValueError and str(error) == "boom"
    error = died.exception()
    assert isinstance(error, WorkerDiedError) and "worker 3 died" in str(error)
    assert isinstance(refused.exception(), ScalerError)
    assert not harness.core.pending and not harness.core.messages
    assert set(harness.calls.values()) == {1}


def test_a_cancel_is_sent_and_a_result_crossing_it_leaves_the_future_cancelled() -> None:
    harness = connected()
    core = harness.core
    future, other = harness.submit(), harness.submit(held=[LARGE[1]])
    harness.take()
    assert future.cancel() and other.cancel()
    harness.step()
    assert future.cancelled() and harness.calls[future.task_id] == 1
    cancels = of_type(harness.take(), TaskCancel)
    assert [cancel.task_ids for cancel in cancels] == [[future.task_id], [other.task_id]]
    assert future.task_id in core.pending, "kept until the scheduler answers"
    harness.answer(future.task_id)  # it finished before the cancel reached the scheduler
    assert future.cancelled() and harness.calls[future.task_id] == 1
    assert future.task_id not in core.pending and future.task_id not in core.messages
    harness.answer(other.task_id, in_object=True)  # stored as an object: freed, and its argument too
    deletes = of_type(harness.take(), ObjectDelete)
    assert sorted(object_id for delete in deletes for object_id in delete.object_ids) == sorted(
        [other.task_id, LARGE[1]]
    )
    assert other.cancelled() and harness.calls[other.task_id] == 1
    assert not core.pending and not core.fetches and future.cancel(), "cancel() of a cancelled future: True"


def test_a_result_held_by_a_worker_is_fetched_from_it() -> None:
    harness = connected()
    core = harness.core
    future = harness.submit(held=[LARGE[2]])
    harness.take()
    harness.answer(future.task_id, in_object=True)
    assert future.task_id in core.fetches and not future.done()
    (request,) = harness.take()
    assert type(request) is ObjectRequest and request.object_ids == [future.task_id] and not request.via_scheduler
    commands = harness.receive(ObjectResponse(object_id=future.task_id, found=True, holder_address=HOLDER))
    assert commands == [(FETCH, future.task_id, HOLDER, b"")]
    assert core.ledger.uses() == {LARGE[2]: 1}, "its argument is kept while its result may have to be made again"
    core.fetched(future.task_id, payload_of(future.task_id), False)
    harness.step()
    assert future.result() == value_of(future.task_id) and harness.calls[future.task_id] == 1
    (delete_result, delete_argument) = harness.take()
    assert delete_result == ObjectDelete(object_ids=[future.task_id])
    assert delete_argument == ObjectDelete(object_ids=[LARGE[2]])
    assert not core.fetches and not core.pending and not core.ledger.uses()
    core.fetched(future.task_id, payload_of(future.task_id), False)  # a late fetch: ignored
    harness.step()
    assert harness.calls[future.task_id] == 1


def test_an_unreachable_holder_makes_the_scheduler_relay_the_result_in_chunks() -> None:
    harness = connected()
    core = harness.core
    future, lost = harness.submit(), harness.submit()
    harness.take()
    harness.answer(future.task_id, in_object=True)
    harness.answer(lost.task_id, in_object=True)
    harness.take()
    harness.receive(ObjectResponse(object_id=future.task_id, found=True, holder_address=HOLDER))
    core.fetched(future.task_id, None, True)  # no answer from the holder
    harness.step()
    (request,) = harness.take()
    assert type(request) is ObjectRequest and request.object_ids == [future.task_id] and request.via_scheduler
    payload = payload_of(future.task_id)
    chunks = [payload[:10], payload[10:20], payload[20:]]
    for index, chunk in enumerate(chunks):
        assert not future.done()
        harness.receive(
            ObjectResponse(object_id=future.task_id, found=True, chunk_index=index, chunk_count=3, payload=chunk)
        )
    assert future.result() == value_of(future.task_id)
    assert of_type(harness.take(), ObjectDelete) == [ObjectDelete(object_ids=[future.task_id])]
    harness.receive(ObjectResponse(object_id=lost.task_id, found=False))
    assert isinstance(lost.exception(), ScalerError) and "lost" in str(lost.exception())
    assert not core.fetches and not core.pending


def test_a_result_its_holder_on_this_host_hands_over_but_that_cannot_be_mapped_is_relayed() -> None:
    """Mapping a holder's memory can fail (the process's mappings at vm.max_map_count; here a file shorter than the
    answer said): that result is relayed by the scheduler instead, and the client goes on."""
    harness = connected()
    core = harness.core
    future = harness.submit()
    harness.take()
    harness.answer(future.task_id, in_object=True)
    harness.take()
    harness.receive(ObjectResponse(object_id=future.task_id, found=True, holder_address=HOLDER))
    short = SharedBytes.create(b"s" * 100)
    core.fetched(future.task_id, SharedBytes(os.dup(short.fd), 1_000_000), False)
    harness.step()
    (request,) = harness.take()
    assert type(request) is ObjectRequest and request.object_ids == [future.task_id] and request.via_scheduler
    assert not future.done() and future.task_id in core.fetches, "not freed on its holder: it is still to be read"
    harness.receive(ObjectResponse(object_id=future.task_id, found=True, payload=payload_of(future.task_id)))
    assert future.result() == value_of(future.task_id)
    assert of_type(harness.take(), ObjectDelete) == [ObjectDelete(object_ids=[future.task_id])]


def test_relayed_chunks_out_of_their_place_are_not_joined() -> None:
    """A chunk relayed twice, or one after chunks this client missed (its connection resumed), is left out: the
    result is made of chunks 0, 1, 2... in order, from an upload that starts over at 0 if need be."""
    harness = connected()
    future = harness.submit()
    harness.take()
    harness.answer(future.task_id, in_object=True)
    harness.take()
    harness.receive(ObjectResponse(object_id=future.task_id, found=True, holder_address=HOLDER))
    harness.core.fetched(future.task_id, None, True)
    harness.step()
    payload = payload_of(future.task_id)
    chunks = [payload[:10], payload[10:20], payload[20:]]
    for index in (1, 2, 0, 0, 1, 1, 2):  # missed the start of one upload; then each chunk of the next twice
        chunk = chunks[index]
        harness.receive(
            ObjectResponse(object_id=future.task_id, found=True, chunk_index=index, chunk_count=3, payload=chunk)
        )
    assert future.result() == value_of(future.task_id)


def test_a_graph_keeps_a_fetched_result_as_made_whatever_the_user_does_to_it() -> None:
    """A graph key other nodes read is kept, to be sent back to a scheduler that restarts: not the buffer the user's
    array views (chunks joined into a bytearray), which the user may modify in place."""
    import numpy

    harness = connected()
    (key, _), _ = harness.graph([[], [0]], [True, True])
    harness.take()
    harness.answer(key.task_id, in_object=True)
    harness.take()
    harness.receive(ObjectResponse(object_id=key.task_id, found=True, holder_address=HOLDER))
    made = io.BytesIO()
    dump_with_buffers(numpy.arange(100_000, dtype=numpy.float64), made)
    harness.core.fetched(key.task_id, bytearray(made.getvalue()), False)  # several chunks, joined: writable
    harness.step()
    key.result()[:] = -1.0  # the user's array is a view of what came, and may be modified
    harness.take()
    harness.lose()
    harness.register(resumed=False)
    sent = harness.core.send_queue.items
    (kept,) = [item for item in sent if type(item) is LargeObject and item.object_id == key.task_id]
    assert numpy.array_equal(default_loads(bytes(kept.payload)), numpy.arange(100_000, dtype=numpy.float64))


def test_a_fetch_ending_after_the_connection_closed_is_ignored() -> None:
    """The IO thread may end a fetch as the user's thread closes the connection (which settles every future)."""
    harness = connected()
    future = harness.submit()
    harness.take()
    harness.answer(future.task_id, in_object=True)
    assert future.task_id in harness.core.fetches
    harness.core.terminate("closed by the user")
    harness.core._fetched(future.task_id, payload_of(future.task_id))  # past the IO thread's check, as it raced
    harness.core._fetch_failed(future.task_id, "lost")
    assert future.cancelled()


def test_a_lost_scheduler_without_reconnect_fails_every_future_and_stops() -> None:
    harness = connected(reconnect_seconds=0)
    core = harness.core
    plain, fetching = harness.submit(), harness.submit()
    harness.take()
    harness.answer(fetching.task_id, in_object=True)
    core.lost("the scheduler's connection closed")
    assert harness.step() == [(STOP,)]
    for future in (plain, fetching):
        assert isinstance(future.exception(), SchedulerGoneError)
    assert core.closed_reason is not None and not core.pending and not core.fetches and not core.messages
    assert harness.calls[plain.task_id] == harness.calls[fetching.task_id] == 1
    with pytest.raises(DisconnectedError):
        harness.submit()


def test_a_new_scheduler_is_sent_every_object_then_every_unanswered_task() -> None:
    harness = connected()
    core = harness.core
    held = harness.submit(held=[LARGE[0]])
    encoded = harness.submit_encoded()
    answered = harness.submit()
    (first_key, unreported, second_key), _ = harness.graph([[], [0], [1]], [True, False, True])
    assert first_key is not None and unreported is None and second_key is not None
    fetching = harness.submit()
    cancelled = harness.submit()
    harness.take()
    harness.answer(answered.task_id)
    harness.answer(first_key.task_id)  # kept: the graph's other key depends on it
    harness.answer(fetching.task_id, in_object=True)
    assert cancelled.cancel()
    harness.step()
    harness.lose()
    later = harness.submit()  # queued while no scheduler is there
    assert core.hello().previous_registrations == 1
    harness.register(resumed=False, task_policies=True)
    assert core.registrations == 2 and core.task_policies
    sent = harness.take()
    kinds = [type(message) for message in sent]
    objects = [message.object_id for message in sent if type(message) is ObjectPut]
    assert objects[:2] == [FUNCTION, LARGE[0]] and set(objects) == {FUNCTION, LARGE[0], first_key.task_id}
    assert kinds.index(Task) == 2, "every object before any task"
    tasks = [message.task_id for message in of_type(sent, Task)]
    graph_nodes = [unreported_id for unreported_id in tasks if unreported_id not in harness.futures]
    assert tasks[:4] == [held.task_id, encoded.task_id, later.task_id, fetching.task_id], "same ids"
    assert len(graph_nodes) == 1 and tasks[4:] == [*graph_nodes, second_key.task_id], "the graph's frame last"
    result_put = next(message for message in sent if type(message) is ObjectPut and message.kind == KIND_RESULT)
    assert result_put.object_id == first_key.task_id and result_put.payload == payload_of(first_key.task_id)
    assert cancelled.task_id not in tasks and cancelled.task_id not in core.pending, "forgotten"
    assert not of_type(sent, TaskCancel) and not of_type(sent, ObjectRequest)
    assert fetching.task_id in core.pending and not core.fetches, "its result is made again"
    for future in (held, encoded, fetching, later, second_key):
        harness.answer(future.task_id)
        assert future.result() == value_of(future.task_id)
    assert not core.pending and not core.messages and not core.graphs
    assert set(harness.calls.values()) == {1}


def test_the_same_scheduler_resumed_keeps_queued_cancels_and_deletes_and_hears_of_new_cancels() -> None:
    harness = connected()
    core = harness.core
    answered = harness.submit(held=[LARGE[0]])
    cancelled_before = harness.submit()
    cancelled_meanwhile = harness.submit()
    fetching = harness.submit()
    waiting = harness.submit()
    harness.take()
    harness.answer(fetching.task_id, in_object=True)
    harness.take()  # its ObjectRequest, lost with the connection
    harness.answer(answered.task_id)  # queues the delete of its argument
    assert cancelled_before.cancel()
    harness.step()
    harness.lose()
    assert cancelled_meanwhile.cancel()  # its cancel goes to the queue too, but it might be lost: sent again anyway
    harness.step()
    harness.register(resumed=True)
    assert core.registrations == 1, "the same session"
    sent = harness.take()
    assert of_type(sent, ObjectDelete) == [ObjectDelete(object_ids=[LARGE[0]])]
    cancelled_ids = [task_id for cancel in of_type(sent, TaskCancel) for task_id in cancel.task_ids]
    assert sorted(cancelled_ids) == sorted(
        [cancelled_before.task_id, cancelled_before.task_id, cancelled_meanwhile.task_id, cancelled_meanwhile.task_id]
    ), "kept from the queue, and sent again for the futures cancelled while pending"
    assert [request.object_ids for request in of_type(sent, ObjectRequest)] == [[fetching.task_id]]
    assert [message.task_id for message in of_type(sent, Task)] == [waiting.task_id], "copies the scheduler ignores"
    assert fetching.task_id in core.fetches


def test_a_resumed_scheduler_keeps_an_object_that_was_deleted_and_sent_again_before_the_loss() -> None:
    """An argument object deleted (its task answered) and then needed again by a new task: the queue holds its
    ObjectDelete, then its ObjectPut and the new task. The same scheduler, resumed, must end up holding it."""
    harness = connected()
    core = harness.core
    first = harness.submit(held=[LARGE[0]])
    harness.take()
    harness.answer(first.task_id)  # queues ObjectDelete(LARGE[0])
    second = harness.submit(held=[LARGE[0]])  # queues its ObjectPut again, then the task
    queued = decode_outgoing(list(core.send_queue.items))
    assert [type(message) for message in queued] == [ObjectDelete, ObjectPut, Task]
    harness.lose()
    harness.register(resumed=True)
    sent = harness.take()
    held_at_end: Set[bytes] = {LARGE[0]}  # the scheduler held it before: it ignores a put of it, acts on a delete
    for message in sent:
        if type(message) is ObjectPut:
            held_at_end.add(message.object_id)
        elif type(message) is ObjectDelete:
            held_at_end.difference_update(message.object_ids)
    assert [type(message) for message in sent].count(Task) == 1 and second.task_id in core.pending
    assert LARGE[0] in held_at_end, (
        f"the object the pending task needs is deleted after it was sent again: {[type(m).__name__ for m in sent]}"
    )


def test_a_new_scheduler_after_clear_is_not_sent_a_task_without_the_objects_it_reads() -> None:
    """clear() while a result is being fetched: the ledger forgets the task's function and argument, but a new
    scheduler is sent the task again (its result must be made again). Every task it is sent must come after the
    objects it reads."""
    harness = connected()
    core = harness.core
    fetching = harness.submit(held=[LARGE[0]])
    harness.take()
    harness.answer(fetching.task_id, in_object=True)
    harness.take()
    core.clear()
    harness.step()
    harness.lose()
    harness.register(resumed=False)
    sent = harness.take()
    objects: Set[bytes] = set()
    for message in sent:
        if type(message) is ObjectPut:
            objects.add(message.object_id)
        elif type(message) is Task:
            reads = {FUNCTION} | {argument.data for argument in message.args if argument.kind == OBJECT_REF}
            assert reads <= objects, f"task {message.task_id.hex()} sent without {sorted(reads - objects)}"


def test_a_graph_key_being_fetched_is_not_sent_again_to_the_same_scheduler() -> None:
    """A graph of two independent keys: one answered with its result held by a worker (being fetched), the other
    unanswered. The same scheduler, resumed, is asked for the held result again; it must not be sent its task again
    (it would run it again, and the client, ignoring that answer, deletes the object under the same id)."""
    harness = connected()
    core = harness.core
    (fetched, waiting), _ = harness.graph([[], []], [True, True])
    assert fetched is not None and waiting is not None
    harness.take()
    harness.answer(fetched.task_id, in_object=True)
    harness.take()
    harness.lose()
    harness.register(resumed=True)
    sent = harness.take()
    assert [request.object_ids for request in of_type(sent, ObjectRequest)] == [[fetched.task_id]]
    assert fetched.task_id in core.fetches
    assert [message.task_id for message in of_type(sent, Task)] == [waiting.task_id]


def test_refused_on_registering_again_fails_every_future_and_stops() -> None:
    harness = connected()
    future = harness.submit()
    harness.take()
    harness.lose()
    commands = harness.receive(HelloReply(protocol_version=PROTOCOL_VERSION, accepted=False, reason="full"))
    assert commands == [(STOP,)]
    error = future.exception()
    assert isinstance(error, SchedulerGoneError) and "full" in str(error)
    assert harness.core.closed_reason is not None and not harness.core.pending


def test_goodbye_without_reconnect_fails_every_future_and_stops() -> None:
    harness = connected()
    future = harness.submit()
    harness.take()
    commands = harness.receive(Goodbye(reason="shutting down", reconnect=False))
    assert [command[0] for command in commands] == [DISCONNECTED, STOP]
    reply = commands[0][1]
    assert type(reply) is DisconnectReply and reply.accepted
    assert isinstance(future.exception(), SchedulerGoneError) and harness.calls[future.task_id] == 1
    assert harness.core.closed_reason is not None and not harness.core.pending


def test_goodbye_with_reconnect_waits_for_a_scheduler() -> None:
    harness = connected()
    future = harness.submit()
    harness.take()
    assert harness.receive(Goodbye(reason="restarting", reconnect=True)) == [(REGISTER_AGAIN,)]
    assert not harness.core.registered and not future.done()
    harness.register(resumed=False)
    assert [message.task_id for message in of_type(harness.take(), Task)] == [future.task_id]


def test_a_disconnect_is_sent_again_to_a_new_scheduler_until_answered() -> None:
    harness = connected()
    harness.core.disconnect(False)
    harness.step()
    assert harness.take() == [ClientDisconnect(shutdown_cluster=False)]
    harness.lose()
    harness.register(resumed=False)
    sent = harness.take()
    assert sent[-1] == ClientDisconnect(shutdown_cluster=False) and len(of_type(sent, ClientDisconnect)) == 1
    reply = DisconnectReply(accepted=True)
    assert harness.receive(reply) == [(DISCONNECTED, reply)]


def test_nothing_queued_behind_a_disconnect_goes_to_the_scheduler(caplog) -> None:
    """The scheduler forgets a client at its ClientDisconnect: a cancel or a release queued behind it (another
    thread's gather, a future dropped meanwhile) would reach it from a stranger, and be answered with a Goodbye that
    the leaving client logged as a warning."""
    harness = connected()
    future = harness.submit()
    harness.take()
    harness.core.disconnect(False)
    harness.core.cancel_tasks([future.task_id])
    assert harness.take() == [ClientDisconnect(shutdown_cluster=False)]
    with caplog.at_level(logging.INFO, logger="scaler.client.core"):
        commands = harness.receive(Goodbye(reason="not registered: send Hello first", reconnect=True))
    assert [command[0] for command in commands] == [DISCONNECTED, STOP]
    assert [record.levelno for record in caplog.records if "said goodbye" in record.getMessage()] == [logging.INFO]


def test_what_is_queued_while_a_shutdown_waits_still_leaves() -> None:
    """A shutdown may be refused (a protected scheduler), and the client goes on: nothing queued meanwhile is lost."""
    harness = connected()
    future = harness.submit()
    harness.take()
    harness.core.disconnect(True)
    harness.core.cancel_tasks([future.task_id])
    assert harness.take() == [ClientDisconnect(shutdown_cluster=True), TaskCancel(task_ids=[future.task_id])]
    harness.receive(DisconnectReply(accepted=False, reason="protected mode"))
    harness.core.disconnect_answered()
    harness.core.cancel_tasks([future.task_id])
    assert harness.take() == [TaskCancel(task_ids=[future.task_id])]


def test_a_heartbeat_echo_gives_the_lag_and_the_cadence_it_names() -> None:
    harness = connected()
    harness.now = 2.0
    assert harness.receive(HeartbeatEcho(sent_at_us=1_500_000)) == []
    assert harness.core.lag_us == 500_000
    harness.now = 3.0
    assert harness.receive(HeartbeatEcho(sent_at_us=2_999_000, heartbeat_interval_ms=250)) == [(CADENCE, 0.25)]
    assert harness.core.lag_us == 1000


def test_heartbeats_go_out_at_least_four_times_per_silence_window() -> None:
    harness = Harness(reconnect_seconds=2.0, handshake=False)
    reply = HelloReply(protocol_version=PROTOCOL_VERSION, accepted=True, heartbeat_interval_ms=3000)
    assert (CADENCE, 0.5) in harness.receive(reply), "the scheduler's 3 s would let a 2 s window pass unheard"


def test_a_scheduler_silent_for_the_window_fails_every_future_and_stops() -> None:
    harness = Harness(reconnect_seconds=5.0, handshake=False)
    core = harness.core
    assert core.tick(harness.now + 100) == 0.0 and harness.step() == [], "not timed before the first registration"
    harness.receive(HelloReply(protocol_version=PROTOCOL_VERSION, accepted=True))
    future = harness.submit()
    assert core.tick(harness.now + 4) == harness.now + 5 and harness.step() == []
    harness.now += 4.5
    harness.receive(HeartbeatEcho(sent_at_us=0))  # heard: the window starts again
    harness.lose()  # waiting for a scheduler to come back is timed the same way
    assert core.tick(harness.now + 4.9) == harness.now + 5 and harness.step() == []
    core.tick(harness.now + 5)
    assert harness.step() == [(STOP,)]
    assert isinstance(future.exception(0), SchedulerGoneError)
    assert "no message from the scheduler" in str(future.exception(0)) and core.closed_reason is not None
    assert harness.calls[future.task_id] == 1 and not core.pending
    assert core.tick(harness.now + 60) == 0.0 and harness.step() == [], "closed: nothing more to time"


def test_a_failed_graph_cancels_the_nodes_without_a_future_after_its_keys_were_answered() -> None:
    harness = connected()
    core = harness.core
    (failing, running, key), record = harness.graph([[], [], [0, 1]], [False, False, True])
    assert failing is None and running is None and key is not None
    harness.take()
    harness.answer(key.task_id, WORKER_DIED)  # a dependency failed: the scheduler fails the key at once
    assert key.done() and not core.graphs, "the key was answered: its graph record is dropped"
    core.cancel_futures([key], record.unreported)  # what Client.get does when a key raised
    harness.step()
    (cancel,) = harness.take()
    assert cancel == TaskCancel(task_ids=record.unreported), "the node still running is stopped, as before"


def test_an_upload_asked_for_in_the_frame_that_answered_the_objects_last_task_is_refused() -> None:
    harness = connected()
    core = harness.core
    future = harness.submit(held=[LARGE[0]])
    harness.take()
    result = TaskResult(task_id=future.task_id, status=SUCCESS, payload=payload_of(future.task_id))
    commands = harness.receive(result, ObjectRequest(object_ids=[LARGE[0]]))
    assert commands == [(UPLOAD, [LARGE[0]])]
    core.upload(LARGE[0], large_payload(LARGE[0]))  # the shell still serves it: its delete is queued, not yet sent
    harness.step()
    assert harness.take() == [
        ObjectDelete(object_ids=[LARGE[0]]),
        ObjectResponse(object_id=LARGE[0], found=False),
    ], "not uploaded after its delete: the scheduler would hold it again, owned by nobody"


def test_clear_cancels_every_task_with_the_graphs_unreported_nodes_and_deletes_every_object() -> None:
    harness = connected()
    core = harness.core
    plain = harness.submit(held=[LARGE[0]])
    (key, hidden), record = harness.graph([[], [0]], [True, False])
    assert key is not None and hidden is None
    core.send([(LARGE[1], object_puts(LARGE[1], KIND_OBJECT, "", b"sent with send_object"))], [], pin=LARGE[1])
    harness.step()
    harness.take()
    core.clear()
    harness.step()
    assert plain.cancelled() and key.cancelled() and set(harness.calls.values()) == {1}
    (cancel, delete) = harness.take()
    assert type(cancel) is TaskCancel and sorted(cancel.task_ids) == sorted(
        [plain.task_id, *record.futures, *record.unreported]
    )
    assert type(delete) is ObjectDelete and sorted(delete.object_ids) == sorted([FUNCTION, LARGE[0], LARGE[1]])
    assert not core.ledger.uses() and not core.holds_object(LARGE[1])
    harness.answer(plain.task_id, CANCELED)
    harness.answer(key.task_id)
    assert not core.pending and not core.messages and not core.graphs and not of_type(harness.take(), ObjectDelete)
    again = harness.submit_encoded()  # the function was deleted: sent again before the task
    assert [type(message) for message in harness.take()] == [ObjectPut, Task]
    harness.answer(again.task_id)
    assert again.result() == value_of(again.task_id)


# ---- a seeded simulation ---------------------------------------------------------------------------------------------


class FakeScheduler:
    """A scheduler as the client sees it: it knows only what it received in its session, checks that every task
    arrives after the objects it needs, and answers from what it knows."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.objects: Set[bytes] = set()
        self.tasks: Dict[bytes, Task] = {}  # received, unanswered
        self.finished: Set[bytes] = set()  # succeeded (or sent back as result objects): graph nodes may use them
        self.failed: Dict[bytes, int] = {}  # task id -> how it ended, when not with success
        self.cancelled: Set[bytes] = set()
        self.results: Set[bytes] = set()  # results stored as objects (held by a worker), until deleted
        self.out: List[Any] = []  # messages to the client, in flight

    def take(self, messages: Sequence[Any]) -> None:
        for message in messages:
            kind = type(message)
            if kind is ObjectPut:
                if message.chunk_index == message.chunk_count - 1:
                    self.objects.add(message.object_id)
                    if message.kind == KIND_RESULT:
                        assert message.payload == payload_of(message.object_id), "a result sent back changed"
                        self.finished.add(message.object_id)
            elif kind is Task:
                self._task(message)
            elif kind is TaskCancel:
                self._cancel(message.task_ids)
            elif kind is ObjectDelete:
                for object_id in message.object_ids:
                    self.objects.discard(object_id)
                    self.results.discard(object_id)
            elif kind is ObjectRequest:
                self._request(message)

    def _task(self, task: Task) -> None:
        if task.task_id in self.tasks:
            return  # a copy sent again to the same scheduler
        assert task.function_id in self.objects, f"task {task.task_id.hex()} arrived before its function"
        for argument in task.args:
            if argument.kind == OBJECT_REF:
                assert argument.data in self.objects, f"task {task.task_id.hex()} arrived before its argument"
        for dependency in task.dependencies:
            known = dependency in self.tasks or dependency in self.finished or dependency in self.failed
            assert known or dependency in self.cancelled, f"graph node {task.task_id.hex()} arrived before its input"
        self.tasks[task.task_id] = task

    def _cancel(self, task_ids: Sequence[bytes]) -> None:
        for task_id in task_ids:
            task = self.tasks.pop(task_id, None)
            if task is None:  # answered already, or never received: the scheduler says it does not know it
                self.out.append(TaskResult(task_id=task_id, status=NOT_FOUND))
                continue
            self.cancelled.add(task_id)
            self._end(task, CANCELED)
        children = [task for task in self.tasks.values() if task.parent_task_id in task_ids]
        for child in children:  # nested tasks are canceled with their parent
            del self.tasks[child.task_id]
            self.cancelled.add(child.task_id)
            self._end(child, CANCELED)

    def _request(self, request: ObjectRequest) -> None:
        for object_id in request.object_ids:
            if object_id not in self.results:
                self.out.append(ObjectResponse(object_id=object_id, found=False))
            elif not request.via_scheduler:
                self.out.append(ObjectResponse(object_id=object_id, found=True, holder_address=HOLDER))
            else:
                payload = payload_of(object_id)
                count = self.rng.randint(1, 3)
                size = -(-len(payload) // count)
                for index in range(count):
                    chunk = payload[index * size : (index + 1) * size]
                    response = ObjectResponse(
                        object_id=object_id, found=True, chunk_index=index, chunk_count=count, payload=chunk
                    )
                    self.out.append(response)

    def check_objects(self) -> None:
        """No task waiting here lacks an object it reads (the client deleted none that a pending task needs)."""
        for task in self.tasks.values():
            if not task.report_result:
                continue  # a graph node nobody asked for may outlive its graph's objects
            assert task.function_id in self.objects, f"task {task.task_id.hex()} lost its function"
            for argument in task.args:
                if argument.kind == OBJECT_REF:
                    assert argument.data in self.objects, f"task {task.task_id.hex()} lost its argument"

    def runnable(self) -> List[Task]:
        ready = []
        for task in self.tasks.values():
            if all(dependency in self.finished for dependency in task.dependencies):
                ready.append(task)
            elif any(dependency in self.failed or dependency in self.cancelled for dependency in task.dependencies):
                ready.append(task)  # ends as its input did
        return ready

    def run(self, task: Task, status: int, in_object: bool) -> None:
        del self.tasks[task.task_id]
        for dependency in task.dependencies:
            if dependency in self.cancelled or self.failed.get(dependency) == CANCELED:
                status, in_object = CANCELED, False
                break
            if dependency in self.failed and dependency not in self.finished:
                status, in_object = self.failed[dependency], False
                break
        self._end(task, status, in_object)

    def _end(self, task: Task, status: int, in_object: bool = False) -> None:
        if status == SUCCESS:
            self.finished.add(task.task_id)
            self.failed.pop(task.task_id, None)
        elif task.task_id not in self.finished:
            self.failed[task.task_id] = status
        if not task.report_result:
            return
        if status == SUCCESS and in_object:
            self.results.add(task.task_id)
            self.out.append(TaskResult(task_id=task.task_id, status=SUCCESS, in_object=True))
        elif status == SUCCESS:
            self.out.append(TaskResult(task_id=task.task_id, status=SUCCESS, payload=payload_of(task.task_id)))
        else:
            self.out.append(TaskResult(task_id=task.task_id, status=status))


class Simulation(Harness):
    """A client driven at random against a FakeScheduler, with messages in flight both ways (lost with the
    connection), and a check after every step that each future that settled had a reason to settle as it did."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        super().__init__(reconnect_seconds=5.0)
        self.scheduler = self.new_scheduler()
        self.to_scheduler: List[Any] = []  # taken by the IO thread, not yet read by the scheduler
        self.fetching: List[bytes] = []  # FETCH commands carried out, not yet finished
        self.reasons: Dict[bytes, Set[str]] = {}  # task id -> how its future may settle, as the steps so far allow
        self.settled: Set[bytes] = set()
        self.log: List[str] = []

    def new_scheduler(self) -> FakeScheduler:
        return FakeScheduler(self.rng)

    def step(self) -> List[Command]:
        commands = super().step()
        for command in commands:
            assert command[0] in (FETCH, REGISTER_AGAIN, REGISTERED, HANDSHAKE, CADENCE), (
                f"unexpected command {command}"
            )
            if command[0] == FETCH:
                self.fetching.append(command[1])
        if hasattr(self, "reasons"):
            self._check_settled()
        return commands

    def _check_settled(self) -> None:
        for task_id, future in self.futures.items():
            if task_id in self.settled or not future.done():
                continue
            self.settled.add(task_id)
            assert self.calls[task_id] == 1
            reasons = self.reasons.get(task_id, set())
            if future.cancelled():
                outcome = "cancelled"
            elif isinstance(future.exception(), TaskNotFoundError):
                outcome = "not found"
            elif future.exception() is not None:
                outcome = "died"
                assert isinstance(future.exception(), WorkerDiedError), f"{task_id.hex()}: {future.exception()!r}"
            else:
                outcome = "value"
                assert future.result() == value_of(task_id), f"task {task_id.hex()} settled with the wrong value"
            assert outcome in reasons, f"task {task_id.hex()} {outcome} with only {sorted(reasons)} to justify it"

    def allow(self, task_id: bytes, outcome: str) -> None:
        self.reasons.setdefault(task_id, set()).add(outcome)

    # ---- the user ----------------------------------------------------------------------------------------------------

    def parent(self) -> bytes:
        return self.rng.choice(list(self.futures)) if self.futures and self.rng.random() < 0.5 else b""

    def do_submit(self) -> None:
        held = self.rng.sample(LARGE, self.rng.randint(1, 2)) if self.rng.random() < 0.4 else []
        self.submit(held=held, parent=self.parent() if self.rng.random() < 0.2 else b"")

    def do_submit_encoded(self) -> None:
        self.submit_encoded(parent=self.parent() if self.rng.random() < 0.2 else b"")

    def do_graph(self) -> None:
        count = self.rng.randint(2, 4)
        dependencies = [self.rng.sample(range(index), self.rng.randint(0, min(index, 2))) for index in range(count)]
        requested = [self.rng.random() < 0.6 for _ in range(count)]
        requested[self.rng.randrange(count)] = True
        held = [self.rng.choice(LARGE)] if self.rng.random() < 0.3 else []
        self.graph(dependencies, requested, held)

    def do_cancel(self) -> None:
        pending = [future for future in self.futures.values() if not future.done()]
        if not pending:
            return
        future = self.rng.choice(pending)
        self.allow(future.task_id, "cancelled")
        if self.rng.random() < 0.7:
            assert future.cancel()
        else:  # as Client.cancel_all: the graph's unreported nodes too
            self.core.cancel_futures([future])
        self.step()

    def do_clear(self) -> None:
        for task_id, future in self.futures.items():
            if not future.done():
                self.allow(task_id, "cancelled")
        self.core.clear()
        self.step()

    # ---- the wire and the scheduler ----------------------------------------------------------------------------------

    def do_flush(self) -> None:
        if self.core.registered:
            self.to_scheduler.extend(self.take())

    def do_deliver_to_scheduler(self) -> None:
        if not self.core.registered:
            return
        count = self.rng.randint(0, len(self.to_scheduler))
        messages, self.to_scheduler = self.to_scheduler[:count], self.to_scheduler[count:]
        self.scheduler.take(messages)
        self.scheduler.check_objects()

    def do_run(self, statuses: Optional[List[Tuple[int, bool]]] = None) -> None:
        ready = self.scheduler.runnable()
        self.rng.shuffle(ready)
        for task in ready[: self.rng.randint(1, 3)] if statuses is None else ready:
            status, in_object = self.rng.choice(statuses or OUTCOMES)
            self.scheduler.run(task, status, in_object)

    def do_deliver_to_client(self, everything: bool = False) -> None:
        if not self.core.registered:
            return
        out = self.scheduler.out
        count = len(out) if everything else self.rng.randint(0, len(out))
        messages, self.scheduler.out = out[:count], out[count:]
        if not messages:
            return
        was_pending = {task_id for task_id, future in self.futures.items() if not future.done()}
        for message in messages:
            if type(message) is TaskResult:
                if message.status == SUCCESS:
                    self.allow(message.task_id, "value")
                else:
                    self.allow(message.task_id, STATUS_OUTCOMES[message.status])
        self.receive(*messages)
        for message in messages:
            task_id = getattr(message, "task_id", None)
            if type(message) is TaskResult and task_id in was_pending and not message.in_object:
                if task_id in self.core.fetches:
                    continue  # answered already, its result being fetched: a second answer is ignored
                assert self.futures[task_id].done(), f"an answer left task {task_id.hex()} pending"

    def do_fetch(self) -> None:
        if not self.fetching:
            return
        object_id = self.fetching.pop(self.rng.randrange(len(self.fetching)))
        choice = self.rng.random()
        if choice < 0.7:
            self.core.fetched(object_id, payload_of(object_id), False)
        elif choice < 0.85:
            self.core.fetched(object_id, None, self.rng.random() < 0.5)
        else:
            self.core.fetch_unreachable(object_id)
        self.step()

    def do_lose(self) -> None:
        if not self.core.registered:
            return
        if self.rng.random() < 0.3:
            assert self.receive(Goodbye(reason="restarting", reconnect=True)) == [(REGISTER_AGAIN,)]
        else:
            self.lose()
        self.to_scheduler = []
        self.scheduler.out = []
        self.fetching = []  # the shell's fetches went with it (a late one would be ignored: see do_fetch)

    def do_reconnect(self, resumed: Optional[bool] = None) -> None:
        if self.core.registered:
            return
        resumed = self.rng.random() < 0.5 if resumed is None else resumed
        if not resumed:
            self.scheduler = self.new_scheduler()
        self.scheduler.out = []  # what it sent while the client was away went nowhere
        self.to_scheduler = []
        self.register(resumed=resumed)

    def do_heartbeat(self) -> None:
        self.now += self.rng.random()
        interval = self.rng.choice([0, 500])
        commands = self.receive(
            HeartbeatEcho(sent_at_us=int(self.now * 1_000_000) - 700, heartbeat_interval_ms=interval)
        )
        assert self.core.lag_us == 700
        assert commands == ([(CADENCE, interval / 1000)] if interval else [])

    # ---- the run -----------------------------------------------------------------------------------------------------

    def walk(self, steps: int) -> None:
        actions: List[Tuple[Callable[[], None], int]] = [
            (self.do_submit, 10),
            (self.do_submit_encoded, 10),
            (self.do_graph, 5),
            (self.do_flush, 14),
            (self.do_deliver_to_scheduler, 14),
            (self.do_run, 18),
            (self.do_deliver_to_client, 14),
            (self.do_fetch, 8),
            (self.do_cancel, 4),
            (self.do_clear, 1),
            (self.do_lose, 2),
            (self.do_reconnect, 5),
            (self.do_heartbeat, 2),
        ]
        choices = [action for action, _ in actions]
        weights = [weight for _, weight in actions]
        for _ in range(steps):
            action = self.rng.choices(choices, weights)[0]
            self.log.append(action.__name__)
            action()

    def drain(self) -> None:
        """Answer everything, without losing the scheduler, until nothing is pending."""
        for _ in range(100):
            self.do_reconnect()
            self.do_flush()
            self.scheduler.take(self.to_scheduler)
            self.to_scheduler = []
            self.scheduler.check_objects()
            self.do_run([(SUCCESS, False), (SUCCESS, True), (WORKER_DIED, False)])
            self.do_deliver_to_client(everything=True)
            while self.fetching:
                object_id = self.fetching.pop()
                self.core.fetched(object_id, payload_of(object_id), False)
                self.step()
            if not self.core.pending and not self.core.fetches and not self.core.send_queue.items:
                return
        pending = sorted(task_id.hex() for task_id in [*self.core.pending, *self.core.fetches])
        raise AssertionError(f"still unanswered after draining: {pending}; scheduler knows {len(self.scheduler.tasks)}")


STATUS_OUTCOMES = {CANCELED: "cancelled", WORKER_DIED: "died", NOT_FOUND: "not found"}
OUTCOMES: List[Tuple[int, bool]] = [
    (SUCCESS, False),
    (SUCCESS, False),
    (SUCCESS, False),
    (SUCCESS, True),
    (SUCCESS, True),
    (WORKER_DIED, False),
    (CANCELED, False),
]


@pytest.mark.parametrize("seed", range(20))
def test_random_walk_settles_every_future_once_with_its_outcome(seed: int) -> None:
    simulation = Simulation(seed)
    simulation.walk(300)
    simulation.drain()
    core = simulation.core
    assert not core.pending and not core.fetches and not core.messages and not core.graphs and not core.held
    assert not core.ledger.uses()
    for task_id, future in simulation.futures.items():
        assert future.done(), f"task {task_id.hex()} never settled"
        assert simulation.calls[task_id] == 1, f"task {task_id.hex()} settled {simulation.calls[task_id]} times"
    assert simulation.settled == set(simulation.futures)
