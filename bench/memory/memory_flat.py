"""Scheduler RSS after 100,000 and after 1,000,000 no-op tasks whose results were consumed: does memory stay flat?

    .venv/bin/python -m bench.memory.memory_flat                 # scheduler on CPython and on PyPy
    .venv/bin/python -m bench.memory.memory_flat --rounds 3 --tasks-per-round 10000

One cluster per interpreter runs --rounds maps of --tasks-per-round no-op tasks, one after another, each checked. The
scheduler's RSS is read (psutil) once every result of a round is back and its status on the monitor socket shows it
holds no task any more; the table compares the RSS after the first round with the RSS after the last.
"""

from __future__ import annotations

import argparse
from typing import Dict, List

from bench.localcluster import CPYTHON, PYPY, LocalCluster, interpreter_label
from bench.throughput.noop_100k import run_map
from scaler import Client
from scaler.protocol import SchedulerStatus
from scaler.scheduler.state import STATE_NAMES


def _holds_no_task(status: SchedulerStatus) -> bool:
    return all(counter.value == 0 for counter in status.task_states if counter.name in STATE_NAMES)


def measure(scheduler_python: str, rounds: int, tasks_per_round: int, workers: int) -> List[int]:
    """RSS in bytes after each round."""
    after: List[int] = []
    with LocalCluster(scheduler_python, workers=workers) as cluster:
        with Client(cluster.address) as client:
            for number in range(rounds):
                run_map(client, tasks_per_round)
                cluster.wait_for_status(_holds_no_task, timeout=30.0, what="the scheduler to forget every task")
                after.append(cluster.rss.current())
                print(
                    f"{scheduler_python}: {(number + 1) * tasks_per_round:>10,} tasks done, scheduler RSS "
                    f"{after[-1] / 2**20:.1f} MiB",
                    flush=True,
                )
    return after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scheduler-python", action="append", help=f"repeatable (default: {CPYTHON} and {PYPY})")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tasks-per-round", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.rounds < 2 or args.tasks_per_round < 1 or args.workers < 1:
        parser.error("--rounds must be >= 2, --tasks-per-round and --workers >= 1")
    pythons = args.scheduler_python or [CPYTHON, PYPY]
    results: Dict[str, List[int]] = {
        python: measure(python, args.rounds, args.tasks_per_round, args.workers) for python in pythons
    }
    first, last = args.tasks_per_round, args.tasks_per_round * args.rounds
    print(f"\nScheduler RSS once results are consumed, {args.workers} workers, maps of {first:,} tasks")
    header = f"{'scheduler':<22}{f'after {first:,}':>18}{f'after {last:,}':>18}{'growth':>10}"
    print(header)
    print("-" * len(header))
    for python, after in results.items():
        growth = after[-1] / after[0] - 1
        print(
            f"{interpreter_label(python):<22}{after[0] / 2**20:>14.1f} MiB{after[-1] / 2**20:>14.1f} MiB"
            f"{growth:>+10.1%}"
        )


if __name__ == "__main__":
    main()
