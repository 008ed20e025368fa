"""The fastpath codec on the messages of the hot path: a task, a result, and a frame of 256 tasks as clients batch."""

from __future__ import annotations

from scaler.protocol import Argument, ArgumentKind, Task, TaskResult, TaskStatus, decode_frame, encode, encode_many

TASK = Task(
    task_id=bytes(range(16)),
    function_id=bytes(range(16, 32)),
    args=[Argument(kind=ArgumentKind.inline, data=b"\x80\x05\x95" + b"a" * 17)],
)
RESULT = TaskResult(task_id=bytes(range(16)), status=TaskStatus.success, payload=b"r" * 64, duration_us=1234)
BATCH = [Task(task_id=n.to_bytes(16, "big"), function_id=TASK.function_id, args=TASK.args) for n in range(256)]


def test_encode_task(benchmark) -> None:
    assert decode_frame(benchmark(encode, TASK)) == [TASK]


def test_decode_task(benchmark) -> None:
    assert benchmark(decode_frame, encode(TASK)) == [TASK]


def test_encode_task_result(benchmark) -> None:
    assert decode_frame(benchmark(encode, RESULT)) == [RESULT]


def test_decode_task_result(benchmark) -> None:
    assert benchmark(decode_frame, encode(RESULT)) == [RESULT]


def test_encode_frame_of_256_tasks(benchmark) -> None:
    assert decode_frame(benchmark(encode_many, BATCH)) == BATCH


def test_decode_frame_of_256_tasks(benchmark) -> None:
    assert benchmark(decode_frame, encode_many(BATCH)) == BATCH
