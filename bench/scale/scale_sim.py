"""Scale-out: the real scheduler against thousands of simulated workers and dozens of simulated clients.

    .venv/bin/python -m bench.scale.scale_sim                                  # the default grid, PyPy scheduler
    .venv/bin/python -m bench.scale.scale_sim --workers 1024 --clients 32 --repeat 3
    .venv/bin/python -m bench.scale.scale_sim --scheduler-python /tmp/base/.venv-pypy/bin/python --scheduler-python \\
        .venv-pypy/bin/python --workers 2,4096 --clients 1 --repeat 3   # two schedulers, cells interleaved

The scheduler runs its real CLI (`python -m scaler.scheduler`) under the interpreter named, in a scratch directory so
that interpreter's own installation of Scaler is what runs, on real ZeroMQ sockets. Its peers are simulated by
scaler/testing/sim_peers.py, thousands to a process: every simulated worker and client has its own DEALER socket and
identity, does the real handshake and heartbeats at the real cadence; workers announce a capacity and answer each task
at once (`--task-ms 0`) or after an exponential time (`--task-ms 10`: mean 10 ms, one task at a time per worker);
clients submit frames of 256 tasks, as the real client does, and check that every result comes back exactly once. The
capacity shares out `--slots` (65,536), at least 64 a worker, so cells hold about the same work in flight: from 64 up
the scheduler refills a full worker 32 tasks at a time, as it does for the real default of 1,000.

For each cell (workers x clients x task duration), in this order:
1. RSS per connected worker: the scheduler's RSS before any peer connects and once every worker is connected.
2. RSS per held task: workers stop answering, clients submit `--held-tasks`; the scheduler's RSS growth per task it
   holds (queued or assigned); then workers answer them all. First, because a PyPy process keeps memory it needed
   once: after the other phases, holding tasks again costs it little new memory.
3. Saturated throughput: each client keeps enough tasks outstanding that tasks always wait in the scheduler for a free
   slot (workers x capacity, plus a backlog); routed tasks/s and the scheduler's CPU time per task (its process: all
   its threads, heartbeats included), after a warm-up, and the CPU the simulated peers used (they share the machine
   with the scheduler). Of the scheduler's CPU, the part its ZeroMQ I/O thread used (the sockets' system calls), and
   how many tasks a frame to a worker carried and how many results a frame to a client: what a frame costs is shared
   by that many tasks.
4. Latency at half that rate: clients together submit at 50% of the measured rate, paced every millisecond (each
   task stamped when it leaves); submit-to-result p50 and p99 as each client saw it, the scheduler's CPU per task at
   that rate (tasks then come a few per frame, not frames full), the peers' CPU, and how late the pacing ran.
   The same at 10% of the rate.
In phases 3 and 4, the "run-queue wait" is the time the scheduler's threads were ready to run but waited for a CPU
(Linux schedstat), per second: on a shared machine it is the other load's share of any latency measured.
5. Idle: every task answered, only heartbeats flow; the scheduler's CPU in % of one core, over at least one heartbeat
   interval as the scheduler names it at its defaults (32 s for 4,097 peers): the peers' heartbeats bunch once the
   machine was busy, so a shorter window sees a random share of them. With it, the heartbeats a second it read.
Every result of every phase is checked (exactly once, a success, for a task that was submitted).

Writes the table (markdown) to stdout and `--table`, every run's figures to `--json`, and a plot to `--plot` (PNG,
matplotlib from the `bench` extra). `tox -e scale` runs the default grid.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import psutil
import zmq

from bench.localcluster import PYPY, interpreter_label, median
from scaler.protocol import SchedulerStatus, decode_frame
from scaler.scheduler.cadence import Cadence
from scaler.scheduler.settings import SchedulerSettings
from scaler.testing.processes import free_tcp_address
from scaler.testing.sim_peers import PeerHost

ROOT = Path(__file__).resolve().parents[2]

WORKERS_PER_HOST = 4096
DEFAULT_WORKERS = "2,16,128,1024,4096"
DEFAULT_CLIENTS = "1,8,32"


def _ints(text: str) -> List[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def _floats(text: str) -> List[float]:
    values = [float(part) for part in text.split(",") if part.strip()]
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected numbers >= 0 separated by commas, got {text!r}")
    return values


class Scheduler:
    """`python -m scaler.scheduler` in a scratch directory (so the interpreter's own Scaler runs), and its monitor."""

    def __init__(
        self,
        python: str,
        workdir: Path,
        extra_args: List[str],
        profile: Optional[Path] = None,
        trace: Optional[Path] = None,
    ) -> None:
        self.address = free_tcp_address()
        self.monitor_address = f"ipc://{workdir}/monitor"
        self.log_path = workdir / "scheduler.log"
        self._log = open(self.log_path, "wb")
        # with a profile path, under vmprof (installed in that interpreter's environment): written when it stops
        profiler = [] if profile is None else ["-m", "vmprof", "--no-native", "-o", str(profile)]
        # with a trace path, under bench/latency/traced_scheduler.py: drains, timers, GC events and tasks, written at
        # the stop
        traced = ROOT / "bench" / "latency" / "traced_scheduler.py"  # run by path: it imports only scaler
        entry = ["-m", "scaler.scheduler"] if trace is None else [str(traced), str(trace)]
        self.popen = subprocess.Popen(
            [python, *profiler, *entry, self.address, "--monitor-address", self.monitor_address]
            + ["--logging-level", "WARNING", "--logging-paths", "/dev/stdout", *extra_args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
        self.pid = self.popen.pid
        self.process = psutil.Process(self.pid)
        self._context = zmq.Context()
        self._monitor = self._context.socket(zmq.SUB)
        self._monitor.setsockopt(zmq.SUBSCRIBE, b"")
        self._monitor.setsockopt(zmq.CONFLATE, 1)
        self._monitor.setsockopt(zmq.LINGER, 0)
        self._monitor.connect(self.monitor_address)
        self.wait_for(lambda status: True, 60, "the scheduler's first status")

    def status(self, timeout: float) -> Optional[SchedulerStatus]:
        if self.popen.poll() is not None:
            raise RuntimeError(f"the scheduler exited with {self.popen.returncode}:\n{self.log()}")
        if not self._monitor.poll(int(timeout * 1000)):
            return None
        (status,) = decode_frame(self._monitor.recv())
        return status

    def wait_for(self, condition, timeout: float, what: str) -> SchedulerStatus:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status(min(1.0, max(0.01, deadline - time.monotonic())))
            if status is not None and condition(status):
                return status
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}")

    def rss(self) -> int:
        return self.process.memory_info().rss

    def cpu(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        self._monitor.close()
        self._context.term()
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self._log.close()


def heartbeats(status: SchedulerStatus) -> int:
    return sum(counter.value for counter in status.received if counter.name in ("WorkerHeartbeat", "ClientHeartbeat"))


def idle_interval_seconds(peers: int) -> float:
    """The heartbeat interval the scheduler names to this many peers at its default settings."""
    settings = SchedulerSettings("tcp://127.0.0.1:1")
    cadence = Cadence(
        settings.heartbeat_interval_seconds,
        settings.worker_timeout_seconds,
        settings.client_timeout_seconds,
        settings.heartbeats_per_second,
    )
    cadence.fit(peers)
    return cadence.interval_ms / 1000


def messages_per_task(before: SchedulerStatus, after: SchedulerStatus) -> Dict[str, float]:
    """Messages the scheduler received and sent between two statuses, by type, per task completed meanwhile."""
    tasks = max(1, after.completed_tasks - before.completed_tasks)
    figures = {}
    for way in ("received", "sent"):
        earlier = {counter.name: counter.value for counter in getattr(before, way)}
        for counter in getattr(after, way):
            figures[f"{way} {counter.name}"] = round((counter.value - earlier.get(counter.name, 0)) / tasks, 4)
    return figures


def tasks_per_frame(before: List[Dict[str, Any]], after: List[Dict[str, Any]]) -> float:
    """Tasks the simulated workers answered per frame they read, between two of their hosts' stats."""
    tasks = sum(a["answered"] - b["answered"] for a, b in zip(after, before))
    return tasks / max(1, sum(a["frames"] - b["frames"] for a, b in zip(after, before)))


def held_tasks(status: SchedulerStatus) -> int:
    return sum(counter.value for counter in status.task_states if counter.name in ("waiting", "ready", "assigned"))


def measure_cell(
    scheduler_python: str, workers: int, clients: int, task_ms: float, args: argparse.Namespace
) -> Dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="scaler-scale-"))
    profile = None
    if args.profile_dir is not None:
        args.profile_dir.mkdir(parents=True, exist_ok=True)
        tag = Path(scheduler_python).parent.parent.parent.name  # the checkout the interpreter's environment is in
        profile = args.profile_dir / f"scheduler-{tag}-{workers}w-{clients}c-{task_ms:g}ms.prof"
    scheduler = Scheduler(scheduler_python, workdir, args.scheduler_arg, profile)
    hosts: List[PeerHost] = []
    capacity = args.capacity or max(64, args.slots // workers)
    figures: Dict[str, Any] = {"workers": workers, "clients": clients, "task_ms": task_ms, "capacity": capacity}
    try:
        time.sleep(1.0)  # let the scheduler's start-up (imports, JIT of the first calls) settle before the baseline
        rss_empty = scheduler.rss()
        n_hosts = math.ceil(workers / WORKERS_PER_HOST)
        worker_hosts = []
        for index in range(n_hosts):
            count = workers // n_hosts + (1 if index < workers % n_hosts else 0)
            worker_hosts.append(
                PeerHost(
                    args.peer_python,
                    ["workers", scheduler.address, "--count", str(count), "--capacity", str(capacity)]
                    + ["--mean-ms", str(task_ms), "--name", str(index), "--seed", str(index + 1)],
                    workdir / f"workers{index}.log",
                )
            )
        hosts.extend(worker_hosts)
        for host in worker_hosts:
            host.expect("connected", timeout=120)
        scheduler.wait_for(lambda s: len(s.workers) >= workers, 60, f"{workers} workers at the scheduler")
        time.sleep(2.0)
        figures["rss_per_worker_kib"] = (scheduler.rss() - rss_empty) / workers / 1024
        client_host = PeerHost(
            args.peer_python,
            ["clients", scheduler.address, "--count", str(clients), "--scheduler-pid", str(scheduler.pid)]
            + [arg for host in worker_hosts for arg in ("--watch-pid", str(host.pid))],
            workdir / "clients.log",
        )
        hosts.append(client_host)
        client_host.expect("connected", timeout=60)

        # 2. memory per held task, first: a PyPy process keeps the memory it once needed, so later phases would hide it
        if args.held_tasks > 0 and not task_ms:
            for host in worker_hosts:
                host.ask({"cmd": "hold", "on": True})
            rss_before = scheduler.rss()
            client_host.ask({"cmd": "burst", "tasks": args.held_tasks})
            scheduler.wait_for(lambda s: held_tasks(s) >= args.held_tasks, 120, f"{args.held_tasks} tasks held")
            time.sleep(1.0)
            figures["rss_per_held_task_bytes"] = (scheduler.rss() - rss_before) / args.held_tasks
            for host in worker_hosts:
                host.ask({"cmd": "hold", "on": False})
            client_host.ask({"cmd": "drain", "timeout": 300})
            client_host.expect("drained", timeout=310)

        # 3. saturated throughput: tasks always wait for a slot
        # 0 ms tasks: every slot taken and a backlog waiting in the scheduler; timed tasks: a few per worker suffice
        in_flight = workers * capacity + args.backlog if not task_ms else 4 * workers + 256 * clients
        window = math.ceil(in_flight / clients / 256) * 256
        # over the warm-up and the measured phase: messages per task by type, tasks per frame to the workers
        frames_before = [host.ask({"cmd": "stats"}) for host in worker_hosts]
        counts_before = scheduler.wait_for(lambda status: True, 5, "a status")
        client_host.ask({"cmd": "closed", "window": window, "warmup": args.warmup, "seconds": args.seconds})
        saturated = client_host.expect("measured", timeout=args.warmup + args.seconds + 120)
        figures["window_per_client"] = window
        frames_after = [host.ask({"cmd": "stats"}) for host in worker_hosts]
        counts_after = scheduler.wait_for(lambda status: True, 5, "a status")
        figures["messages_per_task"] = messages_per_task(counts_before, counts_after)
        figures["tasks_per_worker_frame"] = tasks_per_frame(frames_before, frames_after)
        figures["scheduler_io_cpu_us_per_task"] = saturated["scheduler_io_cpu_us_per_task"]
        figures["results_per_client_frame"] = saturated["results_per_client_frame"]
        figures["tasks_per_second"] = saturated["tasks_per_second"]
        figures["scheduler_cpu_us_per_task"] = saturated["scheduler_cpu_us_per_task"]
        figures["peers_cpu_cores"] = saturated["peers_cpu_cores"]
        figures["scheduler_cpu_cores"] = saturated["scheduler_cpu_cores"]
        figures["scheduler_waited_share"] = saturated["scheduler_waited_share"]
        figures["saturated_latency_p50_ms"] = saturated["latency_p50_ms"]
        client_host.ask({"cmd": "drain", "timeout": 120})
        client_host.expect("drained", timeout=130)

        # 4. latency at half the saturating rate, and at a tenth of it
        for fraction, suffix in ((0.5, ""), (0.1, "_10pct")) if args.latency else ():
            rate = saturated["tasks_per_second"] * fraction
            client_host.ask({"cmd": "open", "rate": rate, "warmup": 1.0, "seconds": args.seconds})
            paced = client_host.expect("measured", timeout=args.seconds + 120)
            figures["paced_rate" + suffix] = paced["tasks_per_second"]
            figures["latency_p50_ms" + suffix] = paced["latency_p50_ms"]
            figures["latency_p99_ms" + suffix] = paced["latency_p99_ms"]
            figures["paced_scheduler_cpu_us_per_task" + suffix] = paced["scheduler_cpu_us_per_task"]
            figures["paced_peers_cpu_cores" + suffix] = paced["peers_cpu_cores"]
            # what else delayed the tasks: the machine's other load (run-queue waits) and the clients' own pacing
            figures["paced_scheduler_waited_share" + suffix] = paced["scheduler_waited_share"]
            figures["paced_peers_waited_share" + suffix] = paced["peers_waited_share"]
            figures["pacing_lag_p99_ms" + suffix] = paced["pacing_lag_p99_ms"]
            figures["paced_outstanding_at_end" + suffix] = paced["outstanding_at_end"]
            client_host.ask({"cmd": "drain", "timeout": 120})
            client_host.expect("drained", timeout=130)

        # 5. idle: heartbeats only, over whole heartbeat intervals: the peers' heartbeats are not evenly spread (those
        # held back while the machine was busy leave together), so a window shorter than an interval (16 s and more
        # past 2,048 peers) sees a random share of them
        if args.idle_seconds > 0 and not task_ms:  # the same with timed tasks: measured once
            time.sleep(1.0)
            seconds = max(args.idle_seconds, idle_interval_seconds(workers + clients))
            first = scheduler.wait_for(lambda status: True, 5, "a status")
            before, start = scheduler.cpu(), time.monotonic()
            time.sleep(seconds)
            figures["idle_cpu_percent"] = (scheduler.cpu() - before) / (time.monotonic() - start) * 100
            last = scheduler.wait_for(lambda status: True, 5, "a status")
            figures["idle_heartbeats_per_second"] = (heartbeats(last) - heartbeats(first)) / (
                (last.time_us - first.time_us) / 1e6
            )
            figures["idle_seconds"] = seconds

        figures["checked_results"] = client_host.ask({"cmd": "stats"})["outstanding"] == 0
        figures["scheduler_rss_mib"] = scheduler.rss() / 2**20
    except BaseException:
        sys.stderr.write(f"\n--- scheduler log ---\n{scheduler.log()}\n")
        for host in hosts:
            sys.stderr.write(f"--- {host.log_path.name} ---\n{host.log()}\n")
        raise
    finally:
        for host in reversed(hosts):
            host.stop()
        scheduler.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return figures


COLUMNS = [
    ("workers", "workers", "{:,}"),
    ("clients", "clients", "{:,}"),
    ("task_ms", "task ms", "{:g}"),
    ("capacity", "capacity", "{:,}"),
    ("tasks_per_second", "routed tasks/s", "{:,.0f}"),
    ("scheduler_cpu_us_per_task", "sched CPU µs/task", "{:.2f}"),
    ("scheduler_io_cpu_us_per_task", "of it ZeroMQ I/O thread", "{:.2f}"),
    ("tasks_per_worker_frame", "tasks per frame to a worker", "{:.1f}"),
    ("results_per_client_frame", "results per frame to a client", "{:.1f}"),
    ("peers_cpu_cores", "peers' CPU (cores)", "{:.2f}"),
    ("scheduler_waited_share", "sched run-queue wait", "{:.0%}"),
    ("latency_p50_ms", "p50 ms @50%", "{:.2f}"),
    ("latency_p99_ms", "p99 ms @50%", "{:.2f}"),
    ("paced_scheduler_cpu_us_per_task", "sched µs/task @50%", "{:.2f}"),
    ("paced_peers_cpu_cores", "peers' CPU @50%", "{:.2f}"),
    ("paced_scheduler_waited_share", "sched run-queue wait @50%", "{:.0%}"),
    ("latency_p50_ms_10pct", "p50 ms @10%", "{:.2f}"),
    ("latency_p99_ms_10pct", "p99 ms @10%", "{:.2f}"),
    ("idle_cpu_percent", "idle CPU %", "{:.2f}"),
    ("idle_heartbeats_per_second", "idle heartbeats/s", "{:.0f}"),
    ("rss_per_worker_kib", "RSS/worker KiB", "{:.1f}"),
    ("rss_per_held_task_bytes", "RSS/held task B", "{:,.0f}"),
]


def table(rows: List[Dict[str, Any]], schedulers: List[str]) -> str:
    header = (["scheduler"] if len(schedulers) > 1 else []) + [title for _, title, _ in COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for row in rows:
        cells = [row["scheduler"]] if len(schedulers) > 1 else []
        for key, _, fmt in COLUMNS:
            value = row.get(key)
            cells.append("—" if value is None else fmt.format(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: List[Dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("tasks_per_second", "routed tasks/s (saturated)"),
        ("scheduler_cpu_us_per_task", "scheduler CPU µs per task"),
        ("idle_cpu_percent", "scheduler CPU % of a core, idle"),
        # beside throughput: how much of the time the scheduler was ready to run but got no CPU (the machine's load)
        ("scheduler_waited_share", "scheduler run-queue wait, saturated (1 = 1 s/s)"),
    ]
    figure, axes = plt.subplots(2, 2, figsize=(11, 8))
    series: Dict[Tuple[str, int, float], List[Dict[str, Any]]] = {}
    for row in rows:
        series.setdefault((row["scheduler"], row["clients"], row["task_ms"]), []).append(row)
    for axis, (key, label) in zip(axes.flat, panels):
        for (scheduler, clients, task_ms), points in sorted(series.items()):
            points = sorted((p for p in points if p.get(key) is not None), key=lambda p: p["workers"])
            if not points:
                continue
            name = f"{clients} client{'s' if clients > 1 else ''}" + (f", {task_ms:g} ms tasks" if task_ms else "")
            if len({r["scheduler"] for r in rows}) > 1:
                name = f"{scheduler}: {name}"
            axis.plot([p["workers"] for p in points], [p[key] for p in points], marker="o", label=name)
        axis.set_xscale("log", base=2)
        axis.set_xlabel("workers")
        axis.set_title(label)
        axis.grid(True, alpha=0.3)
        axis.set_ylim(bottom=0)
    axes.flat[0].legend(fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def capacity_text(args: argparse.Namespace) -> str:
    if args.capacity:
        return f"capacity {args.capacity} per worker"
    return f"{args.slots:,} slots shared by the workers (at least 64 each)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scheduler-python", action="append", help=f"repeatable, cells interleaved (default {PYPY})")
    parser.add_argument("--peer-python", default=None, help="runs the simulated peers (default: PyPy if present)")
    parser.add_argument("--workers", type=_ints, default=_ints(DEFAULT_WORKERS), help="comma-separated counts")
    parser.add_argument("--clients", type=_ints, default=_ints(DEFAULT_CLIENTS), help="comma-separated counts")
    parser.add_argument("--task-ms", type=_floats, default=[0.0], help="0: answer at once; M: exponential, mean M ms")
    parser.add_argument("--slots", type=int, default=65536, help="the workers' capacities add up to this")
    parser.add_argument("--capacity", type=int, default=0, help="tasks each worker accepts at once (0: by --slots)")
    parser.add_argument("--backlog", type=int, default=16384, help="tasks kept waiting beyond the workers' slots")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of load before measuring (PyPy's JIT)")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds measured per phase")
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=5.0,
        help="idle CPU measured over at least this long, and one heartbeat interval (0: skip)",
    )
    parser.add_argument("--held-tasks", type=int, default=100_000, help="for RSS per held task (0: skip)")
    parser.add_argument("--no-latency", dest="latency", action="store_false", help="skip the half-rate phase")
    parser.add_argument("--repeat", type=int, default=1, help="runs of every cell, interleaved; medians reported")
    parser.add_argument("--scheduler-arg", action="append", default=[], help="passed to the scheduler, repeatable")
    parser.add_argument("--profile-dir", type=Path, help="run the scheduler under vmprof, one profile per cell here")
    parser.add_argument("--json", type=Path, help="every run's figures")
    parser.add_argument("--table", type=Path, help="the markdown table")
    parser.add_argument("--plot", type=Path, help="a PNG of the table")
    parser.add_argument("--render", type=Path, action="append", help="no run: table and plot from earlier --json files")
    args = parser.parse_args()
    if args.render:
        render([row for path in args.render for row in json.loads(path.read_text())], args)
        return
    signal.signal(
        signal.SIGTERM, lambda signum, frame: sys.exit(f"scale_sim: {signal.Signals(signum).name}")
    )  # cleanup
    if args.capacity < 0 or args.slots < 1 or args.repeat < 1 or args.seconds <= 0 or args.warmup < 0:
        parser.error("--slots and --repeat must be >= 1, --capacity >= 0, --seconds > 0, --warmup >= 0")
    if args.peer_python is None:
        args.peer_python = PYPY if Path(PYPY).exists() else sys.executable
    # absolute (not resolved: a venv's python is a symlink that must stay one), since the scheduler runs elsewhere
    pythons = [str(Path(python).absolute()) for python in args.scheduler_python or [PYPY]]
    labels = {
        python: f"{interpreter_label(python)} ({python})" if len(pythons) > 1 else interpreter_label(python)
        for python in pythons
    }
    cells = [(w, c, t) for t in args.task_ms for c in args.clients for w in args.workers]
    runs: Dict[Tuple[str, int, int, float], List[Dict[str, Any]]] = {}
    print(
        f"scale_sim: {len(cells)} cell(s) x {len(pythons)} scheduler(s) x {args.repeat}; peers on "
        f"{interpreter_label(args.peer_python)}, {capacity_text(args)}",
        flush=True,
    )
    for attempt in range(args.repeat):
        for workers, clients, task_ms in cells:
            for python in pythons:
                started = time.monotonic()
                try:
                    figures = measure_cell(python, workers, clients, task_ms, args)
                except (RuntimeError, TimeoutError) as error:  # a scheduler that cannot keep up: say so, go on
                    print(f"run {attempt + 1}: {labels[python]}, {workers} workers, {clients} clients: {error}")
                    runs.setdefault((python, workers, clients, task_ms), []).append({"error": str(error)})
                    continue
                figures["scheduler"] = labels[python]
                runs.setdefault((python, workers, clients, task_ms), []).append(figures)
                print(
                    f"run {attempt + 1}: {labels[python]}, {workers} workers, {clients} clients, {task_ms:g} ms: "
                    f"{figures['tasks_per_second']:,.0f} tasks/s, {figures['scheduler_cpu_us_per_task']:.2f} µs/task, "
                    f"p99 {figures.get('latency_p99_ms') or 0:.2f} ms, idle {figures.get('idle_cpu_percent', 0):.2f}% "
                    f"({time.monotonic() - started:.0f} s)",
                    flush=True,
                )
    rows = []
    for (python, workers, clients, task_ms), figures in runs.items():
        row: Dict[str, Any] = {"scheduler": labels[python], "workers": workers, "clients": clients, "task_ms": task_ms}
        row["capacity"] = args.capacity or max(64, args.slots // workers)
        for key, _, _ in COLUMNS[4:]:
            values = [f[key] for f in figures if f.get(key) is not None]
            row[key] = median(values) if values else None
        row["failed_runs"] = sum(1 for f in figures if "error" in f)
        row["runs"] = figures
        rows.append(row)
    print(f"\nmedians of {args.repeat}, {capacity_text(args)}")
    render(rows, args)


def render(rows: List[Dict[str, Any]], args: argparse.Namespace) -> None:
    """The table (stdout, --table), every run's figures (--json) and the plot (--plot) of these rows."""
    rows.sort(key=lambda r: (r["task_ms"], r["clients"], r["workers"], r["scheduler"]))
    text = table(rows, sorted({row["scheduler"] for row in rows}))
    failures = [row for row in rows if row["failed_runs"]]
    if failures:
        text += "\n\n" + "\n".join(
            f"{row['scheduler']}, {row['workers']} workers, {row['clients']} clients: {row['failed_runs']} of "
            f"{len(row['runs'])} runs failed ({next(f['error'] for f in row['runs'] if 'error' in f)[:200]})"
            for row in failures
        )
    print(text)
    if args.table:
        args.table.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    if args.plot:
        plot(rows, args.plot, f"Scaler scheduler scale-out (simulated peers, {capacity_text(args)})")
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
