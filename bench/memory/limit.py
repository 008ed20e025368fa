"""A worker's memory limit: how far past it a fast allocator gets, how soon its client hears, and what spilling costs.

    .venv/bin/python -m bench.memory.limit
    .venv/bin/python -m bench.memory.limit --rate 1e9 --limit 400MB --runs 5 --spill-bytes 2e9

Enforcement: for each path (a memory cgroup per task process, where this host lets us make one; the watchdog alone),
a one-worker cluster with `--memory-limit LIMIT` runs a task that allocates (and touches) RATE bytes a second until it
is stopped. The task writes the monotonic time it started (the clock is the host's, the same in every process); the
error's `peak_bytes` says how far it got, and the client's clock when MemoryLimitError reached it, how long after the
moment the allocation crossed the limit (start + LIMIT / RATE). For the cgroup path the watchdog's threshold is set to
the limit itself (`--memory-stop-fraction 1`), so that the kernel is what stops the task. After each run, a task runs
on the same worker: the worker went on.

Spilling: SPILL_BYTES of held results in shared memory (100 MB each, as a worker holds them) are moved to a worker
temporary directory and read back with the functions the worker uses (scaler/worker/memory.py), each checked byte for
byte; the rate of each way. The spilled files sit in the page cache until the kernel writes them out: with --cold
(root) the cache is dropped between the two ways, so reading back reads the disk.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Dict, List

from bench.localcluster import CPYTHON, LocalCluster
from scaler import Client, config
from scaler.errors import MemoryLimitError
from scaler.io.shared_bytes import SharedBytes
from scaler.worker.memory import CgroupMaker, read_back, spill

_CHUNK = 10 * 1000 * 1000  # the task allocates in steps of this many bytes


def allocate(rate: float, started_path: str) -> int:
    """Allocates (and touches) `rate` bytes a second until stopped; writes its start time first."""
    held = []
    with open(started_path, "w") as started:
        started.write(repr(time.monotonic()))
    start = time.perf_counter()
    while True:
        held.append(b"\x01" * _CHUNK)
        pause = start + len(held) * _CHUNK / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)


def square(value: int) -> int:
    return value * value


def enforcement_runs(path: str, limit_text: str, rate: float, runs: int) -> Dict[str, List[float]]:
    limit = config.parse_size(limit_text)
    options = ["-n", "1", "--memory-limit", limit_text, "--memory-enforcement", path]
    if path == "cgroup":
        options += ["--memory-stop-fraction", "1"]
    figures: Dict[str, List[float]] = {"past the limit (MB)": [], "error after crossing (ms)": []}
    with LocalCluster(CPYTHON, workers=0) as cluster, tempfile.TemporaryDirectory(prefix="scaler-bench-") as scratch:
        cluster.start_process("scaler.cluster", [*options, cluster.address], "cluster")
        cluster.wait_for_workers(1)
        with Client(address=cluster.address) as client:
            client.submit(square, 1).result()  # the function path is warm before measuring
            for run in range(runs):
                started_path = os.path.join(scratch, f"started{run}")
                future = client.submit(allocate, rate, started_path)
                try:
                    future.result(timeout=60 + limit / rate * 10)
                    raise SystemExit(f"{path}: the task was never stopped")
                except MemoryLimitError as error:
                    arrived = time.monotonic()
                    peak = error.peak_bytes
                with open(started_path) as started:
                    crossed = float(started.read()) + limit / rate
                figures["past the limit (MB)"].append((peak - limit) / 1e6)
                figures["error after crossing (ms)"].append((arrived - crossed) * 1000)
                assert client.submit(square, 7).result(timeout=60) == 49, "the worker goes on"
    return figures


def spill_runs(total: int, cold: bool) -> Dict[str, float]:
    count = max(1, round(total / 100e6))
    payloads = [SharedBytes.create(bytes([index % 256]) * int(total / count)) for index in range(count)]
    size = sum(len(payload) for payload in payloads)
    with tempfile.TemporaryDirectory(prefix="scaler-worker-bench-") as directory:
        started = time.perf_counter()
        for payload in payloads:
            spill(payload, directory)
        spilled = time.perf_counter() - started
        if cold:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as drop:
                drop.write("1")
        started = time.perf_counter()
        for payload in payloads:
            read_back(payload)
        read = time.perf_counter() - started
    for index, payload in enumerate(payloads):
        view = payload.view()
        assert view[0] == view[len(view) - 1] == index % 256, "read back as written"
    return {"bytes": size, "spill (MB/s)": size / 1e6 / spilled, "read back (MB/s)": size / 1e6 / read}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=1e9, help="bytes a second the task allocates (default 1e9)")
    parser.add_argument("--limit", default="400MB", help="the worker's --memory-limit (default 400MB)")
    parser.add_argument("--runs", type=int, default=5, help="allocating tasks per path (default 5)")
    parser.add_argument("--spill-bytes", type=float, default=2e9, help="held bytes to spill and read back (2e9)")
    parser.add_argument("--cold", action="store_true", help="drop the page cache before reading back (root)")
    args = parser.parse_args()
    maker, why = CgroupMaker.probe(f"scaler-bench-{os.getpid()}", config.parse_size(args.limit))
    paths = ["cgroup", "watchdog"] if maker is not None else ["watchdog"]
    if maker is None:
        print(f"no memory cgroup on this host ({why}): the watchdog path only")
    print(f"a task allocating {args.rate / 1e9:g} GB/s against --memory-limit {args.limit}, {args.runs} runs each")
    for path in paths:
        for name, values in enforcement_runs(path, args.limit, args.rate, args.runs).items():
            print(f"  {path:8} {name:26} median {statistics.median(values):7.1f}  max {max(values):7.1f}")
    figures = spill_runs(int(args.spill_bytes), args.cold)
    print(
        f"spilling {figures['bytes'] / 1e9:.1f} GB of held results in 100 MB pieces: "
        f"{figures['spill (MB/s)']:,.0f} MB/s to disk, {figures['read back (MB/s)']:,.0f} MB/s back"
        + (" (page cache dropped first)" if args.cold else " (from the page cache)")
    )


if __name__ == "__main__":
    main()
