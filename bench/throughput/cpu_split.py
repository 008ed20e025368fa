"""Where the CPU goes: CPU seconds per process role while a local cluster runs no-op tasks (or a graph).

    .venv/bin/python -m bench.throughput.cpu_split --scheduler-python .venv-pypy/bin/python --workload map

On a machine shared with other work, wall time is noisy but each process's own CPU time is not: this tells which
process bounds the throughput. Roles: the client (this process, both threads), the scheduler, and per worker its agent
(talks to the scheduler), its fork server and its processor (runs the tasks), told apart by depth in the cluster's
process tree. `--profile DIR` also samples one worker agent and one processor with py-spy during the measured run
(`pip install py-spy`) and writes, per process, a raw profile (collapsed stacks) and a summary of the functions
that take most of its samples ("self" and "total", as `py-spy top` shows them).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import psutil

from bench.localcluster import PYPY, LocalCluster, cpu_seconds, interpreter_label
from bench.throughput.graph_tree import run_tree
from bench.throughput.noop_100k import WORKLOADS as NOOP_WORKLOADS
from scaler import Client

# graph: the binary reduction tree of bench/throughput/graph_tree.py with about --tasks nodes
WORKLOADS = {**NOOP_WORKLOADS, "graph": lambda client, tasks: run_tree(client, max(2, (tasks + 1) // 2))}


def _start_profilers(roles: Dict[str, List[psutil.Process]], directory: Path) -> List[Tuple[str, subprocess.Popen]]:
    """py-spy on the first worker agent and the first processor (non-blocking: the target is never paused)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    directory.mkdir(parents=True, exist_ok=True)
    started = []
    for role in ("worker agents", "processors"):
        if not roles.get(role):
            continue
        name = role.split()[-1].rstrip("s")
        output = directory / f"{name}.txt"
        command = [py_spy, "record", "--nonblocking", "-r", "200", "-f", "raw", "-o", str(output)]
        command += ["--pid", str(roles[role][0].pid)]
        started.append((str(output), subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
    time.sleep(1.0)  # py-spy attaches within a few hundred ms; samples before the run starts are idle anyway
    return started


def _stop_profilers(started: List[Tuple[str, subprocess.Popen]]) -> None:
    for output, process in started:
        process.send_signal(2)  # SIGINT: py-spy writes its output and exits
        process.wait(timeout=30)
        _summarize(Path(output))


def _summarize(raw: Path, top: int = 25) -> None:
    """Functions by share of non-idle samples: self (on top of the stack) and total (anywhere on it)."""
    if not raw.exists():
        print(f"no profile written to {raw}")
        return
    own: collections.Counter = collections.Counter()
    anywhere: collections.Counter = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        frames = [frame for frame in stack.split(";") if frame and not frame.startswith("process ")]
        if not frames or any(idle in frames[-1] for idle in ("poll (", "select (", "wait (")):
            continue  # waiting for work, not spending CPU
        count = int(count_text)
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            anywhere[frame] += count
    lines = [f"{raw.stem}: {samples} busy samples", f"{'self':>6}{'total':>7}  function"]
    for frame, count in own.most_common(top):
        lines.append(f"{count / samples:>6.1%}{anywhere[frame] / samples:>7.1%}  {frame}")
    summary = "\n".join(lines)
    raw.with_suffix(".summary.txt").write_text(summary + "\n")
    print("\n" + summary)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scheduler-python", default=PYPY)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="map")
    parser.add_argument("--profile", metavar="DIR", type=Path, help="py-spy one agent and one processor into DIR")
    parser.add_argument(
        "--scheduler-arg", action="append", default=[], metavar="ARG",
        help="passed to every scheduler, repeatable: --scheduler-arg=--jit-warmup --scheduler-arg=0",
    )  # fmt: skip
    args = parser.parse_args()
    if args.tasks < 1 or args.workers < 1:
        parser.error("--tasks and --workers must be >= 1")
    with LocalCluster(args.scheduler_python, workers=args.workers, scheduler_args=args.scheduler_arg) as cluster:
        with Client(cluster.address) as client:
            WORKLOADS[args.workload](client, 100)  # warm-up; every processor exists from here on
            roles = cluster.roles()
            profilers: Optional[List[Tuple[str, subprocess.Popen]]] = None
            if args.profile:
                profilers = _start_profilers(roles, args.profile)
            before = {role: [cpu_seconds(p) for p in processes] for role, processes in roles.items()}
            start = time.perf_counter()
            WORKLOADS[args.workload](client, args.tasks)
            wall = time.perf_counter() - start
            spent = {
                role: sum(cpu_seconds(p) - b for p, b in zip(processes, before[role]))
                for role, processes in roles.items()
            }
            if profilers is not None:
                _stop_profilers(profilers)
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
