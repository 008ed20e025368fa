"""Two codes' round trips of one small task at a time, in alternating chunks on two idle clusters started together.

    .venv/bin/python bench/latency_ab.py --base /path/to/base/checkout    # base against this checkout

On a shared machine, the round trip of one task at a time moves with other load by more than the changes measured
(0.47 ms quiet, 0.7 to 0.9 ms with another test suite running), and a cluster's start takes seconds: runs of
bench/latency.py minutes apart compare moments more than code. Here each code gets its own cluster and client process
(each run from its own checkout: copy this file into the base's bench/ first), both start before anything is timed,
and they take turns: --chunks chunks of --count round trips each, alternating, so that both see the same moments.
Reports each chunk's median and, per code, the median of the chunk medians, and how often the branch's chunk beat
the base chunk next to it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def serve(scheduler_python: str, workers: int, warmup: int) -> None:
    """Child: start a cluster and a client, then answer each line "N" on stdin with the median of N round trips."""
    sys.path.insert(0, str(BENCH))
    from latency import round_trips
    from localcluster import LocalCluster, median

    import scaler
    from scaler import Client

    with LocalCluster(scheduler_python, workers=workers) as cluster:
        with Client(cluster.address) as client:
            round_trips(client, warmup)
            print(f"ready {scaler.__file__}", flush=True)
            for line in sys.stdin:
                seconds = round_trips(client, int(line))
                print(f"{median(seconds) * 1e6:.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the base checkout's root")
    parser.add_argument("--scheduler-python", default=None, help="default: bench/localcluster.py's PyPy")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--count", type=int, default=500, help="round trips per chunk")
    parser.add_argument("--chunks", type=int, default=20, help="chunks per code")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(BENCH))
    from localcluster import PYPY, median

    python = args.scheduler_python or PYPY
    if args.serve:
        serve(python, args.workers, args.warmup)
        return
    children = {}
    for name, root in (("base", Path(args.base).resolve()), ("branch", BENCH.parent)):
        env = dict(os.environ, PYTHONPATH=str(root))
        command = [sys.executable, str(root / "bench" / "latency_ab.py"), "--serve", "--base", str(root)]
        command += ["--scheduler-python", python, "--workers", str(args.workers), "--warmup", str(args.warmup)]
        if not (root / "bench" / "latency_ab.py").exists():  # its bench/ must be its own: it imports from there
            raise SystemExit(f"copy bench/latency_ab.py into {root / 'bench'} first")
        children[name] = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    medians: dict = {name: [] for name in children}
    try:
        for name, child in children.items():
            print(f"{name}: {child.stdout.readline().strip()}", flush=True)
        for chunk in range(args.chunks):
            order = ["base", "branch"] if chunk % 2 == 0 else ["branch", "base"]
            for name in order:
                child = children[name]
                child.stdin.write(f"{args.count}\n")
                child.stdin.flush()
                medians[name].append(float(child.stdout.readline()))
            print(
                f"chunk {chunk + 1}: base {medians['base'][-1]:.1f} us, branch {medians['branch'][-1]:.1f} us",
                flush=True,
            )
    finally:
        for child in children.values():
            child.stdin.close()
            child.wait(60)
    wins = sum(1 for base, branch in zip(medians["base"], medians["branch"]) if branch < base)
    print(
        f"\n{args.chunks} chunks of {args.count} round trips each, alternating; median of the chunk medians: "
        f"base {median(medians['base']):.1f} us, branch {median(medians['branch']):.1f} us "
        f"(branch/base {median(medians['branch']) / median(medians['base']):.3f}); the branch's chunk was faster "
        f"in {wins} of {args.chunks}"
    )


if __name__ == "__main__":
    main()
