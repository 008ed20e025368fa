"""The API contract other components code against: classes, defaults, equality, repr, errors on encode."""

from __future__ import annotations

import os
from typing import Any

import pytest

import scaler.protocol as protocol
from scaler.protocol import (
    MESSAGE_TYPES,
    PROTOCOL_VERSION,
    Argument,
    ArgumentKind,
    ClientHeartbeat,
    Counter,
    HeartbeatEcho,
    Hello,
    ObjectKind,
    ObjectPut,
    ObjectResponse,
    OutputStream,
    ProtocolError,
    Role,
    SchedulerStatus,
    Task,
    TaskOutput,
    TaskResult,
    TaskStatus,
    WorkerHeartbeat,
    WorkerStatus,
    decode_frame,
    encode,
    encode_many,
)

pytestmark = pytest.mark.timeout(60)


def test_message_types_in_union_order() -> None:
    names = [cls.__name__ for cls in MESSAGE_TYPES]
    assert len(names) == 26 and names[0] == "Hello" and names[5] == "Task" and names[18] == "SchedulerStatus"
    assert names[19] == "TaskOutput"  # appended after the first release of the protocol: fields only ever appended
    assert names[20] == "WorkerRetire"
    assert names[21:] == ["DataRequest", "DataResponse", "RelayHello", "DataKeys", "ActorRelease"]
    assert [cls.WHICH for cls in MESSAGE_TYPES] == list(range(26))
    assert not hasattr(protocol, "Message")
    assert not hasattr(Argument, "WHICH") and not hasattr(Argument(), "raw")


def test_constants_and_enums() -> None:
    assert PROTOCOL_VERSION == 1
    assert issubclass(ProtocolError, ValueError)
    assert (TaskStatus.success, TaskStatus.not_found, TaskStatus.worker_died, TaskStatus.refused) == (0, 3, 4, 5)
    assert (ArgumentKind.inline, ArgumentKind.object_ref, ArgumentKind.task_ref) == (0, 1, 2)
    assert (Role.client, Role.worker, Role.monitor) == (0, 1, 2)
    assert (ObjectKind.object, ObjectKind.function, ObjectKind.result) == (0, 1, 2)
    assert (OutputStream.stdout, OutputStream.stderr) == (0, 1)


def test_defaults() -> None:
    task = Task()
    assert (task.task_id, task.args, task.dependencies) == (b"", [], [])
    assert task.profiling is False and task.report_result is True and task.stream_output is False
    assert TaskOutput().stream == OutputStream.stdout and TaskOutput().data == b""
    assert ObjectPut().chunk_count == 1 and ObjectResponse().chunk_count == 1 and ObjectPut().name == ""
    assert WorkerHeartbeat().agent_cpu == 0.0 and Hello().role == Role.client
    assert Task().args is not Task().args, "each instance needs its own list"
    assert Task().raw is None


def test_keyword_only_constructor() -> None:
    with pytest.raises(TypeError):
        Counter("name", 1)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Counter(nme="typo")  # type: ignore[call-arg]


def test_equality_and_repr_ignore_raw() -> None:
    (decoded,) = decode_frame(encode(Task(task_id=b"t")))
    assert decoded.raw is not None and decoded == Task(task_id=b"t")
    assert "raw" not in repr(decoded)
    assert Task(task_id=b"t") != Task(task_id=b"u")
    assert Task() != TaskResult() and Counter() != Argument()
    assert Counter(name="a", value=1) == Counter(name="a", value=1)
    assert repr(Counter(name="a", value=1)) == "Counter(name='a', value=1)"
    assert "status=TaskStatus.failed" in repr(TaskResult(status=TaskStatus.failed))
    assert "status=77" in repr(TaskResult(status=77))
    assert "<100000 bytes" in repr(ObjectPut(payload=bytes(100_000)))
    with pytest.raises(TypeError):
        hash(Task())


def test_slots_only() -> None:
    with pytest.raises(AttributeError):
        Task().not_a_field = 1  # type: ignore[attr-defined]


def test_flexible_but_exact_inputs() -> None:
    reference = encode(Task(task_id=b"abc", args=[Argument(kind=ArgumentKind.task_ref, data=b"d")], profiling=True))
    assert encode(Task(task_id=bytearray(b"abc"), args=(Argument(kind=2, data=memoryview(b"d")),), profiling=1)) == (
        reference
    )


class Name(str):
    def __str__(self) -> str:
        return "not what was given"


def test_buffers_of_any_format_and_str_subclasses_encode_their_contents() -> None:
    words = memoryview(bytes(range(12))).cast("I")  # len() is 3, the bytes are 12
    assert encode(Task(task_id=words, dependencies=[words])) == encode(
        Task(task_id=bytes(range(12)), dependencies=[bytes(range(12))])
    )
    assert encode_many([Hello(name=Name("w")), ObjectPut(payload=words)]) == encode(Hello(name="w")) + encode(
        ObjectPut(payload=bytes(range(12)))
    )


def test_encode_many_and_multi_message_frames() -> None:
    messages = [Hello(name="a"), Task(task_id=b"t"), HeartbeatEcho(sent_at_us=5)]
    frame = encode_many(messages)
    assert frame == b"".join(encode(msg) for msg in messages)
    assert decode_frame(frame) == messages
    assert encode_many([]) == b""
    big = ObjectPut(object_id=b"o", payload=bytes(range(256)) * 40)  # big enough to be laid out after the rest
    messages = [big, Hello(name="a"), big, big, Task(task_id=b"t")]
    frame = encode_many(messages)
    assert frame == b"".join(encode(msg) for msg in messages)
    assert decode_frame(frame) == messages


def test_float32_rounds_on_decode() -> None:
    (heartbeat,) = decode_frame(encode(ClientHeartbeat(cpu=0.1)))
    assert heartbeat.cpu != 0.1 and abs(heartbeat.cpu - 0.1) < 1e-7


# Messages encode() must refuse, the error it raises, and the field the message must name.
INVALID_MESSAGES = [
    (Task(task_id="text"), TypeError, "Task.task_id"),
    (Hello(name=b"bytes"), TypeError, "Hello.name"),
    (Hello(pid=-1), ValueError, "Hello.pid"),
    (Hello(pid=1 << 32), ValueError, "Hello.pid"),
    (Hello(pid=1.5), TypeError, "Hello.pid"),
    (Hello(role=1 << 16), ValueError, "Hello.role"),
    (WorkerHeartbeat(flags=256), ValueError, "WorkerHeartbeat.flags"),
    (HeartbeatEcho(sent_at_us=1 << 64), ValueError, "HeartbeatEcho.sent_at_us"),
    (WorkerHeartbeat(agent_cpu=1e39), ValueError, "WorkerHeartbeat.agent_cpu"),
    (ClientHeartbeat(cpu="1"), TypeError, "ClientHeartbeat.cpu"),
    (Task(profiling="yes"), TypeError, "Task.profiling"),
    (Task(report_result=None), TypeError, "Task.report_result"),
    (Task(profiling=2), TypeError, "Task.profiling"),
    (Hello(hostname="\ud800"), ValueError, "Hello.hostname"),
    (Task(args=[Counter()]), TypeError, r"Task.args\[0\]"),
    (Task(args="abc"), TypeError, "Task.args"),
    (Task(dependencies=[b"ok", 5]), TypeError, r"Task.dependencies\[1\]"),
    (Task(dependencies=b"abc"), TypeError, "Task.dependencies"),
    (SchedulerStatus(workers=[WorkerStatus(), WorkerStatus(free=-1)]), ValueError, r"workers\[1\].free"),
    (SchedulerStatus(sent=[Counter(name=3)]), TypeError, r"SchedulerStatus.sent\[0\].name"),
    (Task(task_id=None), TypeError, "Task.task_id"),
    (Task(serializer_id=0), TypeError, "Task.serializer_id"),
    (ObjectPut(payload=""), TypeError, "ObjectPut.payload"),
    (ObjectPut(payload=[1, 2]), TypeError, "ObjectPut.payload"),
    (Hello(name=None), TypeError, "Hello.name"),
    (Task(args=[Argument(name=None)]), TypeError, r"Task.args\[0\].name"),
    (Task(args=[Argument(data="x" * 2000)]), TypeError, r"Task.args\[0\].data"),
]


@pytest.mark.parametrize(("msg", "error", "names"), INVALID_MESSAGES)
def test_encode_errors_name_the_field(msg: Any, error: type, names: str) -> None:
    with pytest.raises(error, match=names):
        encode(msg)
    with pytest.raises(error, match=names):
        encode_many([Hello(), msg])


def test_unset_attribute() -> None:
    task = Task()
    del task.function_id
    with pytest.raises(TypeError, match="Task.function_id"):
        encode(task)


@pytest.mark.parametrize("value", [Argument(), Counter(), object(), None, b"raw bytes"])
def test_encode_rejects_non_messages(value: Any) -> None:
    with pytest.raises(TypeError, match="not a protocol message"):
        encode(value)


def test_decode_frame_rejects_non_buffers() -> None:
    with pytest.raises(TypeError):
        decode_frame(5)  # type: ignore[arg-type]


def enough_memory(gib: int) -> bool:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >= gib << 30
    except (ValueError, OSError, AttributeError):
        return False


@pytest.mark.skipif(not enough_memory(8), reason="needs several GiB of RAM")
def test_data_size_limit() -> None:
    limit = (1 << 29) - 1
    with pytest.raises(ValueError, match="ObjectPut.payload"):
        encode(ObjectPut(payload=bytes(limit + 1)))
    biggest = ObjectPut(object_id=b"o", payload=b"\x01" * limit)
    (decoded,) = decode_frame(encode(biggest))
    assert len(decoded.payload) == limit and decoded.payload == biggest.payload
