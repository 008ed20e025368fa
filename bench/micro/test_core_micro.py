"""The sans-IO scheduler core routing a frame of 256 tasks to two workers and their results back to the client.

Per task, divide the median by 256. `test_core_route` feeds already-decoded messages (the core alone);
`test_decode_and_route` also decodes the incoming frames (with decode_frame_for_routing) and joins the outgoing
ones, as the shell does.
"""

from __future__ import annotations

from typing import Dict, List

import pytest

from scaler.protocol import (
    Argument,
    ArgumentKind,
    Task,
    TaskResult,
    TaskStatus,
    decode_frame,
    decode_frame_for_routing,
    encode,
    encode_many,
)
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, WORKER_B, Harness

BATCH = 256


@pytest.fixture
def routed() -> tuple:
    """A core with a client and two workers, a frame of BATCH tasks, and each task's result keyed by its bytes."""
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=10_000)
    harness.connect_worker(WORKER_B, capacity=10_000)
    tasks = [
        Task(
            task_id=n.to_bytes(16, "big"),
            function_id=b"f" * 16,
            args=[Argument(kind=ArgumentKind.inline, data=b"\x80\x05K\x01.")],
        )
        for n in range(BATCH)
    ]
    frame = encode_many(tasks)
    results: Dict[bytes, TaskResult] = {}
    for task in tasks:
        (decoded,) = decode_frame(encode(TaskResult(task_id=task.task_id, status=TaskStatus.success, payload=b"N.")))
        results[encode(task)] = decoded
    return harness.core, frame, results


def _route(core, tasks: List[object], results: Dict[bytes, TaskResult], decode: bool) -> int:
    core.receive(CLIENT, tasks, 1000.0)
    for peer, chunks in core.take_outgoing().items():
        answers = [results[chunk] for chunk in chunks]
        core.receive(peer, decode_frame_for_routing(b"".join(r.raw for r in answers)) if decode else answers, 1000.0)
    back = core.take_outgoing()[CLIENT]
    if decode:
        b"".join(back)
    return len(back)


def test_core_route(benchmark, routed) -> None:
    core, frame, results = routed
    tasks = decode_frame(frame)
    assert benchmark(_route, core, tasks, results, False) == BATCH
    assert not core.tasks


def test_decode_and_route(benchmark, routed) -> None:
    core, frame, results = routed
    assert benchmark(lambda: _route(core, decode_frame_for_routing(frame), results, True)) == BATCH
    assert not core.tasks
