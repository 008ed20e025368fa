"""The seed system's README example, as written there, timed: a SchedulerClusterCombo of 10 workers on this machine,
a loop of 100,000 `submit` calls, then every result.

    .venv/bin/python -m bench.throughput.seed_example                 # as the README writes it
    .venv/bin/python -m bench.throughput.seed_example --repeat 3 --warm

The README's program does not wait for its workers: its first tasks queue at the scheduler while the workers start.
So "submit + results" (the headline, from the first submit to the last result) includes whatever part of the
workers' start overlaps the loop, as for a user running it; "whole program" adds the combo's start and shutdown.
`--warm` waits for every worker and runs 100 tasks first, which leaves only the tasks' own cost in the figure.
Every result is checked against its argument, as the README asserts. The combo's scheduler runs on this interpreter.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Dict

import zmq

from bench.localcluster import median
from scaler import Client, SchedulerClusterCombo
from scaler.protocol import SchedulerStatus, decode_frame


def calculate(sec: int) -> int:
    return sec * 1


def _wait_for_workers(monitor_address: str, workers: int, timeout: float = 120.0) -> None:
    """Until the scheduler's status (its monitor socket) shows `workers` workers connected."""
    socket = zmq.Context.instance().socket(zmq.SUB)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.SUBSCRIBE, b"")
    socket.connect(monitor_address)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not socket.poll(1000):
                continue
            for message in decode_frame(socket.recv()):
                if isinstance(message, SchedulerStatus) and len(message.workers) >= workers:
                    return
    finally:
        socket.close()
    raise TimeoutError(f"{workers} workers did not connect within {timeout:.0f}s")


def run(tasks: int, workers: int, warm: bool) -> Dict[str, float]:
    program_start = time.perf_counter()
    cluster = SchedulerClusterCombo(n_workers=workers, event_loop="uvloop")
    client = Client(address=cluster.get_address())
    if warm:
        _wait_for_workers(cluster.get_monitor_address(), workers)
        client.map(calculate, [(i,) for i in range(100)])
    values = [random.randint(0, 100) for _ in range(tasks)]

    start = time.perf_counter()
    futures = [client.submit(calculate, i) for i in values]
    submitted = time.perf_counter()
    results = [future.result() for future in futures]
    done = time.perf_counter()

    assert results == values
    client.disconnect()
    cluster.shutdown()
    return {
        "seconds": done - start,
        "submit_seconds": submitted - start,
        "program_seconds": time.perf_counter() - program_start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--warm", action="store_true", help="start timing once the workers run tasks")
    args = parser.parse_args()
    if args.tasks < 1 or args.workers < 1 or args.repeat < 1:
        parser.error("--tasks, --workers and --repeat must be >= 1")
    runs = []
    for attempt in range(args.repeat):
        figures = run(args.tasks, args.workers, args.warm)
        runs.append(figures)
        print(
            f"run {attempt + 1}: submit + results {figures['seconds']:.2f} s (submit loop "
            f"{figures['submit_seconds']:.2f} s), whole program {figures['program_seconds']:.2f} s",
            flush=True,
        )
    print(
        f"\nseed README example: {args.tasks:,} submits, {args.workers} workers, scheduler on "
        f"{sys.implementation.name} {sys.version.split()[0]}{', warm' if args.warm else ''}; medians of {args.repeat}"
    )
    print(f"submit + results: {median([r['seconds'] for r in runs]):.2f} s")
    print(f"submit loop:      {median([r['submit_seconds'] for r in runs]):.2f} s")
    print(f"whole program:    {median([r['program_seconds'] for r in runs]):.2f} s")


if __name__ == "__main__":
    main()
