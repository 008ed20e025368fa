"""How fast Scaler moves data, against Dask distributed and the seeds' engine (scaler 1.9.9), in one run.

    .venv/bin/python -m bench.data.transfer                          # every workload and engine, 3 rounds
    .venv/bin/python -m bench.data.transfer --workload results --workload chains --engine scaler --engine dask
    .venv/bin/python -m bench.data.transfer --quick --json data.json   # tiny sizes, 1 round, Scaler only

Workloads (sizes are options; the defaults are those of issues 27 and 28):
- results: TASKS tasks each return a distinct PAYLOAD (random bytes, so nothing compresses them); the client gets
  them all. MB/s of payload delivered.
- chains: CHAINS graph chains make -> step -> size through client.get (Dask: the same graph dict through its
  client.get): make returns a PAYLOAD, step turns it into another, size checks it and returns its length. MB/s of
  intermediates made (two a chain).
- args: TASKS tasks, each given a distinct PAYLOAD as its argument, check it. MB/s of arguments.
- results-numpy, args-numpy: the same with float64 numpy arrays.
- matmul: dask.array `(x @ x.T).mean()` on a random SIDE x SIDE array in CHUNK x CHUNK chunks, seconds (Scaler:
  dask.compute(..., scheduler=client.get); the seeds' client.get cannot run a dask collection).
- fanin: FANIN_LEAVES graph leaves each return 70 KiB (above the inline limit, so held where made), one node reads
  them all and checks each, through client.get: MB/s of leaves read. A worker holding more results than a share of its
  descriptors, and one task reading tens of thousands of them.
- heavy: the seeds' test_heavy_function: one functools.partial holding HEAVY_MB, mapped over HEAVY_TASKS tasks with
  its custom serializer, seconds, and whether a worker missed its heartbeats (was removed for it) meanwhile.

Engines: Scaler (this checkout; the scheduler on PyPy when .venv-pypy exists, or --scheduler-python), Dask
distributed (LocalCluster, WORKERS processes x 1 thread; its client gets results through the scheduler, as a client
outside the cluster does by default) and the seeds' engine (scaler 1.9.9 from PyPI, in a virtual environment of its
own, made on first use): WORKERS workers each, see bench/data/engines.py. `--engine dask-direct` adds Dask with a
client that fetches results from the workers that hold them (direct_to_workers=True). An engine that cannot run
here is skipped with a line saying why. Each round runs every workload on every engine in turn (A, B, C, then the next
workload), each trial on a fresh cluster, started before timing; the client runs in a process of its own
(bench/data/client_side.py), warms up, and times from the first submit to the last result checked. Every result is
checked: a wrong or missing one fails the trial, and the run exits 1.

For each trial the scheduler's RSS is sampled every 50 ms: the figure is its peak above its RSS when idle (cluster up,
before the client connects). The table shows, per workload and engine, the median over --repeat rounds and the range,
and the median and largest of those RSS peaks. The workers' BLAS runs --blas-threads threads on every engine; with 0,
each engine's own default (1 for both Scaler's --native-threads and Dask's nanny; a library left alone runs a thread per
core in each of the 2 workers). MB: 10**6 bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import psutil

from bench.data.client_side import WORKLOADS
from bench.data.engines import Cluster, Engine, engines, stop_children
from bench.localcluster import CPYTHON, PYPY, ROOT, median
from scaler.testing.processes import stop_process_group

ENGINE_NAMES = ("scaler", "dask", "seed", "dask-direct")
DEFAULT_ENGINES = ["scaler", "dask", "seed"]
SHORT = {"scaler": "Scaler", "dask": "Dask", "seed": "seeds' 1.9.9", "dask-direct": "Dask direct"}
SECONDS_WORKLOADS = ("matmul", "heavy")  # reported in seconds; the others in MB/s
MIB = 2**20
QUICK = {"payload_mib": 0.25, "tasks": 4, "chains": 2, "matmul_side": 200, "matmul_chunk": 100, "heavy_mb": 5}
QUICK.update(fanin_leaves=20)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=WORKLOADS, action="append", help="repeat to pick several; default all")
    parser.add_argument(
        "--engine", choices=ENGINE_NAMES, action="append", help="repeat to pick several; default scaler, dask, seed"
    )
    parser.add_argument("--repeat", type=int, help="rounds (default 3; --quick: 1)")
    parser.add_argument("--workers", type=int, default=2, help="workers of each engine's cluster")
    parser.add_argument("--payload-mib", type=float, help="size of each payload (default 16)")
    parser.add_argument("--tasks", type=int, help="tasks of results and args (default 64)")
    parser.add_argument("--chains", type=int, help="chains of the chains graph (default 16)")
    parser.add_argument("--matmul-side", type=int, help="side of matmul's square array (default 4000)")
    parser.add_argument("--matmul-chunk", type=int, help="side of its square chunks (default 1000)")
    parser.add_argument("--fanin-leaves", type=int, help="leaves of 70 KiB the fanin node reads (default 5000)")
    parser.add_argument("--heavy-mb", type=float, help="MB held by heavy's partial (default 500)")
    parser.add_argument("--heavy-tasks", type=int, default=5, help="tasks heavy maps its partial over")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 1 round, Scaler only unless --engine")
    default_scheduler = PYPY if os.path.exists(PYPY) else CPYTHON
    parser.add_argument("--scheduler-python", default=default_scheduler, help="Scaler's scheduler's interpreter")
    parser.add_argument("--seed-venv", type=Path, default=ROOT / ".venv-seed", help="the seeds' engine's environment")
    parser.add_argument("--seed-python", default="python3", help="interpreter to make it with (1.9.9: CPython 3.11)")
    parser.add_argument(
        "--blas-threads", type=int, default=1, help="BLAS threads of every worker (0: each engine's own default)"
    )
    parser.add_argument("--trial-timeout", type=float, default=900.0, help="seconds before a trial's client is ended")
    parser.add_argument("--json", type=Path, help="also write every trial and the summary here")
    parser.add_argument("--logs", type=Path, help="keep each trial's logs in this directory (made if missing)")
    args = parser.parse_args()
    defaults = {"payload_mib": 16.0, "tasks": 64, "chains": 16, "matmul_side": 4000, "matmul_chunk": 1000}
    defaults.update(heavy_mb=500.0, fanin_leaves=5000, repeat=3)
    if args.quick:
        defaults.update(QUICK, repeat=1)
        args.engine = args.engine or ["scaler"]
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.workload = args.workload or list(WORKLOADS)
    args.engine = args.engine or DEFAULT_ENGINES
    counts = (args.repeat, args.workers, args.tasks, args.chains, args.heavy_tasks, args.matmul_side, args.matmul_chunk)
    counts += (args.fanin_leaves,)
    if min(counts) < 1 or args.payload_mib * MIB < 64 or args.heavy_mb <= 0:
        parser.error("counts must be >= 1, --payload-mib at least 64 bytes, --heavy-mb > 0")
    return args


def workload_params(args: argparse.Namespace) -> Dict[str, Any]:
    return {
        "workers": args.workers,
        "payload_bytes": int(args.payload_mib * MIB) // 8 * 8,  # a whole number of float64s
        "tasks": args.tasks,
        "chains": args.chains,
        "matmul_side": args.matmul_side,
        "matmul_chunk": args.matmul_chunk,
        "heavy_bytes": int(args.heavy_mb * 10**6),
        "heavy_tasks": args.heavy_tasks,
        "fanin_leaves": args.fanin_leaves,
    }


def run_client(
    engine: Engine, cluster: Cluster, workload: str, params: Dict[str, Any], timeout: float, logs: Dict[str, str]
) -> Dict[str, Any]:
    """client_side.py for one trial, in its own process group, ended early if the cluster fails; its report. Its
    output goes to `logs`."""
    with tempfile.TemporaryDirectory(prefix="c-") as workdir:
        out = os.path.join(workdir, "outcome.json")
        arguments = ["--engine", engine.name, "--address", cluster.address, "--workload", workload]
        arguments += ["--params", json.dumps(params), "--out", out]
        log_path = os.path.join(workdir, "client.log")
        keywords = engine.client_command(arguments, workdir)
        with open(log_path, "wb") as log:
            client = subprocess.Popen(**keywords, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        problem: Optional[str] = None
        try:
            deadline = time.monotonic() + timeout
            while client.poll() is None and problem is None:
                try:
                    client.wait(0.5)
                except subprocess.TimeoutExpired:
                    # a cluster that lost a process would leave some clients waiting for ever
                    problem = cluster.problem()
                    if problem is None and time.monotonic() > deadline:
                        problem = f"no outcome after {timeout:.0f} s"
        finally:
            stop_process_group(client)  # also whatever it started and left, if anything
            logs["client.log"] = Path(log_path).read_text(errors="replace")
        if problem is not None:
            return {"error": f"the client was ended: {problem}"}
        if not os.path.exists(out):
            tail = logs["client.log"][-1500:]
            return {"error": f"the client exited with {client.returncode} and no outcome:\n{tail}"}
        report: Dict[str, Any] = json.loads(Path(out).read_text())
        return report


def run_trial(
    engine: Engine, workload: str, params: Dict[str, Any], timeout: float, logs: Dict[str, str]
) -> Dict[str, Any]:
    """One workload on a fresh cluster of one engine; the processes' logs go to `logs`."""
    record: Dict[str, Any] = {"workload": workload, "engine": engine.name, "error": None}
    try:
        with engine.cluster(params["workers"]) as cluster:
            try:
                cluster.rss.reset_peak()
                idle = cluster.rss.peak  # cluster up, the client not yet there
                lost_before, stalls_before = cluster.workers_lost(), cluster.stalls()
                record.update(run_client(engine, cluster, workload, params, timeout, logs))
                try:
                    cluster.rss.current()
                except psutil.NoSuchProcess:
                    record["error"] = record["error"] or "the scheduler died"
                record.update(
                    rss_idle=idle,
                    rss_peak=cluster.rss.peak,
                    rss_above_idle=cluster.rss.peak - idle,
                    workers_lost=cluster.workers_lost() - lost_before,
                    scheduler_stalls=cluster.stalls() - stalls_before,
                )
            finally:
                logs.update(cluster.logs())
    except Exception as error:  # a cluster that did not start: this trial fails, the others run
        record["error"] = f"{type(error).__name__}: {error}"[:2000]
    seconds = record.get("seconds")
    if seconds and not record["error"]:
        record["unit"] = "s" if workload in SECONDS_WORKLOADS else "MB/s"
        record["value"] = seconds if workload in SECONDS_WORKLOADS else record["bytes"] / seconds / 1e6
    if not record["error"] and record.get("checked") != record.get("expected"):
        record["error"] = f"{record.get('checked')} of {record.get('expected')} results checked"
    return record


def summarize(runs: List[Dict[str, Any]], workloads: List[str], names: List[str]) -> List[Dict[str, Any]]:
    rows = []
    for workload in workloads:
        for name in names:
            trials = [run for run in runs if run["workload"] == workload and run["engine"] == name]
            if not trials:
                continue
            good = [run for run in trials if not run["error"]]
            values = [run["value"] for run in good]
            rss = [run["rss_above_idle"] for run in trials if "rss_above_idle" in run]
            rows.append(
                {
                    "workload": workload,
                    "engine": name,
                    "unit": "s" if workload in SECONDS_WORKLOADS else "MB/s",
                    "rounds": len(trials),
                    "failed": len(trials) - len(good),
                    "median": median(values) if values else None,
                    "min": min(values) if values else None,
                    "max": max(values) if values else None,
                    "rss_above_idle_median": median(rss) if rss else None,
                    "rss_above_idle_max": max(rss) if rss else None,
                    "workers_lost": sum(run.get("workers_lost", 0) for run in trials),
                    "scheduler_stalls": sum(run.get("scheduler_stalls", 0) for run in trials),
                    "errors": sorted({run["error"].splitlines()[0] for run in trials if run["error"]}),
                }
            )
    return rows


def size_text(nbytes: Optional[float]) -> str:
    if nbytes is None:
        return "-"
    if abs(nbytes) >= 2**30:
        return f"{nbytes / 2**30:.2f} GiB"
    return f"{nbytes / MIB:.0f} MiB"


def print_table(rows: List[Dict[str, Any]], skipped: List[Dict[str, str]]) -> None:
    header = f"{'workload':<14}{'engine':<14}{'median':>9}{'min - max':>19}  {'unit':<6}{'sched RSS above idle':>24}"
    header += "  notes"
    print(header)
    print("-" * len(header))
    for row in rows:
        if row["median"] is None:
            numbers = f"{'-':>9}{'-':>19}"
        else:
            digits = 2 if row["unit"] == "s" else 0
            spread = f"{row['min']:.{digits}f} - {row['max']:.{digits}f}"
            numbers = f"{row['median']:>9.{digits}f}{spread:>19}"
        rss = f"{size_text(row['rss_above_idle_median'])} (max {size_text(row['rss_above_idle_max'])})"
        notes = []
        if row["workload"] == "heavy" or row["workers_lost"]:
            notes.append(f"workers lost (missed heartbeats): {row['workers_lost']}")
        if row["scheduler_stalls"]:
            notes.append(f"scheduler stalls: {row['scheduler_stalls']}")
        if row["failed"]:
            notes.append(f"FAILED {row['failed']}/{row['rounds']}: {'; '.join(row['errors'])[:200]}")
        engine = SHORT[row["engine"]]
        print(f"{row['workload']:<14}{engine:<14}{numbers}  {row['unit']:<6}{rss:>24}  {', '.join(notes)}".rstrip())
    for skip in skipped:
        print(f"{skip['workload']:<14}{SHORT[skip['engine']]:<14}{'skipped: ' + skip['reason']:>30}")


def main() -> None:
    args = parse_args()
    params = workload_params(args)
    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)
    # SIGTERM unwinds as Ctrl-C does: every cluster is stopped on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if args.blas_threads:
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(args.blas_threads)  # the workers of every engine inherit it
    # every engine's temporary files (sockets, logs, Dask's scratch space) under one directory, removed at the end;
    # a short name, as ipc sockets go there (at most 107 bytes a path)
    with tempfile.TemporaryDirectory(prefix="bd-") as temporary:
        os.environ["TMPDIR"] = temporary
        tempfile.tempdir = temporary
        try:
            runs, skipped, made = benchmark(args, params)
        finally:
            stop_children()
            tempfile.tempdir = None
    rows = summarize(runs, args.workload, [engine.name for engine in made if engine.skip_reason is None])
    load = os.getloadavg()
    print(
        f"\n{args.workers} workers per engine; payloads of {params['payload_bytes'] / MIB:g} MiB ({args.tasks} tasks, "
        f"{args.chains} chains); matmul {args.matmul_side}^2 in {args.matmul_chunk}^2 chunks; heavy "
        f"{args.heavy_mb:g} MB x {args.heavy_tasks} tasks; fanin {args.fanin_leaves} leaves of 70 KiB; "
        f"{args.repeat} round(s), interleaved; "
        f"{os.cpu_count()} CPUs, load {args.load_before[0]:.2f} before, {load[0]:.2f} after"
    )
    for engine in made:
        print(f"  {SHORT[engine.name]:<14}{engine.label}")
    print()
    print_table(rows, skipped)
    failed = [run for run in runs if run["error"]]
    if args.json:
        document = {
            "params": params,
            "repeat": args.repeat,
            "machine": {"cpus": os.cpu_count(), "load_before": args.load_before, "load_after": list(load)},
            "engines": [
                {"name": e.name, "label": e.label, "available": e.skip_reason is None, "skip_reason": e.skip_reason}
                for e in made
            ],
            "skipped": skipped,
            "runs": runs,
            "summary": rows,
        }
        args.json.write_text(json.dumps(document, indent=1) + "\n")
    if failed:
        sys.exit(f"{len(failed)} trial(s) failed or got wrong results (see above)")


def benchmark(args: argparse.Namespace, params: Dict[str, Any]) -> tuple:
    args.load_before = list(os.getloadavg())
    made = engines(args.engine, args.scheduler_python, args.seed_venv, args.seed_python)
    available = []
    for engine in made:
        if engine.skip_reason is not None:
            print(f"{engine.label}: skipped, {engine.skip_reason}", flush=True)
        else:
            available.append(engine)
    skipped = [
        {"workload": workload, "engine": engine.name, "reason": reason}
        for workload in args.workload
        for engine in available
        if (reason := engine.unsupported(workload)) is not None
    ]
    for skip in skipped:
        print(f"{skip['workload']} on {SHORT[skip['engine']]}: skipped, {skip['reason']}", flush=True)
    runs: List[Dict[str, Any]] = []
    for round_number in range(1, args.repeat + 1):
        for workload in args.workload:
            for engine in available:
                if engine.unsupported(workload) is not None:
                    continue
                started = time.perf_counter()
                logs: Dict[str, str] = {}
                record = run_trial(engine, workload, params, args.trial_timeout, logs)
                record["round"] = round_number
                runs.append(record)
                print(progress_line(record, time.perf_counter() - started), flush=True)
                if record["error"] and "client.log" in logs:
                    print(logs["client.log"][-3000:], file=sys.stderr)
                if args.logs:
                    for name, text in logs.items():
                        (args.logs / f"{round_number}-{workload}-{engine.name}-{name}").write_text(text)
    return runs, skipped, made


def progress_line(record: Dict[str, Any], wall: float) -> str:
    head = f"round {record['round']}: {record['workload']:<14}{SHORT[record['engine']]:<14}"
    if record["error"]:
        return f"{head}FAILED: {record['error']}"
    value = f"{record['value']:.2f} s" if record["unit"] == "s" else f"{record['value']:.0f} MB/s"
    lost = f", workers lost {record['workers_lost']}" if record["workers_lost"] or record["workload"] == "heavy" else ""
    if record["scheduler_stalls"]:
        lost += f", scheduler stalls {record['scheduler_stalls']}"
    return (
        f"{head}{value:>12}  ({record['checked']}/{record['expected']} checked, scheduler RSS "
        f"+{size_text(record['rss_above_idle'])}{lost}; trial {wall:.0f} s with start and stop)"
    )


if __name__ == "__main__":
    main()
