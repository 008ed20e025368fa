"""What CurveZMQ costs in throughput: the same no-op map on a local cluster with and without it, alternated.

    .venv/bin/python -m bench.throughput.curve_overhead [--tasks 50000] [--rounds 3]

Prints the median wall time of each and their ratio. Both clusters run at once on this machine, so they share its
noise; only the ratio is meant to be compared.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from typing import Dict, List

from scaler import Client, SchedulerClusterCombo
from scaler.io.curve import generate_key_pair


def noop(value: int) -> int:
    return value


def _time_map(client: Client, tasks: int) -> float:
    start = time.perf_counter()
    results = client.map(noop, [(i,) for i in range(tasks)])
    elapsed = time.perf_counter() - start
    assert results == list(range(tasks))
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as keys:
        generate_key_pair(keys, "client")
        os.makedirs(f"{keys}/authorized")
        shutil.copy(f"{keys}/client.key", f"{keys}/authorized/client.key")
        with (
            SchedulerClusterCombo(n_workers=args.workers, logging_level="WARNING") as plain,
            SchedulerClusterCombo(n_workers=args.workers, logging_level="WARNING", curve_keys_dir=keys) as secure,
        ):
            clients = {
                "plain": Client(plain.get_address(), timeout_seconds=30),
                "curve": Client(
                    secure.get_address(),
                    timeout_seconds=30,
                    curve_secret_key_file=f"{keys}/client.key_secret",
                    curve_server_key_file=secure.curve_server_key_file,
                ),
            }
            timings: Dict[str, List[float]] = {name: [] for name in clients}
            for client in clients.values():
                _time_map(client, 1000)  # warm-up: functions shipped, connections up
            for _ in range(args.rounds):
                for name, client in clients.items():
                    timings[name].append(_time_map(client, args.tasks))
            for client in clients.values():
                client.disconnect()
    plain_s, curve_s = (statistics.median(timings[name]) for name in ("plain", "curve"))
    print(f"{args.tasks} no-op tasks via map, {args.workers} workers, median of {args.rounds} alternated rounds")
    print(f"{'transport':<10} {'seconds':>8} {'tasks/s':>9}")
    for name, seconds in (("plain", plain_s), ("curve", curve_s)):
        print(f"{name:<10} {seconds:8.2f} {args.tasks / seconds:9,.0f}")
    print(f"CurveZMQ costs {100 * (curve_s / plain_s - 1):+.0f}% wall time (ratio {curve_s / plain_s:.2f})")


if __name__ == "__main__":
    main()
