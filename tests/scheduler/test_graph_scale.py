"""A graph's cost in the scheduler core is linear in its size, and nothing of it stays once it ran.

Measured with tracemalloc on the core alone, at two sizes four times apart; the 100,000-node run is in the report and
bench/throughput/graph_tree.py, too slow for a unit test."""

from __future__ import annotations

import gc
import platform
from typing import List

import pytest

from scaler.protocol import Task, decode_frame_for_routing, encode_many
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, Harness, of_type, result


def chain(harness: Harness, length: int) -> List[Task]:
    """n0 <- n1 <- ... : every node depends on the one before; only the last reports its result."""
    tasks = [harness.task(report_result=False)]
    for index in range(1, length):
        tasks.append(harness.task(dependencies=[tasks[-1].task_id], report_result=index == length - 1))
    return tasks


def held_per_node(length: int) -> float:
    """Bytes the core holds per node once the graph is in; then runs it and checks that nothing of it is left."""
    harness = Harness(validate=False)  # 8,000 steps over 8,000 tasks: validated where the graph is in, and at the end
    harness.connect_client()
    harness.connect_worker(capacity=10)
    tasks = chain(harness, length)
    last_id = tasks[-1].task_id
    frame = encode_many(tasks)
    del tasks
    gc.collect()
    import tracemalloc  # not on PyPy: the test is skipped there

    tracemalloc.start()
    try:
        harness.core.receive(CLIENT, decode_frame_for_routing(frame), harness.now)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    harness.core.validate()
    (running,) = of_type(harness.outbox()[WORKER_A], Task)
    ran = 0
    while True:
        out = harness.send(WORKER_A, result(running, payload=b"value"))
        ran += 1
        following = of_type(out.get(WORKER_A, []), Task)
        if not following:
            break
        (running,) = following
        assert running.args[0].data == b"value", "the result the next node reads travels inside it..."
        assert not harness.core.objects, "...so none is kept as an object"
    (answer,) = out[CLIENT]
    assert ran == length and answer.task_id == last_id and answer.payload == b"value"
    assert not harness.core.tasks and not harness.core.objects, "every intermediate result was freed"
    harness.core.validate()
    return held / length


@pytest.mark.skipif(platform.python_implementation() == "PyPy", reason="PyPy has no tracemalloc")
def test_a_chain_graph_costs_memory_linear_in_its_size_and_leaves_nothing() -> None:
    small, large = held_per_node(2_000), held_per_node(8_000)
    assert 0.8 < large / small < 1.25, (small, large)
