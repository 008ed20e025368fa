"""Two codes' round trips of one small task at a time, in alternating chunks on two clusters started together.

    .venv/bin/python -m bench.latency.latency_ab --base /path/to/base/checkout    # base against this checkout

On a shared machine, the round trip of one task at a time moves with other load by more than the changes measured, and
even more with where the kernel puts the processes of a cluster: on this 2-vCPU VM, a cluster whose chain of processes
it keeps on one CPU answers in about 0.47 ms, one it spreads over both in 0.7 to 0.8 ms, and that holds for the
cluster's life. So each code gets its own cluster and client process (each run from its own checkout: copy this
checkout's bench/ into the base first, if the base's has another layout), both start together (which first alternates by
round), they take turns (--chunks chunks of --count round trips each, alternating, so that both see the same moments),
and all of it is done again on fresh clusters --rounds times, so that placement falls on both alike. Reports per round
the medians of the chunk medians and their ratio, and the median ratio over the rounds; an A/A run (base against the
same code) shows how far the ratio strays by itself.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[2]  # this checkout


def serve(scheduler_python: str, workers: int, warmup: int) -> None:
    """Child: start a cluster and a client, then answer each line "N" on stdin with the median of N round trips."""
    import scaler
    from bench.latency.latency import round_trips
    from bench.localcluster import LocalCluster, median
    from scaler import Client

    with LocalCluster(scheduler_python, workers=workers) as cluster:
        with Client(cluster.address) as client:
            round_trips(client, warmup)
            print(f"ready {scaler.__file__}", flush=True)
            for line in sys.stdin:
                seconds = round_trips(client, int(line))
                print(f"{median(seconds) * 1e6:.1f}", flush=True)


def start(root: Path, python: str, args: argparse.Namespace) -> subprocess.Popen:
    """A child serving `root`'s code (see serve): its own bench and scaler, from its root."""
    if not (root / "bench" / "latency" / "latency_ab.py").exists():  # it runs its own checkout's bench/
        raise SystemExit(f"copy this checkout's bench/ into {root} first")
    command = [sys.executable, "-m", "bench.latency.latency_ab", "--serve", "--base", str(root)]
    command += ["--scheduler-python", python, "--workers", str(args.workers), "--warmup", str(args.warmup)]
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=root)


def one_round(
    roots: Dict[str, Path], python: str, args: argparse.Namespace, base_first: bool
) -> Dict[str, List[float]]:
    """Chunk medians (us) of each code on a fresh pair of clusters, started in the order given."""
    order = ["base", "branch"] if base_first else ["branch", "base"]
    children = {name: start(roots[name], python, args) for name in order}
    medians: Dict[str, List[float]] = {name: [] for name in children}
    try:
        for name, child in children.items():
            line = child.stdout.readline().strip()
            if not line.startswith(f"ready {roots[name]}"):  # started, and runs its own checkout's scaler
                raise RuntimeError(f"{name}: not ready with {roots[name]}'s code ({line!r})")
        for chunk in range(args.chunks):
            for name in ["base", "branch"] if chunk % 2 == 0 else ["branch", "base"]:
                child = children[name]
                child.stdin.write(f"{args.count}\n")
                child.stdin.flush()
                medians[name].append(float(child.stdout.readline()))
    finally:
        for child in children.values():
            child.stdin.close()
        for child in children.values():
            child.wait(60)
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the base checkout's root")
    parser.add_argument("--scheduler-python", default=None, help="default: bench/localcluster.py's PyPy")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--count", type=int, default=500, help="round trips per chunk")
    parser.add_argument("--chunks", type=int, default=4, help="chunks per code and round")
    parser.add_argument("--rounds", type=int, default=10, help="fresh pairs of clusters")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    from bench.localcluster import PYPY, median

    python = args.scheduler_python or PYPY
    if args.serve:
        serve(python, args.workers, args.warmup)
        return
    roots = {"base": Path(args.base).resolve(), "branch": ROOT}
    ratios = []
    for number in range(args.rounds):
        medians = one_round(roots, python, args, base_first=number % 2 == 0)
        base, branch = median(medians["base"]), median(medians["branch"])
        ratios.append(branch / base)
        print(
            f"round {number + 1}: base {base:.1f} us, branch {branch:.1f} us, branch/base {ratios[-1]:.3f}", flush=True
        )
    print(
        f"\n{args.rounds} rounds of {args.chunks} alternating chunks of {args.count} round trips per code: "
        f"median branch/base {median(ratios):.3f}, branch faster in {sum(r < 1 for r in ratios)} of {args.rounds}"
    )


if __name__ == "__main__":
    main()
