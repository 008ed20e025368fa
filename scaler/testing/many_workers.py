"""Internal: many real workers, several clients at once: a scheduler, several `scaler_cluster -n N`, and client
processes each submitting a `map` and a graph while the others do. Every result is checked.
tests/e2e/test_many_workers.py runs it small in CI; bench/scale/many_workers.py runs it full size (several clusters of
32 workers) and times it."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from scaler import Client
from scaler.testing.processes import ScalerProcess, free_tcp_address, wait_for


def square(value: int) -> int:
    return value * value


def add(left: int, right: int) -> int:
    return left + right


def reduction_graph(prefix: str, leaves: int) -> Dict[str, Any]:
    """`leaves` squares summed pairwise up a binary tree to `{prefix}root`: 2 * leaves - 1 tasks."""
    graph: Dict[str, Any] = {f"{prefix}v{i}": i for i in range(leaves)}
    level = []
    for i in range(leaves):
        graph[f"{prefix}s{i}"] = (square, f"{prefix}v{i}")
        level.append(f"{prefix}s{i}")
    depth = 0
    while len(level) > 1:
        depth += 1
        following = []
        for i in range(0, len(level) - 1, 2):
            key = f"{prefix}a{depth}_{i}"
            graph[key] = (add, level[i], level[i + 1])
            following.append(key)
        if len(level) % 2:
            following.append(level[-1])
        level = following
    graph[f"{prefix}root"] = (add, level[0], f"{prefix}v0")  # v0 is 0: the root is the sum of squares
    return graph


def client_workload(address: str, index: int, map_tasks: int, graph_leaves: int) -> Dict[str, Any]:
    """One client: a map and a graph submitted together, every value checked; raises on the first wrong one."""
    start = time.monotonic()
    with Client(address, timeout_seconds=60) as client:
        prefix = f"c{index}-"
        graph = reduction_graph(prefix, graph_leaves)
        graph_futures = client.submit_graph(graph, [f"{prefix}root"])
        values = client.map(square, [(index * map_tasks + i,) for i in range(map_tasks)])
        expected = [(index * map_tasks + i) ** 2 for i in range(map_tasks)]
        if values != expected:
            wrong = next(i for i, (got, want) in enumerate(zip(values, expected)) if got != want)
            raise AssertionError(f"client {index}: map result {wrong} is {values[wrong]}, expected {expected[wrong]}")
        root = graph_futures[0].result(timeout=600)
        if root != sum(i * i for i in range(graph_leaves)):
            raise AssertionError(f"client {index}: graph root is {root}")
    return {"client": index, "tasks": map_tasks + 2 * graph_leaves, "seconds": time.monotonic() - start}


def _client_process(address: str, index: int, map_tasks: int, graph_leaves: int, results) -> None:
    try:
        results.put(client_workload(address, index, map_tasks, graph_leaves))
    except BaseException as error:  # noqa: B036 - the parent reports it
        results.put({"client": index, "error": f"{type(error).__name__}: {error}"})


class ManyWorkers:
    """A scheduler (under `scheduler_python`) and `clusters` x `scaler_cluster -n workers_per_cluster`."""

    def __init__(
        self,
        directory: Path,
        clusters: int,
        workers_per_cluster: int,
        scheduler_python: Optional[str] = None,
    ) -> None:
        self.address = free_tcp_address()
        self.monitor_address = f"ipc://{directory / 'monitor'}"
        self.workers = clusters * workers_per_cluster
        self.processes: List[ScalerProcess] = []
        self.scheduler = ScalerProcess(
            "scaler.scheduler",
            [self.address, "--monitor-address", self.monitor_address],
            str(directory / "scheduler.log"),
            scheduler_python,
        )
        self.processes.append(self.scheduler)
        try:
            self.scheduler.wait_for_output("Scheduler: listening on", timeout=60)
            for index in range(clusters):
                self.processes.append(
                    ScalerProcess(
                        "scaler.cluster",
                        ["-n", str(workers_per_cluster), self.address, "--logging-level", "WARNING"],
                        str(directory / f"cluster{index}.log"),
                        sys.executable,
                    )
                )
            self.wait_for_workers(timeout=120)
        except BaseException:
            self.close()
            raise

    def connected_workers(self) -> int:
        return self.scheduler.output().count("connected, capacity")

    def wait_for_workers(self, timeout: float) -> None:
        wait_for(lambda: self.connected_workers() >= self.workers, timeout, f"{self.workers} workers connected")

    def run_clients(self, clients: int, map_tasks: int, graph_leaves: int, timeout: float) -> List[Dict[str, Any]]:
        """`clients` client processes at once; their figures, or AssertionError naming each that failed."""
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no ZeroMQ context inherited
        results = context.Queue()
        children = [
            context.Process(target=_client_process, args=(self.address, index, map_tasks, graph_leaves, results))
            for index in range(clients)
        ]
        for child in children:
            child.start()
        figures: List[Dict[str, Any]] = []
        try:
            deadline = time.monotonic() + timeout
            while len(figures) < clients:
                figures.append(results.get(timeout=max(1.0, deadline - time.monotonic())))
        finally:
            for child in children:
                child.join(timeout=10)
                if child.is_alive():
                    child.kill()
                    child.join()
        failures = [figure["error"] for figure in figures if "error" in figure]
        if failures:
            raise AssertionError("; ".join(failures))
        return sorted(figures, key=lambda figure: figure["client"])

    def close(self) -> List[int]:
        """Stops everything, clusters first; their exit codes."""
        return [process.stop() for process in reversed(self.processes)]


def scheduler_python_or_none() -> Optional[str]:
    """The PyPy environment scripts/test.sh builds, where the scheduler is meant to run, if there is one."""
    pypy = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".venv-pypy")
    python = os.path.join(pypy, "bin", "python")
    return python if os.path.exists(python) else None
