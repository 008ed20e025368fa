"""The main job of `bash scripts/demo.sh`: a local Scaler cluster estimates pi from random points, many small tasks.

    .venv/bin/python scripts/demo.py                     # 10,000 tasks of 2,000 points, one worker per core
    .venv/bin/python scripts/demo.py --tasks 100000 --points 200 --workers 8

A SchedulerClusterCombo (a scheduler and workers on this machine, logging warnings only) runs the tasks; the client
maps them with a progress bar, then prints what was done, how fast, and the estimate.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import time

from scaler import Client, SchedulerClusterCombo


def points_in_circle(seed: int, points: int) -> int:
    """How many of `points` random points of the unit square fall inside the quarter circle: real work, on a worker."""
    draw = random.Random(seed).random
    inside = 0
    for _ in range(points):
        x, y = draw(), draw()
        inside += x * x + y * y <= 1.0
    return inside


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks to run")
    parser.add_argument("--points", type=int, default=2_000, help="random points per task")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="worker processes")
    args = parser.parse_args()
    if args.tasks < 1 or args.points < 1 or args.workers < 1:
        parser.error("--tasks, --points and --workers must be at least 1")

    print(f"Starting a local scheduler and {args.workers} workers...", flush=True)
    with SchedulerClusterCombo(n_workers=args.workers) as cluster, Client(cluster.get_address()) as client:
        client.map(points_in_circle, [(seed, 1) for seed in range(args.workers)])  # every worker has the function
        started = time.perf_counter()
        inside = client.map(points_in_circle, [(seed, args.points) for seed in range(args.tasks)], progress="pi")
        seconds = time.perf_counter() - started

    total = args.tasks * args.points
    estimate = 4 * sum(inside) / total
    print(f"{args.tasks:,} tasks in {seconds:.2f} s: {args.tasks / seconds:,.0f} tasks/s on {args.workers} workers")
    print(f"{total:,} random points: pi ~ {estimate:.5f} (off by {abs(estimate - math.pi):.5f})")


if __name__ == "__main__":
    main()
