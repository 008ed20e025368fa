"""Scheduler-only throughput: synthetic peers cost next to nothing, so the scheduler is the only real work.

    .venv/bin/python -m bench.throughput.scheduler_only                    # scheduler on CPython and on PyPy, one table
    .venv/bin/python -m bench.throughput.scheduler_only --tasks 50000 --scheduler-python .venv-pypy/bin/python
    .venv/bin/python -m bench.throughput.scheduler_only --workers 1024  # any number: the workers share one process

The scheduler runs its real CLI under each interpreter, on real ZeroMQ sockets. The synthetic workers are the simulated
workers of scaler/testing/sim_peers.py, all in one process, each with its own socket and identity (Hello, heartbeats):
they answer every Task at once with a TaskResult spliced from a template, never decoding a task. The synthetic client
(this process) sends pre-encoded frames of 256 tasks, as the real client batches them, and checks that every task's
result came back exactly once. Reported: routed tasks/s (a task in, to a worker, its result back to the client), and the
scheduler's own CPU time per task, which stays meaningful on a machine shared with other work. A warm-up round runs
first (PyPy's JIT). bench/scale/scale_sim.py measures the same with thousands of workers and dozens of clients.
"""

from __future__ import annotations

import argparse
import json
import struct
import time
from pathlib import Path
from typing import Dict, Iterator, List, Set

import psutil
import zmq

from bench.localcluster import CPYTHON, PYPY, LocalCluster, interpreter_label, median
from scaler.io.sockets import make_identity
from scaler.protocol import (
    PROTOCOL_VERSION,
    ClientHeartbeat,
    Hello,
    Role,
    TaskResult,
    decode_frame,
    encode,
)
from scaler.testing.sim_peers import RESULT_PREFIX, RESULT_SUFFIX, TASK_PREFIX, TASK_SUFFIX, PeerHost

_SEGMENT_HEADER = struct.Struct("<II")  # segment count - 1, words of the only segment
TASKS_PER_FRAME = 256
HEARTBEAT_SECONDS = 0.5


def task_message(number: int) -> bytes:
    """A no-op task as the real client encodes one (16-byte ids, one small inline pickled argument)."""
    return TASK_PREFIX + number.to_bytes(16, "big") + TASK_SUFFIX


def result_message(number: int) -> bytes:
    return RESULT_PREFIX + number.to_bytes(16, "big") + RESULT_SUFFIX


def split_messages(frame: bytes) -> Iterator[bytes]:
    """The single-segment messages of a frame (what our encoder writes), without decoding them."""
    offset = 0
    size = len(frame)
    while offset < size:
        segments, words = _SEGMENT_HEADER.unpack_from(frame, offset)
        if segments:  # never written by fastpath; decode_frame would handle it, this benchmark need not
            raise ValueError("multi-segment message in a benchmark frame")
        end = offset + 8 + words * 8
        yield frame[offset:end]
        offset = end


# ---------------------------------------------------------------------------------------------------------------------
# the synthetic client and the measurement


def route(dealer: zmq.Socket, frames: List[bytes], expected: Set[bytes], timeout: float) -> None:
    """Send every frame, then receive until every expected result arrived once; raises on anything else."""
    heartbeat = encode(ClientHeartbeat(sent_at_us=1))
    next_heartbeat = time.monotonic() + HEARTBEAT_SECONDS
    deadline = time.monotonic() + timeout
    for frame in frames:
        dealer.send(frame, copy=False)
    remaining = len(expected)
    while remaining:
        if dealer.poll(int(HEARTBEAT_SECONDS * 1000)):
            while True:
                try:
                    frame = dealer.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                for message in split_messages(frame):
                    if message in expected:
                        expected.discard(message)
                        remaining -= 1
                    else:
                        (decoded,) = decode_frame(message)
                        if isinstance(decoded, TaskResult):
                            raise AssertionError(f"unexpected or repeated result: {decoded!r}")
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(f"{remaining} results missing after {timeout}s")
        if now >= next_heartbeat:
            dealer.send(heartbeat)
            next_heartbeat = now + HEARTBEAT_SECONDS


def task_frames(first: int, last: int) -> List[bytes]:
    return [
        b"".join(task_message(n) for n in range(start, min(start + TASKS_PER_FRAME, last)))
        for start in range(first, last, TASKS_PER_FRAME)
    ]


def measure(
    scheduler_python: str, peer_python: str, tasks: int, warmup: int, workers: int, capacity: int
) -> Dict[str, float]:
    total = warmup + tasks
    with LocalCluster(scheduler_python, workers=0) as cluster:
        host = PeerHost(
            peer_python,
            ["workers", cluster.address, "--count", str(workers), "--capacity", str(capacity)],
            Path(cluster.monitor_address[len("ipc://") :]).parent / "workers.log",
        )
        try:
            host.expect("connected", timeout=120)
            cluster.wait_for_workers(workers)
            return route_all(cluster, tasks, warmup, total)
        finally:
            host.stop()


def route_all(cluster: LocalCluster, tasks: int, warmup: int, total: int) -> Dict[str, float]:
    """The synthetic client: connects, routes the warm-up, then the measured tasks."""
    context = zmq.Context.instance()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, make_identity("C"))
    dealer.setsockopt(zmq.SNDHWM, 0)
    dealer.setsockopt(zmq.RCVHWM, 0)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(cluster.address)
    try:
        dealer.send(encode(Hello(protocol_version=PROTOCOL_VERSION, role=Role.client, name="synthetic")))
        (reply,) = decode_frame(dealer.recv())
        if not reply.accepted:
            raise RuntimeError(f"scheduler refused the client: {reply.reason}")
        if warmup:
            route(dealer, task_frames(0, warmup), {result_message(n) for n in range(warmup)}, timeout=300)
        frames = task_frames(warmup, total)
        expected = {result_message(n) for n in range(warmup, total)}
        scheduler = psutil.Process(cluster.scheduler_pid)
        cpu_before = sum(scheduler.cpu_times()[:2])
        start = time.perf_counter()
        route(dealer, frames, expected, timeout=600)
        seconds = time.perf_counter() - start
        cpu_seconds = sum(scheduler.cpu_times()[:2]) - cpu_before
    finally:
        dealer.close()
    return {
        "seconds": seconds,
        "tasks_per_second": tasks / seconds,
        "scheduler_cpu_us_per_task": cpu_seconds / tasks * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scheduler-python", action="append", help=f"repeatable (default: {CPYTHON} and {PYPY})")
    parser.add_argument("--tasks", type=int, default=200_000, help="tasks routed in the measured round")
    parser.add_argument("--warmup", type=int, default=50_000, help="tasks routed first, not measured")
    parser.add_argument("--workers", type=int, default=2, help="synthetic workers")
    parser.add_argument("--capacity", type=int, default=1000, help="tasks each synthetic worker accepts at once")
    parser.add_argument("--peer-python", default=CPYTHON, help="runs the synthetic workers (all in one process)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    args = parser.parse_args()
    if args.tasks < 1 or args.warmup < 0 or args.workers < 1 or args.repeat < 1 or args.capacity < 1:
        parser.error("--tasks, --workers, --repeat and --capacity must be >= 1, --warmup >= 0")
    pythons = args.scheduler_python or [CPYTHON, PYPY]
    runs: Dict[str, List[Dict[str, float]]] = {python: [] for python in pythons}
    for attempt in range(args.repeat):  # interleaved, so machine noise spreads over both interpreters alike
        for python in pythons:
            figures = measure(python, args.peer_python, args.tasks, args.warmup, args.workers, args.capacity)
            runs[python].append(figures)
            print(
                f"run {attempt + 1}: {python}: {figures['tasks_per_second']:,.0f} tasks/s, "
                f"scheduler CPU {figures['scheduler_cpu_us_per_task']:.1f} us/task",
                flush=True,
            )
    rows = []
    for python, figures in runs.items():
        row = {"scheduler": interpreter_label(python), "runs": figures}
        for key in ("seconds", "tasks_per_second", "scheduler_cpu_us_per_task"):
            row[key] = median([f[key] for f in figures])
        rows.append(row)
    print(
        f"\nScheduler only: {args.tasks:,} tasks routed after {args.warmup:,} warm-up, {args.workers} synthetic "
        f"workers; medians of {args.repeat}"
    )
    header = f"{'scheduler':<22}{'routed tasks/s':>16}{'sched CPU us/task':>19}{'vs first':>10}"
    print(header)
    print("-" * len(header))
    for row in rows:
        ratio = row["tasks_per_second"] / rows[0]["tasks_per_second"]
        print(
            f"{row['scheduler']:<22}{row['tasks_per_second']:>16,.0f}{row['scheduler_cpu_us_per_task']:>19.1f}"
            f"{ratio:>9.2f}x"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
