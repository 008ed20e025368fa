"""The same no-op workloads on Dask distributed, so every comparison with Dask is measured here, not quoted.

    .venv/bin/python -m bench.peers.dask_noop                        # needs `pip install distributed` (tox -e dask)
    .venv/bin/python -m bench.peers.dask_noop --tasks 10000 --workload map --repeat 3

A dask LocalCluster of 2 worker processes with 1 thread each (as Scaler's 2 workers each run one task at a time), client
in this process. submit: a loop of client.submit then gather; map: client.map then gather; graph: the binary reduction
tree of bench/throughput/graph_tree.py through client.get. Every result is checked; medians over --repeat fresh
clusters.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import dask
import distributed

from bench.localcluster import environment_kept, median
from bench.throughput.graph_tree import reduction_tree
from bench.throughput.noop_100k import noop


def run_submit(client: distributed.Client, tasks: int) -> None:
    futures = [client.submit(noop, i, pure=False) for i in range(tasks)]
    if client.gather(futures) != list(range(tasks)):
        raise AssertionError("submit: wrong results")


def run_map(client: distributed.Client, tasks: int) -> None:
    if client.gather(client.map(noop, range(tasks), pure=False)) != list(range(tasks)):
        raise AssertionError("map: wrong results")


def run_graph(client: distributed.Client, tasks: int) -> None:
    leaves = (tasks + 1) // 2
    graph, root = reduction_tree(leaves)
    if client.get(graph, root) != leaves * (leaves - 1) // 2:
        raise AssertionError("graph: wrong sum")


WORKLOADS: Dict[str, Callable[[Any, int], None]] = {"submit": run_submit, "map": run_map, "graph": run_graph}


@contextlib.contextmanager
def dask_cluster(workers: int) -> Iterator[distributed.Client]:
    """A client of a fresh LocalCluster of `workers` processes x 1 thread, every worker connected."""
    with (
        environment_kept(),
        distributed.LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.CRITICAL,  # teardown races log tracebacks, not failures
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.wait_for_workers(workers)
        yield client


def measure(workload: str, tasks: int, workers: int) -> float:
    with dask_cluster(workers) as client:
        WORKLOADS[workload](client, 100)  # warm-up, as for Scaler
        start = time.perf_counter()
        WORKLOADS[workload](client, tasks)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100_000, help="tasks per run (graph: tree of about this many)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), action="append", help="default: all three")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write every run's seconds here")
    args = parser.parse_args()
    if args.tasks < 2 or args.workers < 1 or args.repeat < 1:
        parser.error("--tasks must be >= 2, --workers and --repeat >= 1")
    workloads = args.workload or ["submit", "map", "graph"]
    runs: Dict[str, List[float]] = {workload: [] for workload in workloads}
    for attempt in range(args.repeat):
        for workload in workloads:
            seconds = measure(workload, args.tasks, args.workers)
            runs[workload].append(seconds)
            print(f"run {attempt + 1}: dask {workload}: {seconds:.2f} s", flush=True)
    print(
        f"\nDask distributed {distributed.__version__} (dask {dask.__version__}), {args.tasks:,} no-op tasks, "
        f"{args.workers} worker processes x 1 thread; medians of {args.repeat}"
    )
    header = f"{'API':<8}{'wall s':>9}{'tasks/s':>11}"
    print(header)
    print("-" * len(header))
    for workload, seconds in runs.items():
        print(f"{workload:<8}{median(seconds):>9.2f}{args.tasks / median(seconds):>11,.0f}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    main()
