"""What PyPy's JIT compiles in the scheduler, and when: during the scheduler's warm-up, or during a user's first graphs.

    .venv/bin/python -m bench.jit.jit_phases                     # a 64-leaf tree, then 4 trees of 9,999 tasks
    .venv/bin/python -m bench.jit.jit_phases --pypylog DIR       # also where PyPy threw compiled loops away

A cluster as bench/throughput/graph_tree.py starts it (PyPy scheduler, 2 workers), with bench/jit/jit_site on the
scheduler's PYTHONPATH: a compile hook that writes each loop, entry bridge and bridge with its time. The client stamps
the same clock (time.monotonic) when the cluster is up and around each tree, so each compiled piece falls in a phase:
"start" (the scheduler's start, its JIT warm-up, the workers connecting), the client connecting and its 64-leaf tree,
each tree. Loops and entry bridges compiled after the warm-up are listed by the code they start in: a hot path the
warm-up did not compile, or compiled and lost. Runs from this checkout: the scheduler imports the Scaler of the
repository the script is in. A SIGTERM stops it as an exception would, the cluster and the temporary files with it.

`--pypylog DIR` also runs the scheduler under PYPYLOG (the optimized loops and the invalidations) and places each
`jit-invalidate-quasi-immutable` (PyPy discarding the loops built on a guess that no longer holds: a module global
rebound, an attribute's type changed) in its phase, matching the log's TSC stamps to the hook's times of the same loop
numbers. PYPY_GC_NURSERY is set for the scheduler (to its CLI's default) so that it does not start itself again, which
would truncate the log.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from bench.localcluster import PYPY, LocalCluster
from bench.throughput.graph_tree import run_tree
from scaler import Client, config

SITE = Path(__file__).resolve().parent / "jit_site"
START = "start"  # the first phase: the scheduler's start, its JIT warm-up and the workers connecting
# what PYPYLOG writes: the optimized loops ("# Loop N (...)", stamped) and the invalidations; not the backend dumps,
# which make the log ten times larger
PYPYLOG_SECTIONS = "jit-log-opt,jit-invalidate-quasi-immutable"
Mark = Tuple[float, str]
Compiled = Tuple[float, str, str, str]  # when, kind (loop, entry bridge, bridge, abort ...), loop number, where
Invalidation = Tuple[float, str, int]  # when, the quasi-immutable field, how many loops it threw away


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scheduler-python", default=PYPY)
    parser.add_argument("--leaves", type=int, default=5000, help="leaves of each measured tree (2 * leaves - 1 tasks)")
    parser.add_argument("--trees", type=int, default=4)
    parser.add_argument("--pypylog", metavar="DIR", help="also write DIR/pypylog (PYPYLOG) and read invalidations")
    parser.add_argument("--json", metavar="PATH", help="also write the phases, what they compiled and invalidated")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("jit_phases: stopped by SIGTERM"))  # cleans up on the way out
    with tempfile.TemporaryDirectory(prefix="scaler-jit-phases-") as directory:
        events = os.path.join(directory, "events")
        os.environ["SCALER_JIT_EVENTS"] = events
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")]))
        os.environ.setdefault("PYPY_GC_NURSERY", config.DEFAULT_PYPY_GC_NURSERY)
        log = None
        if args.pypylog:
            os.makedirs(args.pypylog, exist_ok=True)
            log = os.path.join(args.pypylog, "pypylog")
            os.environ["PYPYLOG"] = f"{PYPYLOG_SECTIONS}:{log}"
        marks = run(args.scheduler_python, args.leaves, args.trees)
        os.environ.pop("PYPYLOG", None)
        compiled = read_events(glob.glob(events + ".*"))
    if not compiled:
        sys.exit("no compile events: is the scheduler's interpreter PyPy?")
    invalidations = read_invalidations(log, compiled) if log else None
    report(compiled, marks, invalidations)
    if log and invalidations is None:
        sys.exit("jit_phases: the PYPYLOG names too few of the hook's loops to place its invalidations in time")
    if args.json:
        figures = {
            "phases": phase_names(marks),
            "compiled": [[phase_of(when, marks), kind, where] for when, kind, _, where in compiled],
            "invalidations": [[phase_of(when, marks), what, loops] for when, what, loops in invalidations or []],
        }
        with open(args.json, "w") as out:
            json.dump(figures, out)


def run(scheduler_python: str, leaves: int, trees: int) -> List[Mark]:
    marks: List[Mark] = []
    with LocalCluster(scheduler_python, workers=2) as cluster:
        marks.append((time.monotonic(), "client, 64 leaves"))
        with Client(cluster.address) as client:
            run_tree(client, 64)
            for number in range(1, trees + 1):
                start = time.monotonic()
                marks.append((start, f"tree {number}"))
                tasks = run_tree(client, leaves)
                end = time.monotonic()
                marks.append((end, f"after tree {number}"))
                print(f"tree {number}: {tasks:,} tasks, {tasks / (end - start):,.0f} tasks/s", flush=True)
    return marks  # the scheduler has stopped: its log is complete


def read_events(paths: List[str]) -> List[Compiled]:
    compiled: List[Compiled] = []
    for path in paths:
        with open(path) as lines:
            for line in lines:
                when, kind, loop, where = line.rstrip("\n").split("\t", 3)
                compiled.append((float(when), kind, loop, where))
    return sorted(compiled)


def phase_names(marks: List[Mark]) -> List[str]:
    return [START] + [name for _, name in marks]


def phase_of(when: float, marks: List[Mark]) -> str:
    phase = START
    for mark, name in marks:
        if when >= mark:
            phase = name
    return phase


def read_invalidations(log: str, compiled: List[Compiled]) -> Optional[List[Invalidation]]:
    """(monotonic time, quasi-immutable field, loops thrown away) of each invalidation in the PYPYLOG, its TSC mapped
    to time by the loops both saw; None if fewer than two loops are in both."""
    tsc_of_loop: Dict[str, int] = {}
    found: List[Tuple[int, str, int]] = []
    tsc, invalidating = 0, False
    with open(log, errors="replace") as lines:
        for line in lines:
            stamp = re.match(r"^\[([0-9a-f]+)\] (\{?)([a-z-]+)", line)
            if stamp:  # sections nest (a backend dump inside an invalidation): the invalidation's own stamp counts
                if stamp.group(3) == "jit-invalidate-quasi-immutable":
                    invalidating = stamp.group(2) == "{"
                    tsc = int(stamp.group(1), 16)
                elif not invalidating:
                    tsc = int(stamp.group(1), 16)
                continue
            loop = re.match(r"^# Loop (\d+) \(", line)
            if loop and loop.group(1) != "0":
                tsc_of_loop.setdefault(loop.group(1), tsc)
            elif invalidating and line.startswith("fieldname"):
                # two forms: "fieldname FieldDescr(GcStruct OWNER { ... }, 'FIELD') invalidated N" and
                # "fieldname <FieldP OWNER.FIELD 24> invalidated N"; N: the loops thrown away
                count = re.search(r"invalidated (\d+)\s*$", line)
                owner = re.findall(r"(pypy\.[\w.]+)", line)
                field = re.search(r"'(\w+)'\)", line)
                what = (owner[0] if owner else line.strip()[:80]) + (f".{field.group(1)}" if field else "")
                found.append((tsc, what, int(count.group(1)) if count else -1))
    times = {loop: when for when, kind, loop, _ in compiled if kind != "bridge"}
    pairs = sorted((tsc_of_loop[loop], times[loop]) for loop in times if loop in tsc_of_loop)
    if len(pairs) < 2 or pairs[0][0] == pairs[-1][0]:
        return None
    (tsc0, time0), (tsc1, time1) = pairs[0], pairs[-1]
    rate = (time1 - time0) / (tsc1 - tsc0)
    return [(time0 + (stamp - tsc0) * rate, what, loops) for stamp, what, loops in found]


def report(compiled: List[Compiled], marks: List[Mark], invalidations: Optional[List[Invalidation]]) -> None:
    phases = phase_names(marks)
    counts: Dict[str, Dict[str, int]] = {phase: {} for phase in phases}
    listed: Dict[str, List[str]] = {phase: [] for phase in phases}
    for when, kind, loop, where in compiled:
        phase = phase_of(when, marks)
        counts[phase][kind] = counts[phase].get(kind, 0) + 1
        if phase != START and kind in ("loop", "entry bridge"):
            listed[phase].append(f"{kind} {loop}: {where}")
    print(f"\n{'phase':<20}{'loops':>7}{'entry bridges':>15}{'bridges':>9}{'aborts':>8}")
    for phase in phases:
        aborts = sum(n for kind, n in counts[phase].items() if kind.startswith("abort"))
        row = counts[phase]
        print(f"{phase:<20}{row.get('loop', 0):>7}{row.get('entry bridge', 0):>15}{row.get('bridge', 0):>9}{aborts:>8}")
        for entry in listed[phase]:
            print(f"    {entry}")
    if invalidations is not None:
        print("\ninvalidations (PYPYLOG jit-invalidate-quasi-immutable):")
        for when, what, loops in invalidations:
            print(f"  {phase_of(when, marks):<20}{loops if loops >= 0 else '?':>3} loop(s)  {what}")


if __name__ == "__main__":
    main()
