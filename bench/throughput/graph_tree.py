"""A binary reduction tree of ~100,000 task nodes through client.get, on a local cluster.

    .venv/bin/python -m bench.throughput.graph_tree                      # scheduler on CPython and on PyPy
    .venv/bin/python -m bench.throughput.graph_tree --leaves 5000 --scheduler-python .venv-pypy/bin/python

Leaves are tasks (leaf(i) = i), every inner node adds its two children, so a tree over L leaves is 2L - 1 tasks
(100,000 leaves' worth: --leaves 50000 gives 99,999). The root's value is checked. Wall time covers planning the graph,
sending it, and running it; medians over --repeat runs on fresh clusters.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict, List

import cloudpickle

from bench.localcluster import CPYTHON, PYPY, LocalCluster, cpu_seconds, interpreter_label, median, timed
from scaler import Client

if __name__ != "__main__":  # imported by another benchmark: workers cannot import this file, so ship it by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def leaf(value: int) -> int:
    return value


def add(left: int, right: int) -> int:
    return left + right


def reduction_tree(leaves: int) -> tuple:
    """(graph, root key): each level adds neighbours of the level below pairwise; an odd one out moves up as it is."""
    graph: Dict[Any, Any] = {("leaf", i): (leaf, i) for i in range(leaves)}
    keys: List[Any] = list(graph)
    level = 0
    while len(keys) > 1:
        level += 1
        above = []
        for i in range(0, len(keys) - 1, 2):
            key = ("add", level, i // 2)
            graph[key] = (add, keys[i], keys[i + 1])
            above.append(key)
        if len(keys) % 2:
            above.append(keys[-1])
        keys = above
    return graph, keys[0]


def run_tree(client: Client, leaves: int) -> int:
    graph, root = reduction_tree(leaves)
    tasks = len(graph)
    value = client.get(graph, keys=[root])[root]
    if value != leaves * (leaves - 1) // 2:
        raise AssertionError(f"tree of {leaves} leaves summed to {value}")
    return tasks


def run_tree_in_phases(client: Client, leaves: int, roles: Dict[str, list]) -> Dict[str, float]:
    """run_tree, timed by phase: planning (plan_graph alone, repeated before the call), planning plus building and
    sending the frame (get with block=False), waiting for the root; and each role's CPU seconds over the whole call."""
    from scaler.client.graph import plan_graph

    graph, root = reduction_tree(leaves)
    start = time.perf_counter()
    plan_graph(graph, [root])
    plan = time.perf_counter() - start
    before = {role: sum(cpu_seconds(process) for process in processes) for role, processes in roles.items()}
    start = time.perf_counter()
    future = client.get(graph, keys=[root], block=False)[root]
    submitted = time.perf_counter()
    value = future.result()
    done = time.perf_counter()
    if value != leaves * (leaves - 1) // 2:
        raise AssertionError(f"tree of {leaves} leaves summed to {value}")
    split = {"plan": plan, "plan and submit": submitted - start, "wait": done - submitted}
    for role, processes in roles.items():
        split[f"CPU {role}"] = sum(cpu_seconds(process) for process in processes) - before[role]
    return split


def measure(
    scheduler_python: str, leaves: int, workers: int, scheduler_args: List[str], phases: bool = False
) -> Dict[str, float]:
    with LocalCluster(scheduler_python, workers=workers, scheduler_args=scheduler_args) as cluster:
        with Client(cluster.address) as client:
            run_tree(client, 64)  # warm-up: connection, functions shipped to workers
            cluster.rss.reset_peak()
            if phases:
                split = run_tree_in_phases(client, leaves, cluster.roles())
                seconds, tasks = split["plan and submit"] + split["wait"], 2 * leaves - 1
                print("  ".join(f"{name} {value * 1000:.0f} ms" for name, value in split.items()), flush=True)
            else:
                seconds, tasks = timed(run_tree, client, leaves)
            peak = max(cluster.rss.peak, cluster.rss.current())
    return {"seconds": seconds, "tasks": tasks, "tasks_per_second": tasks / seconds, "peak_rss_mib": peak / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scheduler-python", action="append", help=f"repeatable (default: {CPYTHON} and {PYPY})")
    parser.add_argument("--leaves", type=int, default=50_000, help="leaf tasks; the tree has 2 * leaves - 1 tasks")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--phases", action="store_true", help="print each measured graph's time and CPU by phase")
    parser.add_argument(
        "--scheduler-arg", action="append", default=[], metavar="ARG",
        help="passed to every scheduler, repeatable: --scheduler-arg=--jit-warmup --scheduler-arg=0",
    )  # fmt: skip
    args = parser.parse_args()
    if args.leaves < 2 or args.workers < 1 or args.repeat < 1:
        parser.error("--leaves must be >= 2, --workers and --repeat >= 1")
    pythons = args.scheduler_python or [CPYTHON, PYPY]
    runs: Dict[str, List[Dict[str, float]]] = {python: [] for python in pythons}
    for attempt in range(args.repeat):
        for python in pythons:
            figures = measure(python, args.leaves, args.workers, args.scheduler_arg, args.phases)
            runs[python].append(figures)
            print(f"run {attempt + 1}: {python}: {figures['seconds']:.2f} s", flush=True)
    tasks = int(runs[pythons[0]][0]["tasks"])
    print(f"\nBinary reduction tree, {tasks:,} tasks via client.get, {args.workers} workers; medians of {args.repeat}")
    header = f"{'scheduler':<22}{'wall s':>9}{'tasks/s':>11}{'peak RSS MiB':>14}"
    print(header)
    print("-" * len(header))
    for python, figures in runs.items():
        print(
            f"{interpreter_label(python):<22}{median([f['seconds'] for f in figures]):>9.2f}"
            f"{median([f['tasks_per_second'] for f in figures]):>11,.0f}"
            f"{median([f['peak_rss_mib'] for f in figures]):>14.1f}"
        )


if __name__ == "__main__":
    main()
