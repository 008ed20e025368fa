"""One small task at a time: the round trip of `client.submit(f, x).result()` on a local cluster.

    .venv/bin/python -m bench.latency.latency                                    # PyPy scheduler, 2 workers
    .venv/bin/python -m bench.latency.latency --scheduler-python .venv/bin/python --count 5000 --repeat 3

Each round trip goes client -> scheduler -> worker agent -> processor and back, with nothing else in flight, so this
measures the latency of every hop (wake-ups, batching delays, per-message work), not throughput. After --warmup round
trips (connection, function shipped, the processor's caches), --count are timed one by one; the table gives the median
and the 90th and 99th percentiles of each run, and their medians over --repeat runs, each on a fresh cluster.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Dict, List

import cloudpickle

from bench.localcluster import PYPY, LocalCluster, interpreter_label, median
from scaler import Client

if __name__ != "__main__":  # imported by another benchmark: workers cannot import this file, so ship it by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def increment(value: int) -> int:
    return value + 1


def round_trips(client: Client, count: int) -> List[float]:
    """Seconds of each of `count` submit(...).result() calls, one at a time; every result is checked."""
    seconds = []
    clock = time.perf_counter
    for i in range(count):
        start = clock()
        value = client.submit(increment, i).result()
        seconds.append(clock() - start)
        if value != i + 1:
            raise AssertionError(f"increment({i}) returned {value!r}")
    return seconds


def percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure(scheduler_python: str, workers: int, count: int, warmup: int) -> Dict[str, float]:
    with LocalCluster(scheduler_python, workers=workers) as cluster:
        with Client(cluster.address) as client:
            round_trips(client, warmup)
            seconds = round_trips(client, count)
    return {
        "median_ms": median(seconds) * 1e3,
        "p90_ms": percentile(seconds, 0.9) * 1e3,
        "p99_ms": percentile(seconds, 0.99) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scheduler-python", action="append", help=f"repeatable (default: {PYPY})")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--count", type=int, default=2000, help="timed round trips per run")
    parser.add_argument("--warmup", type=int, default=200, help="round trips before timing")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    if args.workers < 1 or args.count < 1 or args.warmup < 0 or args.repeat < 1:
        parser.error("--workers, --count and --repeat must be >= 1, --warmup >= 0")
    pythons = args.scheduler_python or [PYPY]
    runs: Dict[str, List[Dict[str, float]]] = {python: [] for python in pythons}
    for attempt in range(args.repeat):  # interleaved, so other load on the machine spreads over every cell alike
        for python in pythons:
            figures = measure(python, args.workers, args.count, args.warmup)
            runs[python].append(figures)
            print(
                f"run {attempt + 1}: {python}: median {figures['median_ms']:.3f} ms, "
                f"p90 {figures['p90_ms']:.3f} ms, p99 {figures['p99_ms']:.3f} ms",
                flush=True,
            )
    print(
        f"\nsubmit(...).result() one at a time, {args.count:,} round trips after {args.warmup} warm-up, "
        f"{args.workers} workers; medians of {args.repeat} run(s)"
    )
    header = f"{'scheduler':<22}{'median ms':>11}{'p90 ms':>9}{'p99 ms':>9}"
    print(header)
    print("-" * len(header))
    for python, figures in runs.items():
        print(
            f"{interpreter_label(python):<22}{median([f['median_ms'] for f in figures]):>11.3f}"
            f"{median([f['p90_ms'] for f in figures]):>9.3f}{median([f['p99_ms'] for f in figures]):>9.3f}"
        )


if __name__ == "__main__":
    main()
