"""Planning a graph costs memory linear in its size and no recursion, so a 100,000-node chain plans fine."""

from __future__ import annotations

import tracemalloc
from typing import Any, Dict

from scaler.client.graph import plan_graph


def increment(value: int) -> int:
    return value + 1


def chain(length: int) -> Dict[str, Any]:
    graph: Dict[str, Any] = {"n0": 0}
    for index in range(1, length):
        graph[f"n{index}"] = (increment, f"n{index - 1}")
    return graph


def peak_bytes_per_node(length: int) -> float:
    graph = chain(length)
    tracemalloc.start()
    try:
        plan = plan_graph(graph, [f"n{length - 1}"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(plan.tasks) == length - 1  # the constant is inlined, every other node is a task
    return peak / length


def test_planning_memory_is_linear_in_graph_size() -> None:
    small, large = peak_bytes_per_node(5_000), peak_bytes_per_node(20_000)
    assert 0.8 < large / small < 1.25, (small, large)


def test_a_100000_node_chain_plans_without_recursion() -> None:
    plan = plan_graph(chain(100_000), ["n99999"])
    assert len(plan.tasks) == 99_999
