"""A soak test: a mixed load on a local cluster for a given time, with every process's resources recorded.

    .venv/bin/python -m bench.memory.soak --minutes 30 --interval 30 --out /tmp/soak30    # docs/performance.md's run
    cp /tmp/soak30/soak.png docs/images/soak-30min.png                              # ...and its plot
    .venv/bin/python -m bench.memory.soak --minutes 2 --interval 5 --out /tmp/soak         # what CI runs (tests/e2e)

A scheduler, a cluster of two workers that stays, and a cluster of one worker that is SIGKILLed and replaced every
--churn-seconds (workers killed and added). A long-lived client runs rounds of: a map, a graph, nested tasks
(fibonacci), tasks cancelled half-way; short-lived clients connect, send a large object with send_object, run tasks
on it, and leave. Halfway through, the scheduler is SIGKILLed and a new one started on the same address a second
later: the clients and workers carry on (README, "Failures and recovery").

Every --interval seconds it records the RSS, open file descriptors and threads of every process (scheduler, worker
agents, processors, this client process), the tasks finished per second (the scheduler's count) and the futures
resolved so far. It writes soak.json and, with matplotlib (pip install ".[plot]"), soak.png into --out.

It passes (exit 0) when every future resolved exactly once with the right value (or was cancelled, for those
cancelled) and no process grew by more than 10% after warm-up. A process is judged on its samples after the warm-up
(--warmup-fraction of the run; for the scheduler started halfway, of the time it ran): the floor (lowest sample) of
the second half of them against the floor of the first half. Processes hold objects for a while by design (workers
cache them for --object-retention, processors keep a copy until they are handed their next task), so a sample can
catch a process with an object more or less; memory that is never given back raises the floor, which is what a leak
does. Open files and threads are recorded, plotted and shown the same way but not judged: they follow what the load
opens (the scheduler has one descriptor per connected peer, nested tasks' clients included, which stay counted until
their timeout when a worker is killed; a worker agent a few per processor, and it starts spare processors as nested
tasks park), so a 10% rule on them would judge the load, not a leak. Processes that did not live through the judged
time (the churned workers, spare processors that workers start and stop as
nested tasks park) are shown but not judged.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import cloudpickle
import psutil
import zmq

from scaler import Client
from scaler.io.sockets import create_subscriber
from scaler.protocol import SchedulerStatus, decode_frame
from scaler.testing.processes import ScalerProcess, free_tcp_address, wait_for

ROOT = Path(__file__).resolve().parents[2]

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this file

GROWTH_LIMIT = 0.10
MIN_JUDGED_SAMPLES = 6
LARGE_OBJECT_BYTES = 1024 * 1024  # 16 times the inline limit: an object of its own, fetched once per worker


# ---- the tasks ---------------------------------------------------------------------------------------------------


def square(value: int) -> int:
    return value * value


def fibonacci(client: Client, n: int) -> int:
    if n < 2:
        return n
    left, right = client.submit(fibonacci, client, n - 1), client.submit(fibonacci, client, n - 2)
    return left.result() + right.result()


def node(*parents: int) -> int:
    return sum(parents) % 1_000_003 + 1


def nap(seconds: float, value: int) -> int:
    time.sleep(seconds)
    return value


def digest(data: bytes, salt: int) -> str:
    return hashlib.sha256(data + salt.to_bytes(4, "little")).hexdigest()


FIBONACCI = [0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55]


def layered_graph(layers: int, width: int) -> Tuple[Dict[str, Any], Dict[str, int]]:
    graph: Dict[str, Any] = {}
    values: Dict[str, int] = {}
    for layer in range(layers):
        for index in range(width):
            key = f"n{layer}-{index}"
            parents = [f"n{layer - 1}-{(index + k) % width}" for k in (0, 1)] if layer else [index]
            graph[key] = (node, *parents)
            values[key] = node(*[values[p] for p in parents]) if layer else node(index)
    return graph, values


# ---- what was promised ---------------------------------------------------------------------------------------------


class Ledger:
    """Every future of the run: it must settle exactly once, with the expected value (or cancelled, if it was)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: Dict[int, Tuple[Any, Any, bool]] = {}  # id -> (future, expected, may be cancelled)
        self.resolved = 0
        self.cancelled = 0
        self.problems: List[str] = []

    def expect(self, future: Any, expected: Any, may_cancel: bool = False) -> None:
        with self._lock:
            self._pending[id(future)] = (future, expected, may_cancel)
        future.add_done_callback(self._settled)

    def _settled(self, future: Any) -> None:
        with self._lock:
            entry = self._pending.pop(id(future), None)
            if entry is None:
                self.problems.append(f"a future settled twice, or was never expected: {future!r}")
                return
            _, expected, may_cancel = entry
            self.resolved += 1
            if future.cancelled():
                self.cancelled += 1
                if not may_cancel:
                    self.problems.append(f"cancelled though nobody cancelled it: {future!r}")
                return
        error = future.exception()
        if error is not None:
            self.problem(f"{future!r} failed: {error!r}")
        elif future.result() != expected:
            self.problem(f"{future!r} gave {future.result()!r}, expected {expected!r}")

    def problem(self, text: str) -> None:
        with self._lock:
            if len(self.problems) < 100:
                self.problems.append(text)

    def unsettled(self) -> int:
        with self._lock:
            return len(self._pending)


# ---- the run -------------------------------------------------------------------------------------------------------


@dataclass
class Sample:
    time: float  # seconds since the start
    processes: Dict[str, Dict[str, float]]  # "role pid" -> rss (MiB), fds, threads
    tasks_per_second: float
    futures_resolved: int


@dataclass
class Run:
    minutes: float
    interval: float
    warmup_fraction: float
    churn_seconds: float
    object_retention: float
    samples: List[Sample] = field(default_factory=list)
    events: List[Tuple[float, str]] = field(default_factory=list)


class Soak:
    def __init__(self, run: Run, directory: str, python: str) -> None:
        self.run = run
        self.directory = directory
        self.python = python
        self.address = free_tcp_address()
        self.monitor = "ipc://" + os.path.join(directory, "monitor")
        self.ledger = Ledger()
        self.stopping = threading.Event()
        self.start = time.monotonic()
        self.schedulers: List[ScalerProcess] = []
        self.clusters: List[ScalerProcess] = []  # [0] stays; the last one is the churned worker
        self.churned_pids: set = set()
        self._completed_offset = 0  # tasks finished by schedulers that were killed
        self._last_completed = 0
        self._total_before = 0
        self._log_number = 0

    # ---- processes --------------------------------------------------------------------------------------------------

    def _process(self, module: str, arguments: List[str], name: str) -> ScalerProcess:
        self._log_number += 1
        log = os.path.join(self.directory, f"{self._log_number:02d}-{name}.log")
        return ScalerProcess(module, arguments, log, self.python)

    def start_scheduler(self) -> None:
        arguments = [self.address, "--monitor-address", self.monitor, "--status-interval", "0.5"]
        scheduler = self._process("scaler.scheduler", arguments + ["--logging-level", "WARNING"], "scheduler")
        self.schedulers.append(scheduler)
        wait_for(lambda: self.status(0.2) is not None, 60, "the scheduler's first status")

    def start_cluster(self, workers: int, name: str) -> ScalerProcess:
        arguments = ["-n", str(workers), "--logging-level", "WARNING", self.address]
        # Workers keep objects until no task used them for the retention time (an hour by default): the scheduler
        # does not tell them when a client that left freed its objects, so a load of large objects from clients that
        # come and go needs a retention in minutes, or workers hold every one for an hour.
        arguments += ["--object-retention", f"{self.run.object_retention:g}", "--garbage-collect-interval", "5"]
        cluster = self._process("scaler.cluster", arguments, name)
        self.clusters.append(cluster)
        return cluster

    def event(self, text: str) -> None:
        self.run.events.append((round(time.monotonic() - self.start, 1), text))
        print(f"[{time.monotonic() - self.start:7.1f}s] {text}", flush=True)

    def status(self, timeout: float) -> Optional[SchedulerStatus]:
        socket = create_subscriber(zmq.Context.instance(), self.monitor, conflate=True)
        try:
            if not socket.poll(int(timeout * 1000)):
                return None
            return next((m for m in decode_frame(socket.recv()) if isinstance(m, SchedulerStatus)), None)
        finally:
            socket.close()

    # ---- load -------------------------------------------------------------------------------------------------------

    def rounds(self, client: Client) -> None:
        """The long-lived client: map, graph, nested tasks, cancels; until told to stop."""
        graph, values = layered_graph(5, 20)
        keys = [f"n4-{index}" for index in range(20)] + [f"n2-{index}" for index in range(0, 20, 5)]
        number = 0
        while not self.stopping.is_set():
            number += 1
            try:
                # map's own futures (what client.map waits on), so that each is accounted for
                futures, _ = client._map_futures(square, [(i,) for i in range(number, number + 2000)], None)
                for index, future in enumerate(futures):
                    self.ledger.expect(future, (number + index) ** 2)
                for key, future in client.get(graph, keys, block=False).items():
                    self.ledger.expect(future, values[key])
                self.ledger.expect(client.submit(fibonacci, client, 7), FIBONACCI[7])
                naps = [client.submit(nap, 0.005, index) for index in range(100)]
                for index, future in enumerate(naps):
                    self.ledger.expect(future, index, may_cancel=index % 2 == 1)
                for future in naps[1::2]:
                    future.cancel()
                for future in futures + naps:
                    if not future.cancelled():
                        future.exception(600)
            except Exception as error:
                self.ledger.problem(f"round {number}: {error!r}")
                self.stopping.wait(1)

    def visitors(self) -> None:
        """Clients that connect, send a large object, run tasks on it and leave."""
        number = 0
        while not self.stopping.is_set():
            number += 1
            data = os.urandom(LARGE_OBJECT_BYTES)
            try:
                with Client(self.address) as client:
                    reference = client.send_object(data, name=f"large-{number}")
                    futures = [client.submit(digest, reference, salt) for salt in range(4)]
                    for salt, future in enumerate(futures):
                        self.ledger.expect(future, digest(data, salt))
                    for future in futures:
                        future.exception(600)
            except Exception as error:
                self.ledger.problem(f"visitor {number}: {error!r}")
            self.stopping.wait(2)

    def churn(self) -> None:
        """Kill the churned worker (its whole tree, SIGKILL) and start another, every churn_seconds."""
        while not self.stopping.wait(self.run.churn_seconds):
            cluster = self.clusters.pop()
            tree = [cluster.pid] + [process.pid for process in cluster.descendants()]
            self.churned_pids.update(tree)
            for pid in tree:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            cluster.popen.wait(10)
            cluster.stop()
            self.start_cluster(1, "churn")
            self.event("worker killed (SIGKILL) and a new one added")

    def restart_scheduler(self) -> None:
        old = self.schedulers[-1]
        os.kill(old.pid, signal.SIGKILL)
        old.popen.wait(10)
        self.event("scheduler killed (SIGKILL)")
        time.sleep(1.0)
        self.start_scheduler()
        self.event("a new scheduler started on the same address")

    # ---- samples ----------------------------------------------------------------------------------------------------

    def processes(self) -> Dict[str, psutil.Process]:
        found: Dict[str, psutil.Process] = {f"client {os.getpid()}": psutil.Process()}
        scheduler = self.schedulers[-1]
        if scheduler.popen.poll() is None:
            found[f"scheduler {scheduler.pid}"] = psutil.Process(scheduler.pid)
        for index, cluster in enumerate(list(self.clusters)):
            prefix = "" if index == 0 else "churned "
            try:
                launcher = psutil.Process(cluster.pid)
                found[f"{prefix}launcher {cluster.pid}"] = launcher
                for agent in launcher.children():
                    found[f"{prefix}worker {agent.pid}"] = agent
                    for process in agent.children(recursive=True):
                        found[f"{prefix}processor {process.pid}"] = process
            except psutil.NoSuchProcess:
                continue
        return found

    def sample(self) -> None:
        now = time.monotonic() - self.start
        measured: Dict[str, Dict[str, float]] = {}
        for name, process in self.processes().items():
            try:
                with process.oneshot():
                    if process.status() == psutil.STATUS_ZOMBIE:
                        continue  # killed (a churned worker), not yet reaped: no memory left to measure
                    measured[name] = {
                        "rss_mib": process.memory_info().rss / 2**20,
                        "fds": process.num_fds(),
                        "threads": process.num_threads(),
                    }
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
        status = self.status(2.0)
        rate = 0.0
        if status is not None:
            completed = status.completed_tasks
            if completed < self._last_completed:  # a new scheduler counts from zero
                self._completed_offset += self._last_completed
            total = self._completed_offset + completed
            previous = self.run.samples[-1] if self.run.samples else None
            # the first sample comes as the load starts: no interval yet to count a rate over
            seconds = now - previous.time if previous else 0.0
            rate = (total - self._total_before) / seconds if seconds > 0 else 0.0
            self._total_before = total
            self._last_completed = completed
        self.run.samples.append(Sample(round(now, 1), measured, round(rate, 1), self.ledger.resolved))
        print(
            f"[{now:7.1f}s] {len(measured)} processes, {rate:,.0f} tasks/s, {self.ledger.resolved:,} futures resolved",
            flush=True,
        )

    # ---- the whole run ----------------------------------------------------------------------------------------------

    def execute(self) -> None:
        duration = self.run.minutes * 60
        self.start_scheduler()
        self.start_cluster(2, "workers")
        self.start_cluster(1, "churn")
        wait_for(lambda: len(getattr(self.status(1.0), "workers", ())) >= 3, 60, "three workers connected")
        self.start = time.monotonic()
        self.event("load started")
        client = Client(self.address)
        threads = [
            threading.Thread(target=self.rounds, args=(client,), name="rounds", daemon=True),
            threading.Thread(target=self.visitors, name="visitors", daemon=True),
            threading.Thread(target=self.churn, name="churn", daemon=True),
        ]
        for thread in threads:
            thread.start()
        restart_at = duration / 2
        restarted = False
        next_sample = 0.0
        while True:
            now = time.monotonic() - self.start
            if now >= duration:
                break
            if not restarted and now >= restart_at:
                restarted = True
                self.restart_scheduler()
            if now >= next_sample:
                self.sample()
                next_sample += self.run.interval
            time.sleep(min(0.5, max(0.0, min(next_sample, restart_at if not restarted else duration) - now)))
        self.stopping.set()
        self.event("load stopped; waiting for the last futures")
        for thread in threads:
            thread.join(600)
        wait_for(lambda: self.ledger.unsettled() == 0, 600, "every future to settle")
        self.sample()
        client.disconnect()

    def stop(self) -> None:
        for process in [*self.clusters, *self.schedulers]:
            process.stop()


# ---- verdict, files and plot ---------------------------------------------------------------------------------------


def growth(run: Run) -> List[Dict[str, Any]]:
    """Per judged process: its floors before and after, and what grew."""
    warmup = run.minutes * 60 * run.warmup_fraction
    end = run.samples[-1].time if run.samples else 0.0
    first_seen: Dict[str, float] = {}
    last_seen: Dict[str, float] = {}
    for sample in run.samples:
        for name in sample.processes:
            first_seen.setdefault(name, sample.time)
            last_seen[name] = sample.time
    verdicts = []
    for name, born in first_seen.items():
        judged_from = born + warmup if name.startswith("scheduler") else warmup
        if name.startswith("churned") or born > warmup and not name.startswith("scheduler"):
            continue  # killed by design, or a spare processor started and stopped as the load asks
        if last_seen[name] < end and not name.startswith("scheduler"):
            continue  # did not live through the judged time (the first scheduler is judged until it is killed)
        values = [s.processes[name] for s in run.samples if name in s.processes and s.time >= judged_from]
        if len(values) < MIN_JUDGED_SAMPLES:
            continue
        half = len(values) // 2
        verdict: Dict[str, Any] = {"process": name, "samples": len(values), "grew": []}
        for metric in ("rss_mib", "fds", "threads"):
            baseline = min(v[metric] for v in values[:half])
            final = min(v[metric] for v in values[half:])
            verdict[metric] = [round(baseline, 1), round(final, 1)]
            if metric == "rss_mib" and final > baseline * (1 + GROWTH_LIMIT):
                verdict["grew"].append(metric)
        verdicts.append(verdict)
    return verdicts


def plot(run: Run, path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot (pip install '.[plot]')")
        return False
    colors = {"client": "tab:blue", "scheduler": "tab:red", "launcher": "tab:gray", "worker": "tab:green"}
    colors.update({"processor": "tab:olive"})
    figure, axes = plt.subplots(4, 1, figsize=(11, 12), sharex=True)
    names = sorted({name for sample in run.samples for name in sample.processes})
    for metric, axis, label in zip(("rss_mib", "fds", "threads"), axes, ("RSS (MiB)", "open files", "threads")):
        for name in names:
            points = [(s.time / 60, s.processes[name][metric]) for s in run.samples if name in s.processes]
            role = name.replace("churned ", "").split()[0]
            style = ":" if name.startswith("churned") else "-"
            axis.plot(*zip(*points), style, color=colors.get(role, "black"), linewidth=1, alpha=0.8)
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=color, label=role) for role, color in colors.items()]
    handles.append(plt.Line2D([], [], color="black", linestyle=":", label="churned worker (dotted)"))
    axes[0].legend(handles=handles, loc="upper left", fontsize=8, ncol=3)
    times = [s.time / 60 for s in run.samples]
    rated = run.samples[1:]  # the first sample has no interval before it, hence no rate
    axes[3].plot([s.time / 60 for s in rated], [s.tasks_per_second for s in rated], color="tab:purple")
    axes[3].set_ylabel("tasks/s (purple)")
    axes[3].set_ylim(bottom=0)
    twin = axes[3].twinx()
    twin.plot(times, [s.futures_resolved for s in run.samples], color="tab:brown")
    twin.set_ylabel("futures resolved (brown)")
    axes[3].set_xlabel("minutes")
    axes[3].grid(alpha=0.3)
    for when, text in run.events:
        if "scheduler killed" in text:
            for axis in axes:
                axis.axvline(when / 60, color="tab:red", linestyle="--", linewidth=1)
    axes[0].set_title(
        f"Soak: {run.minutes:g} min, samples every {run.interval:g}s; dashed: scheduler SIGKILLed and restarted"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return True


def load(path: str) -> Run:
    """A finished run from its soak.json, enough of it to plot."""
    with open(path) as file:
        data = json.load(file)
    summary = data["summary"]
    run = Run(summary["minutes"], summary["interval_seconds"], 0.0, 0.0, 0.0)
    run.samples = [Sample(**sample) for sample in data["samples"]]
    for sample in run.samples:  # files written before zombies were skipped: a killed process measured as RSS 0
        sample.processes = {name: values for name, values in sample.processes.items() if values["rss_mib"] > 0}
    run.events = [tuple(event) for event in summary["events"]]
    return run


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the load runs")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--warmup-fraction", type=float, default=0.25, help="share of the run not judged for growth")
    parser.add_argument("--churn-seconds", type=float, default=60.0, help="seconds between worker kills")
    parser.add_argument("--object-retention", type=float, default=20.0, help="the workers' --object-retention")
    parser.add_argument("--out", default=".", help="directory for soak.json and soak.png")
    parser.add_argument("--python", default=sys.executable, help="interpreter of the scheduler and workers")
    parser.add_argument("--replot", metavar="DIR", help="only draw DIR/soak.png again from DIR/soak.json, and exit")
    args = parser.parse_args(argv)
    if args.replot:
        return 0 if plot(load(os.path.join(args.replot, "soak.json")), os.path.join(args.replot, "soak.png")) else 1
    run = Run(args.minutes, args.interval, args.warmup_fraction, args.churn_seconds, args.object_retention)
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="scaler-soak-") as directory:
        soak = Soak(run, directory, args.python)
        try:
            soak.execute()
        finally:
            soak.stop()
    return report(run, soak.ledger, args.out)


def report(run: Run, ledger: Ledger, out: str) -> int:
    verdicts = growth(run)
    grown = [v for v in verdicts if v["grew"]]
    rates = [s.tasks_per_second for s in run.samples[1:]]
    summary = {
        "minutes": run.minutes,
        "interval_seconds": run.interval,
        "futures_resolved": ledger.resolved,
        "futures_cancelled": ledger.cancelled,
        "problems": ledger.problems,
        "mean_tasks_per_second": round(sum(rates) / len(rates), 1) if rates else 0.0,
        "growth": verdicts,
        "events": run.events,
    }
    with open(os.path.join(out, "soak.json"), "w") as file:
        json.dump({"summary": summary, "samples": [sample.__dict__ for sample in run.samples]}, file, indent=1)
    plotted = plot(run, os.path.join(out, "soak.png"))
    print(f"\n{ledger.resolved:,} futures resolved ({ledger.cancelled:,} cancelled as asked), {len(ledger.problems)}")
    print(f"problem(s); {summary['mean_tasks_per_second']:,} tasks/s on average")
    print(f"{'process (floors: first half -> second half)':<44}{'samples':>8}{'RSS MiB':>16}{'fds':>12}{'threads':>12}")
    for verdict in verdicts:
        rss, fds, threads = verdict["rss_mib"], verdict["fds"], verdict["threads"]
        print(
            f"{verdict['process']:<44}{verdict['samples']:>8}{f'{rss[0]:.1f} -> {rss[1]:.1f}':>16}"
            f"{f'{fds[0]:g} -> {fds[1]:g}':>12}{f'{threads[0]:g} -> {threads[1]:g}':>12}"
            + (f"  GREW: {', '.join(verdict['grew'])}" if verdict["grew"] else "")
        )
    for problem in ledger.problems[:20]:
        print("problem:", problem)
    print(f"wrote {os.path.join(out, 'soak.json')}" + (f" and {os.path.join(out, 'soak.png')}" if plotted else ""))
    passed = not ledger.problems and not grown and ledger.resolved > 0
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
