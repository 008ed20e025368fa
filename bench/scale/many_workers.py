"""Many real workers: a PyPy scheduler, several `scaler_cluster -n 32` and four client processes at once.

    .venv/bin/python -m bench.scale.many_workers                      # 4 clusters of 32 workers, 4 clients
    .venv/bin/python -m bench.scale.many_workers --clusters 2 --map-tasks 5000

Each client submits a `map` of no-op-sized tasks and a reduction graph (squares summed up a binary tree) at the same
time as the others; every value is checked. Reported: how long the workers took to connect, each client's wall time,
the routed tasks/s over the whole run, and the scheduler's CPU time per task. Real workers are real processes (each a
worker agent and a processor), so on a 2-core machine this measures that the scheduler holds up with all of them
connected and busy, not its peak throughput (bench/scale/scale_sim.py does that, with simulated peers).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psutil

from bench.localcluster import PYPY, interpreter_label
from scaler.testing.many_workers import ManyWorkers

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scheduler-python", default=PYPY)
    parser.add_argument("--clusters", type=int, default=4, help="scaler_cluster processes")
    parser.add_argument("--workers-per-cluster", type=int, default=32)
    parser.add_argument("--clients", type=int, default=4, help="client processes, submitting at once")
    parser.add_argument("--map-tasks", type=int, default=20_000, help="tasks of each client's map")
    parser.add_argument("--graph-leaves", type=int, default=2048, help="each client's graph has 2 x this many tasks")
    args = parser.parse_args()
    if min(args.clusters, args.workers_per_cluster, args.clients, args.map_tasks, args.graph_leaves) < 1:
        parser.error("every count must be >= 1")
    with tempfile.TemporaryDirectory(prefix="scaler-many-") as directory:
        started = time.monotonic()
        cluster = ManyWorkers(Path(directory), args.clusters, args.workers_per_cluster, args.scheduler_python)
        try:
            connected = time.monotonic() - started
            scheduler = psutil.Process(cluster.scheduler.pid)
            cpu_before = sum(scheduler.cpu_times()[:2])
            start = time.monotonic()
            figures = cluster.run_clients(args.clients, args.map_tasks, args.graph_leaves, timeout=1800)
            seconds = time.monotonic() - start
            cpu = sum(scheduler.cpu_times()[:2]) - cpu_before
        finally:
            exit_codes = cluster.close()
    tasks = sum(figure["tasks"] for figure in figures)
    print(
        f"{cluster.workers} workers ({args.clusters} x scaler_cluster -n {args.workers_per_cluster}) connected in "
        f"{connected:.1f} s to a {interpreter_label(args.scheduler_python)} scheduler"
    )
    for figure in figures:
        print(
            f"  client {figure['client']}: {figure['tasks']:,} tasks (map + graph), every result checked, "
            f"{figure['seconds']:.1f} s"
        )
    print(
        f"all {args.clients} clients: {tasks:,} tasks in {seconds:.1f} s, {tasks / seconds:,.0f} tasks/s; "
        f"scheduler CPU {cpu / tasks * 1e6:.1f} µs per task; clusters' exit codes {exit_codes[:-1]}"
    )


if __name__ == "__main__":
    main()
