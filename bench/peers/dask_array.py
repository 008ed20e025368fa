"""A 10,000-chunk dask.array reduction on Scaler and on Dask distributed, in one run, interleaved.

    .venv/bin/python -m bench.peers.dask_array                     # needs dask[array] and distributed ("scaler[bench]")
    .venv/bin/python -m bench.peers.dask_array --chunks 2500 --repeat 5 --json dask_array.json
    .venv/bin/python -m bench.peers.dask_array --scheduler-python .venv-pypy/bin/python

The workload is `da.ones((100 * rows, 1000), chunks=(100, 100)).sum()` with `rows` chosen for --chunks chunks
(10,000 by default: about 13,600 graph nodes once dask has fused and reduced it), computed with
`x.compute(scheduler=client.get)` on a Scaler cluster and with `x.compute()` under a `distributed.Client`. Both
clusters have 2 worker processes that run one task at a time (Dask: 2 processes x 1 thread) and are started before
timing, each round on fresh ones, alternating Scaler and Dask; the client runs here. Every result is checked.
Wall seconds cover everything from compute() to the result: dask's own graph building and optimization (done in
this process for Scaler, partly on its scheduler for Dask), submission and execution. For Scaler the time until the
graph is sent is shown too. Medians over --repeat rounds; the ratio is Dask's median over Scaler's.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Dict, List

import dask
import dask.array as da
import distributed

from bench.localcluster import CPYTHON, LocalCluster, interpreter_label, median
from bench.peers.dask_noop import dask_cluster
from scaler import Client
from scaler.client import client as client_module

CHUNK = 100
COLUMNS_OF_CHUNKS = 10  # 1000 columns


def reduction(chunks: int) -> Any:
    rows = max(1, chunks // COLUMNS_OF_CHUNKS)
    return da.ones((CHUNK * rows, CHUNK * COLUMNS_OF_CHUNKS), chunks=(CHUNK, CHUNK)).sum()


def expected(chunks: int) -> float:
    return float(max(1, chunks // COLUMNS_OF_CHUNKS) * COLUMNS_OF_CHUNKS * CHUNK * CHUNK)


class SubmitClock:
    """Records when Client.get has handed the whole graph to the connection (seconds since start())."""

    def __init__(self) -> None:
        self._original = client_module.submit_plan
        self.started = 0.0
        self.sent_after = 0.0

    def start(self) -> None:
        self.started = time.perf_counter()

    def __enter__(self) -> SubmitClock:
        def timed_submit_plan(*args: Any, **kwargs: Any) -> Any:
            futures = self._original(*args, **kwargs)
            self.sent_after = time.perf_counter() - self.started
            return futures

        client_module.submit_plan = timed_submit_plan
        return self

    def __exit__(self, *exc_info: Any) -> None:
        client_module.submit_plan = self._original


def run_scaler(scheduler_python: str, chunks: int, workers: int) -> Dict[str, float]:
    with LocalCluster(scheduler_python, workers=workers) as cluster, Client(cluster.address) as client:
        reduction(100).compute(scheduler=client.get)  # warm-up: dask imported and functions shipped to workers
        with SubmitClock() as clock:
            array = reduction(chunks)
            clock.start()
            value = array.compute(scheduler=client.get)
            seconds = time.perf_counter() - clock.started
    if value != expected(chunks):
        raise AssertionError(f"Scaler: sum is {value}, expected {expected(chunks)}")
    return {"seconds": seconds, "submitted_after": clock.sent_after}


def run_dask(chunks: int, workers: int) -> Dict[str, float]:
    with dask_cluster(workers):
        reduction(100).compute()  # warm-up, as for Scaler
        array = reduction(chunks)
        start = time.perf_counter()
        value = array.compute()
        seconds = time.perf_counter() - start
    if value != expected(chunks):
        raise AssertionError(f"Dask: sum is {value}, expected {expected(chunks)}")
    return {"seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=10_000, help="chunks of the array (a multiple of 10)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of each cluster")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the table shows medians")
    parser.add_argument("--scheduler-python", default=CPYTHON, help="interpreter of Scaler's scheduler")
    parser.add_argument("--json", type=Path, help="also write every round's figures here")
    args = parser.parse_args()
    if args.chunks < COLUMNS_OF_CHUNKS or args.workers < 1 or args.repeat < 1:
        parser.error(f"--chunks must be >= {COLUMNS_OF_CHUNKS}, --workers and --repeat >= 1")
    nodes = len(dict(reduction(args.chunks).__dask_graph__()))
    runs: Dict[str, List[Dict[str, float]]] = {"scaler": [], "dask": []}
    for round_number in range(1, args.repeat + 1):
        scaler = run_scaler(args.scheduler_python, args.chunks, args.workers)
        runs["scaler"].append(scaler)
        print(
            f"round {round_number}: Scaler {scaler['seconds']:.2f} s (graph sent after "
            f"{scaler['submitted_after']:.2f} s)",
            flush=True,
        )
        dask_run = run_dask(args.chunks, args.workers)
        runs["dask"].append(dask_run)
        print(f"round {round_number}: Dask distributed {dask_run['seconds']:.2f} s", flush=True)
    scaler_seconds = median([run["seconds"] for run in runs["scaler"]])
    dask_seconds = median([run["seconds"] for run in runs["dask"]])
    submitted = median([run["submitted_after"] for run in runs["scaler"]])
    print(
        f"\n{args.chunks:,}-chunk dask.array sum ({nodes:,} graph nodes before dask's optimization), "
        f"{args.workers} worker processes each; medians of {args.repeat} rounds, interleaved"
    )
    print(f"dask {dask.__version__}, distributed {distributed.__version__}; Scaler's scheduler on "
          f"{interpreter_label(args.scheduler_python)}")  # fmt: skip
    header = f"{'engine':<20}{'wall s':>9}{'chunks/s':>11}"
    print(header)
    print("-" * len(header))
    scaler_row = f"{'Scaler':<20}{scaler_seconds:>9.2f}{args.chunks / scaler_seconds:>11,.0f}"
    print(f"{scaler_row}   graph sent after {submitted:.2f} s")
    print(f"{'Dask distributed':<20}{dask_seconds:>9.2f}{args.chunks / dask_seconds:>11,.0f}")
    print(f"Dask distributed / Scaler: {dask_seconds / scaler_seconds:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    main()
