"""What a worker sends the scheduler (sans-IO): short tasks' results gathered into one run of encoded messages."""

from __future__ import annotations

import os

from scaler.protocol import Encoded, TaskResult, TaskStatus, decode_frame, encode, encode_many
from scaler.worker.success_results import SuccessResults


def test_results_added_leave_as_one_run_of_messages_in_their_order_with_their_payload_bytes() -> None:
    results = SuccessResults()
    assert results.take() is None
    added = [(os.urandom(16), os.urandom(size)) for size in (5, 5, 0, 3000, 5)] + [(b"", b"x"), (os.urandom(40), b"y")]
    for task_id, payload in added:
        results.add(task_id, payload)
    batch, payload_bytes = results.take()
    assert type(batch) is Encoded and payload_bytes == sum(len(payload) for _, payload in added)
    expected = [TaskResult(task_id=task_id, status=TaskStatus.success, payload=payload) for task_id, payload in added]
    assert bytes(batch) == b"".join(encode(message) for message in expected), "byte for byte what encode() writes"
    decoded = decode_frame(batch)
    assert all(message.status == TaskStatus.success for message in decoded)
    assert [(message.task_id, message.payload) for message in decoded] == added
    assert results.take() is None, "taken once"


def test_a_run_travels_among_other_messages_in_one_frame() -> None:
    results = SuccessResults()
    results.add(b"a" * 16, b"1")
    results.add(b"b" * 16, b"2")
    failed = TaskResult(task_id=b"c" * 16, status=TaskStatus.failed, payload=b"error")
    batch, _ = results.take()
    decoded = decode_frame(encode_many([batch, failed]))
    assert [(message.task_id, message.status) for message in decoded] == [
        (b"a" * 16, TaskStatus.success),
        (b"b" * 16, TaskStatus.success),
        (b"c" * 16, TaskStatus.failed),
    ]
