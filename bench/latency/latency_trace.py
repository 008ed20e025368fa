"""Where a task's submit-to-result time goes: bench/scale/scale_sim.py's paced phase, traced per task and per event.

    .venv/bin/python -m bench.latency.latency_trace --workers 1024 --rate 13000 --rate 66000

The scheduler runs under bench/latency/traced_scheduler.py (PyPy: --scheduler-python); the simulated workers stamp when
they read each task, the simulated client stamps when it sent each task and when its result came. All stamps are
time.monotonic() on one host, so each task's time splits into six hops:
  client->sched      sent, until core.receive got the Task (the client's send, ZeroMQ, the scheduler's wake-up and
                     the frames read before it in the same drain)
  task until flush   until the flush that sent it began (the rest of that drain: the frames read after it)
  sched->worker      until the simulated worker read it
  worker->sched      until core.receive got the result
  result until flush until the flush that sent the result began
  sched->client      until the client read the result
For each rate it prints the hops (all tasks, and the slowest 1%), latency over time (per 100 ms of submission), the
scheduler's events in the measured window (drains, ticks, status, GC) and what ran beside the slow tasks, and the CPU
of each thread of the scheduler and the peers (a process's main thread apart from ZeroMQ's I/O thread). Slow tasks
that overlap no long scheduler event waited elsewhere: in the peers, in ZeroMQ, or for a CPU.

The wrappers cost the scheduler a few microseconds a drain: take latency and CPU figures from bench/scale/scale_sim.py.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from bench.localcluster import PYPY, environment_kept
from bench.scale.scale_sim import WORKERS_PER_HOST, Scheduler
from scaler.testing.sim_peers import PeerHost

ROOT = Path(__file__).resolve().parents[2]

HOPS = ["client->sched", "task until flush", "sched->worker", "worker->sched", "result until flush", "sched->client"]
_LONG_EVENT_SECONDS = 0.001


def thread_cpu(pid: int) -> Dict[str, Tuple[str, float]]:
    """Thread id -> (name, CPU seconds, user and system) of every thread of a process (Linux /proc)."""
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as file:
                stat = file.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        threads[tid] = (stat[stat.index("(") + 1 : stat.rindex(")")], (int(fields[11]) + int(fields[12])) / 100)
    return threads


def percentile(values: Sequence[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))] if values else math.nan


def hops(client: list, workers: Dict[str, float], scheduler: dict) -> List[Tuple[float, float, List[float]]]:
    """(latency, sent, [six hops]) per task traced everywhere."""
    flushes = sorted(event[1] for event in scheduler["events"] if event[0] == "flush")

    def sent_on(at: float) -> float:
        """When the first flush after `at` began: what the core queued meanwhile left then."""
        index = bisect.bisect_left(flushes, at)
        return flushes[index] if index < len(flushes) else at

    task_in: Dict[str, float] = {}
    result_in: Dict[str, float] = {}
    for task_id, kind, at in scheduler["tasks"]:
        (result_in if kind == "TaskResult" else task_in)[task_id] = at
    rows = []
    for task_id, sent, latency in client:
        t1, t3, t4 = task_in.get(task_id), workers.get(task_id), result_in.get(task_id)
        if t1 is None or t3 is None or t4 is None:
            continue
        t2, t5 = sent_on(t1), sent_on(t4)
        rows.append((latency, sent, [t1 - sent, t2 - t1, t3 - t2, t4 - t3, t5 - t4, sent + latency - t5]))
    rows.sort()
    return rows


def report_hops(rows: List[Tuple[float, float, List[float]]]) -> None:
    for title, chosen in (("all tasks", rows), ("slowest 1%", rows[int(0.99 * len(rows)) :])):
        print(f"  hops, {title} ({len(chosen):,}): p50 / p99 / mean ms")
        for index, name in enumerate(HOPS):
            values = sorted(row[2][index] for row in chosen)
            mean = sum(values) / len(values) if values else math.nan
            print(
                f"    {name:18} {percentile(values, 0.5) * 1e3:8.2f} {percentile(values, 0.99) * 1e3:8.2f}"
                f" {mean * 1e3:8.2f}"
            )


def report_over_time(rows: List[Tuple[float, float, List[float]]], bucket: float) -> None:
    first = min(row[1] for row in rows)
    by_bucket: Dict[int, List[float]] = defaultdict(list)
    for latency, sent, _ in rows:
        by_bucket[int((sent - first) / bucket)].append(latency)
    print(f"  latency by submission time, per {bucket * 1e3:.0f} ms: p50 / p99 / max ms")
    for key in sorted(by_bucket):
        values = sorted(by_bucket[key])
        print(
            f"    {key * bucket:6.1f} s  n={len(values):6,}  {percentile(values, 0.5) * 1e3:8.2f}"
            f" {percentile(values, 0.99) * 1e3:8.2f} {values[-1] * 1e3:8.2f}"
        )


def report_events(rows: List[Tuple[float, float, List[float]]], scheduler: dict, slow_ms: float) -> None:
    first = min(row[1] for row in rows)
    last = max(row[1] + row[0] for row in rows)
    window = [event for event in scheduler["events"] if first <= event[1] <= last]
    print(f"  scheduler events over the {last - first:.1f} s measured: count, wall total / max ms, thread CPU total ms")
    totals: Dict[str, list] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for kind, _, wall, cpu, detail in window:
        total = totals[kind]
        total[0] += detail if kind == "gc-minor" else 1
        total[1] += wall
        total[2] = max(total[2], wall)
        total[3] += cpu
    for kind, (count, wall, longest, cpu) in sorted(totals.items()):
        print(f"    {kind:9} {count:7,}  {wall * 1e3:9.1f} / {longest * 1e3:7.2f}  {cpu * 1e3:9.1f}")
    drains = [event for event in window if event[0] == "drain"]
    if drains:
        messages = sorted(event[4] for event in drains)
        print(f"    messages per drain: p50 {percentile(messages, 0.5)}, p99 {percentile(messages, 0.99)}")
    long_events = sorted((event for event in window if event[2] > _LONG_EVENT_SECONDS), key=lambda event: event[1])
    starts = [event[1] for event in long_events]
    slow = [(sent, latency) for latency, sent, _ in rows if latency * 1e3 > slow_ms]
    overlapping: Dict[str, int] = defaultdict(int)
    alone = 0
    for sent, latency in slow:
        kinds = set()
        index = bisect.bisect_left(starts, sent - 1.0)
        while index < len(long_events) and long_events[index][1] < sent + latency:
            kind, start, wall = long_events[index][:3]
            if start + wall > sent and kind != "callback":
                kinds.add(kind)
            index += 1
        for kind in kinds:
            overlapping[kind] += 1
        alone += not kinds
    print(
        f"  tasks over {slow_ms:g} ms: {len(slow):,} of {len(rows):,}; those whose life overlapped a scheduler event"
        f" over {_LONG_EVENT_SECONDS * 1e3:g} ms, by kind: {dict(overlapping)}; overlapping none: {alone:,}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scheduler-python", default=PYPY)
    parser.add_argument("--peer-python", default=None, help="runs the simulated peers (default: the scheduler's)")
    parser.add_argument("--workers", type=int, default=1024)
    parser.add_argument("--capacity", type=int, default=64)
    parser.add_argument("--rate", type=float, action="append", help="tasks/s all clients submit, repeatable")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--slow-ms", type=float, default=5.0, help="the latency that counts as slow")
    parser.add_argument("--bucket", type=float, default=0.1, help="seconds per row of latency over time")
    parser.add_argument("--keep", type=Path, help="keep the raw traces in this directory")
    parser.add_argument(
        "--scheduler-env", action="append", default=[], help="KEY=VALUE for the scheduler only (PYPY_GC_NURSERY=8M)"
    )
    args = parser.parse_args()
    rates = args.rate or [13000.0]
    # absolute (not resolved: a venv's python is a symlink that must stay one), since the scheduler runs elsewhere
    scheduler_python = str(Path(args.scheduler_python).absolute())
    peer_python = args.peer_python or scheduler_python
    workdir = Path(tempfile.mkdtemp(prefix="scaler-latency-trace-"))
    scheduler_trace = workdir / "scheduler.json"
    with environment_kept():  # the settings are the scheduler's only
        os.environ.update(setting.split("=", 1) for setting in args.scheduler_env)
        scheduler = Scheduler(scheduler_python, workdir, [], trace=scheduler_trace)
    hosts: List[PeerHost] = []
    results = []
    try:
        n_hosts = math.ceil(args.workers / WORKERS_PER_HOST)
        for index in range(n_hosts):
            count = args.workers // n_hosts + (1 if index < args.workers % n_hosts else 0)
            hosts.append(
                PeerHost(
                    peer_python,
                    ["workers", scheduler.address, "--count", str(count), "--capacity", str(args.capacity)]
                    + ["--name", str(index), "--seed", str(index + 1)],
                    workdir / f"workers{index}.log",
                )
            )
        for host in hosts:
            host.expect("connected", timeout=120)
        scheduler.wait_for(lambda s: len(s.workers) >= args.workers, 60, f"{args.workers} workers at the scheduler")
        worker_hosts = list(hosts)
        client = PeerHost(
            peer_python,
            ["clients", scheduler.address, "--count", "1", "--scheduler-pid", str(scheduler.pid)]
            + [arg for host in worker_hosts for arg in ("--watch-pid", str(host.pid))],
            workdir / "clients.log",
        )
        hosts.append(client)
        client.expect("connected", timeout=60)
        processes = [("scheduler", scheduler.pid), ("client host", client.pid)]
        processes += [(f"worker host {index}", host.pid) for index, host in enumerate(worker_hosts)]
        for rate in rates:
            for host in worker_hosts:
                host.ask({"cmd": "trace", "on": True})
            command = {"cmd": "open", "rate": rate, "warmup": args.warmup, "seconds": args.seconds, "trace": True}
            client.ask(command)
            time.sleep(args.warmup)
            before = {pid: thread_cpu(pid) for _, pid in processes}
            started = time.monotonic()
            measured = client.expect("measured", timeout=args.seconds + 120)
            elapsed = time.monotonic() - started
            after = {pid: thread_cpu(pid) for _, pid in processes}
            traces = []
            for index, host in enumerate(worker_hosts):
                path = workdir / f"workers{index}-{rate:g}.json"
                host.ask({"cmd": "trace", "on": False, "path": str(path)})
                traces.append(path)
            client_path = workdir / f"client-{rate:g}.json"
            client.ask({"cmd": "dump", "path": str(client_path)})
            client.ask({"cmd": "drain", "timeout": 120})
            client.expect("drained", timeout=130)
            cpu = {}
            for name, pid in processes:
                for tid, (thread, seconds) in after[pid].items():
                    spent = (seconds - before[pid].get(tid, (thread, 0.0))[1]) / elapsed
                    if spent >= 0.01:
                        cpu[f"{name}: {thread}"] = spent
            results.append((rate, measured, client_path, traces, cpu))
    finally:
        for host in reversed(hosts):
            host.stop()
        scheduler.stop()
    with open(scheduler_trace) as file:
        scheduler_events = json.load(file)
    for rate, measured, client_path, traces, cpu in results:
        workers: Dict[str, float] = {}
        for path in traces:
            with open(path) as file:
                workers.update((task_id, at) for task_id, at in json.load(file))
        with open(client_path) as file:
            rows = hops(json.load(file), workers, scheduler_events)
        print(
            f"\n== {rate:,.0f} tasks/s, {args.workers:,} workers: routed {measured['tasks_per_second']:,.0f}/s,"
            f" p50 {measured['latency_p50_ms']:.2f} ms, p99 {measured['latency_p99_ms']:.2f} ms,"
            f" scheduler run-queue wait {measured['scheduler_waited_share']:.0%},"
            f" pacing lag p99 {measured['pacing_lag_p99_ms']:.2f} ms"
        )
        print("  CPU, cores: " + ", ".join(f"{name} {cores:.2f}" for name, cores in sorted(cpu.items())))
        if not rows:
            print("  no task traced end to end")
            continue
        report_hops(rows)
        report_events(rows, scheduler_events, args.slow_ms)
        report_over_time(rows, args.bucket)
    if args.keep is not None:
        shutil.copytree(workdir, args.keep, dirs_exist_ok=True)
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
