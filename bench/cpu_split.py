"""Where the CPU goes: CPU seconds per process role while a local cluster runs no-op tasks (or a graph).

    .venv/bin/python bench/cpu_split.py --scheduler-python .venv-pypy/bin/python --tasks 100000 --workload map

On a machine shared with other work, wall time is noisy but each process's own CPU time is not: this tells which
process bounds the throughput. Roles: the client (this process, both threads), the scheduler, and per worker its agent
(talks to the scheduler), its fork server and its processor (runs the tasks), told apart by depth in the cluster's
process tree. To see inside a CPython process, run it under `py-spy record --subprocesses -f raw`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil  # noqa: E402
from graph_tree import run_tree  # noqa: E402
from localcluster import PYPY, LocalCluster, interpreter_label  # noqa: E402
from noop_100k import WORKLOADS as NOOP_WORKLOADS  # noqa: E402

from scaler import Client  # noqa: E402

# graph: the binary reduction tree of bench/graph_tree.py with about --tasks nodes
WORKLOADS = {**NOOP_WORKLOADS, "graph": lambda client, tasks: run_tree(client, max(2, (tasks + 1) // 2))}
_ROLE_BY_DEPTH = {0: "cluster launcher", 1: "worker agents", 2: "processor fork servers", 3: "processors"}


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def _roles(cluster: LocalCluster) -> Dict[str, List[psutil.Process]]:
    roles: Dict[str, List[psutil.Process]] = {
        "client": [psutil.Process()],
        "scheduler": [psutil.Process(cluster.scheduler_pid)],
    }
    pending = [(psutil.Process(cluster.cluster_pid), 0)]
    while pending:
        process, depth = pending.pop()
        roles.setdefault(_ROLE_BY_DEPTH.get(depth, "other"), []).append(process)
        pending.extend((child, depth + 1) for child in process.children())
    return roles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scheduler-python", default=PYPY)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="map")
    args = parser.parse_args()
    if args.tasks < 1 or args.workers < 1:
        parser.error("--tasks and --workers must be >= 1")
    with LocalCluster(args.scheduler_python, workers=args.workers) as cluster:
        with Client(cluster.address) as client:
            WORKLOADS[args.workload](client, 100)  # warm-up; every processor exists from here on
            roles = _roles(cluster)
            before = {role: [_cpu_seconds(p) for p in processes] for role, processes in roles.items()}
            start = time.perf_counter()
            WORKLOADS[args.workload](client, args.tasks)
            wall = time.perf_counter() - start
            spent = {
                role: sum(_cpu_seconds(p) - b for p, b in zip(processes, before[role]))
                for role, processes in roles.items()
            }
    total = sum(spent.values())
    print(
        f"\n{args.tasks:,} tasks via {args.workload}, scheduler on {interpreter_label(args.scheduler_python)}, "
        f"{args.workers} workers: wall {wall:.2f} s, CPU {total:.2f} s ({total / wall:.2f} cores busy)"
    )
    header = f"{'role':<26}{'CPU s':>8}{'us/task':>9}{'share':>8}"
    print(header)
    print("-" * len(header))
    for role, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"{role:<26}{seconds:>8.2f}{seconds / args.tasks * 1e6:>9.1f}{seconds / total:>8.0%}")


if __name__ == "__main__":
    main()
