"""What scaler.compat.ray costs per task over the native API: the same no-op workload, written for Ray and run
through the layer, and written with Client.submit (and Client.map), on one cluster, interleaved, in the same run.

    .venv/bin/python -m bench.throughput.ray_layer                          # 20,000 tasks, 5 rounds
    .venv/bin/python -m bench.throughput.ray_layer --tasks 10000 --repeat 9 --scheduler-python .venv-pypy/bin/python

The Ray program is `refs = [noop.remote(i) for i in range(N)]; ray.get(refs)`, with `import scaler.compat.ray as ray`;
the native one `futures = [client.submit(noop, i) ...]; [f.result() for f in futures]`, what the layer's calls turn
into; `client.map` is shown beside them as the native API's fastest way. A scheduler and its workers (2 by default)
start once; each round runs every API once, in an order that rotates from round to round, so that a slow stretch of
a loaded machine falls on each in turn. Wall seconds cover submitting and collecting every result; every result is
checked. The table gives each API's median per-task cost over the rounds and the layer's ratio to the submit loop,
median of the per-round ratios (the target: at most 1.20), then the same for the CPU this process (the client, its IO
thread included) spent per task: the layer's own cost, which the wall time of a busy machine can hide.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, Dict, List

import cloudpickle

import scaler.compat.ray as ray
from bench.localcluster import CPYTHON, LocalCluster, interpreter_label, median, timed
from scaler import Client

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import bench/


def noop(value: int) -> int:
    return value


remote_noop = ray.remote(noop)


def run_ray(tasks: int) -> None:
    refs = [remote_noop.remote(i) for i in range(tasks)]
    if ray.get(refs) != list(range(tasks)):
        raise AssertionError("ray layer: wrong results")


def run_submit(client: Client, tasks: int) -> None:
    futures = [client.submit(noop, i) for i in range(tasks)]
    if [future.result() for future in futures] != list(range(tasks)):
        raise AssertionError("submit: wrong results")


def run_map(client: Client, tasks: int) -> None:
    if client.map(noop, [(i,) for i in range(tasks)]) != list(range(tasks)):
        raise AssertionError("map: wrong results")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=20_000, help="no-op tasks per API per round")
    parser.add_argument("--repeat", type=int, default=5, help="rounds")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scheduler-python", default=CPYTHON, help="the scheduler's interpreter (default: this one)")
    args = parser.parse_args()
    if args.tasks < 1 or args.repeat < 1 or args.workers < 1:
        parser.error("--tasks, --repeat and --workers must be >= 1")

    with LocalCluster(args.scheduler_python, workers=args.workers) as cluster:
        ray.init(address=cluster.address)
        try:
            with Client(cluster.address) as client:
                apis: Dict[str, Callable[[int], None]] = {
                    "ray layer": run_ray,
                    "submit": lambda tasks: run_submit(client, tasks),
                    "map": lambda tasks: run_map(client, tasks),
                }
                for run in apis.values():
                    run(200)  # warm-up: connections, the function shipped to every worker
                seconds: Dict[str, List[float]] = {name: [] for name in apis}
                cpu: Dict[str, List[float]] = {name: [] for name in apis}
                names = list(apis)
                for round_number in range(args.repeat):
                    order = names[round_number % len(names) :] + names[: round_number % len(names)]
                    for name in order:
                        cpu_before = time.process_time()
                        elapsed, _ = timed(apis[name], args.tasks)
                        cpu[name].append(time.process_time() - cpu_before)
                        seconds[name].append(elapsed)
                    line = ", ".join(f"{name} {seconds[name][-1] / args.tasks * 1e6:.1f} us" for name in names)
                    print(f"round {round_number + 1}: {line}", flush=True)
        finally:
            ray.shutdown()

    ratios = [layer / native for layer, native in zip(seconds["ray layer"], seconds["submit"])]
    cpu_ratios = [layer / native for layer, native in zip(cpu["ray layer"], cpu["submit"])]
    print(
        f"\n{args.tasks:,} no-op tasks per API per round, {args.workers} workers, scheduler on "
        f"{interpreter_label(args.scheduler_python)}; medians of {args.repeat} rounds"
    )
    header = f"{'API':<11}{'us/task':>9}{'tasks/s':>10}{'client CPU us/task':>20}"
    print(header)
    print("-" * len(header))
    for name in names:
        per_task = median(seconds[name]) / args.tasks
        print(f"{name:<11}{per_task * 1e6:>9.1f}{1 / per_task:>10,.0f}{median(cpu[name]) / args.tasks * 1e6:>20.1f}")
    ratio = median(ratios)
    verdict = "within" if ratio <= 1.20 else "over"
    print(f"\nray layer / submit per task: {ratio:.3f} (median of the rounds' ratios; {verdict} the 1.20 target)")
    print(f"ray layer / submit, client CPU per task: {median(cpu_ratios):.3f}")


if __name__ == "__main__":
    main()
