"""100,000 no-op tasks on a local cluster, through `submit` and through `map`.

    .venv/bin/python -m bench.throughput.noop_100k                                   # scheduler on CPython and on PyPy
    .venv/bin/python -m bench.throughput.noop_100k --scheduler-python .venv-pypy/bin/python --tasks 10000
    .venv/bin/python -m bench.throughput.noop_100k --repeat 5 --json results.json

The scheduler runs in its own process under each chosen interpreter, workers (2 by default) on CPython, the client
here. Every run checks every result. Wall seconds cover submitting and collecting every result; the scheduler's peak
RSS is sampled with psutil during the run. One table at the end: medians over --repeat runs, each on a fresh cluster.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List

import cloudpickle

from bench.localcluster import CPYTHON, PYPY, LocalCluster, interpreter_label, median, timed
from scaler import Client

if __name__ != "__main__":  # imported by another benchmark: workers cannot import this file, so ship noop by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def noop(value: int) -> int:
    return value


def run_submit(client: Client, tasks: int) -> None:
    futures = [client.submit(noop, i) for i in range(tasks)]
    results = [future.result() for future in futures]
    if results != list(range(tasks)):
        raise AssertionError("submit: wrong results")


def run_map(client: Client, tasks: int) -> None:
    results = client.map(noop, [(i,) for i in range(tasks)])
    if results != list(range(tasks)):
        raise AssertionError("map: wrong results")


WORKLOADS = {"submit": run_submit, "map": run_map}


def measure(
    scheduler_python: str, workload: str, tasks: int, workers: int, event_loop: str, scheduler_args: List[str]
) -> Dict[str, float]:
    with LocalCluster(
        scheduler_python, workers=workers, event_loop=event_loop, scheduler_args=scheduler_args
    ) as cluster:
        with Client(cluster.address) as client:
            WORKLOADS[workload](client, 100)  # warm-up: connection, function shipped to workers
            cluster.rss.reset_peak()
            seconds, _ = timed(WORKLOADS[workload], client, tasks)
            peak = max(cluster.rss.peak, cluster.rss.current())
    return {"seconds": seconds, "tasks_per_second": tasks / seconds, "peak_rss_mib": peak / 2**20}


def print_table(rows: List[Dict], tasks: int, workers: int, repeat: int) -> None:
    print(f"\n{tasks:,} no-op tasks, {workers} CPython workers, client on CPython; medians of {repeat} run(s)")
    header = f"{'scheduler':<22}{'event loop':<12}{'API':<8}{'wall s':>9}{'tasks/s':>11}{'peak RSS MiB':>14}"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['scheduler']:<22}{row['event_loop']:<12}{row['workload']:<8}{row['seconds']:>9.2f}"
            f"{row['tasks_per_second']:>11,.0f}{row['peak_rss_mib']:>14.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--scheduler-python",
        action="append",
        help=f"interpreter for the scheduler, repeatable (default: {CPYTHON} and {PYPY})",
    )
    parser.add_argument("--tasks", type=int, default=100_000, help="no-op tasks per run")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), action="append", help="default: submit and map")
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell; the table shows medians")
    parser.add_argument("--event-loop", choices=["builtin", "uvloop"], default="builtin")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    parser.add_argument(
        "--scheduler-arg", action="append", default=[], metavar="ARG",
        help="passed to every scheduler, repeatable: --scheduler-arg=--jit-warmup --scheduler-arg=0",
    )  # fmt: skip
    args = parser.parse_args()
    if args.tasks < 1 or args.repeat < 1 or args.workers < 1:
        parser.error("--tasks, --repeat and --workers must be >= 1")
    pythons = args.scheduler_python or [CPYTHON, PYPY]
    workloads = args.workload or ["submit", "map"]

    runs: Dict[tuple, List[Dict[str, float]]] = {}
    # interleave repeats so that noise from other load on the machine spreads over every cell alike
    for attempt in range(args.repeat):
        for python in pythons:
            for workload in workloads:
                figures = measure(python, workload, args.tasks, args.workers, args.event_loop, args.scheduler_arg)
                runs.setdefault((python, workload), []).append(figures)
                print(
                    f"run {attempt + 1}: {python} {workload}: {figures['seconds']:.2f} s, "
                    f"{figures['tasks_per_second']:,.0f} tasks/s, peak RSS {figures['peak_rss_mib']:.1f} MiB",
                    flush=True,
                )
    labels = {python: interpreter_label(python) for python in pythons}
    rows = []
    for (python, workload), figures in runs.items():
        row = {"scheduler": labels[python], "event_loop": args.event_loop, "workload": workload}
        for key in ("seconds", "tasks_per_second", "peak_rss_mib"):
            row[key] = median([f[key] for f in figures])
        row["runs"] = figures
        rows.append(row)
    print_table(rows, args.tasks, args.workers, args.repeat)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
