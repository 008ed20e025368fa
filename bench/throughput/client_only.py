"""The client alone: its CPU per task for `map` and for a `submit` loop, against a fake scheduler that answers at once.

    .venv/bin/python -m bench.throughput.client_only                          # fake scheduler on PyPy, 100,000 tasks
    .venv/bin/python -m bench.throughput.client_only --tasks 20000 --repeat 5 --peer-python .venv/bin/python

With many workers, one client is what bounds one user's throughput, so its own cost per task matters apart from the
cluster's. The fake scheduler (this file with --serve, in another process) is a real ROUTER speaking the protocol: it
answers the handshake and heartbeats, and each frame of tasks with one frame of results, each result's payload the
task's first argument (so a no-op's result is its argument, which the benchmark checks). It decodes each task, which
under PyPy costs it a fraction of what the client spends. Reported per task: the client's CPU time (both of its
threads), the fake scheduler's, and wall time; medians of --repeat runs, workloads interleaved.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path
from typing import Dict, List

import psutil
import zmq

from bench.localcluster import median
from scaler.protocol import (
    PROTOCOL_VERSION,
    ClientDisconnect,
    ClientHeartbeat,
    DisconnectReply,
    HeartbeatEcho,
    Hello,
    HelloReply,
    Task,
    TaskResult,
    TaskStatus,
    decode_frame,
    encode_many,
)

ROOT = Path(__file__).resolve().parents[2]
PYPY = os.environ.get("SCALER_PYPY") or str(ROOT / ".venv-pypy" / "bin" / "python")
_SUCCESS = TaskStatus.success


def serve(address: str, results_per_frame: int) -> None:
    """The fake scheduler: answer until the client disconnects."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(address)
    print("listening", flush=True)
    while True:
        peer, frame = router.recv_multipart(copy=True)
        answers: List[object] = []
        done = False
        for message in decode_frame(frame):
            kind = message.__class__
            if kind is Task:
                payload = message.args[0].data if message.args else b""
                answers.append(TaskResult(task_id=message.task_id, status=_SUCCESS, payload=payload))
            elif kind is Hello:
                answers.append(HelloReply(protocol_version=PROTOCOL_VERSION, accepted=True, heartbeat_interval_ms=1000))
            elif kind is ClientHeartbeat:
                answers.append(HeartbeatEcho(sent_at_us=message.sent_at_us))
            elif kind is ClientDisconnect:
                answers.append(DisconnectReply(accepted=True))
                done = True
        for start in range(0, len(answers), results_per_frame):
            router.send_multipart([peer, encode_many(answers[start : start + results_per_frame])])
        if done:
            time.sleep(0.2)  # lets the reply leave
            router.close()
            context.term()
            return


def noop(value: int) -> int:
    return value


def run_map(client, tasks: int) -> None:
    if client.map(noop, [(i,) for i in range(tasks)]) != list(range(tasks)):
        raise AssertionError("map: wrong results")


def run_submit(client, tasks: int) -> None:
    futures = [client.submit(noop, i) for i in range(tasks)]
    if [future.result() for future in futures] != list(range(tasks)):
        raise AssertionError("submit: wrong results")


WORKLOADS = {"map": run_map, "submit": run_submit}


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def measure(peer_python: str, workload: str, tasks: int, results_per_frame: int) -> Dict[str, float]:
    from scaler import Client
    from scaler.testing.processes import free_tcp_address

    address = free_tcp_address()
    peer = subprocess.Popen(
        [peer_python, "-m", "bench.throughput.client_only", "--serve", address]
        + ["--results-per-frame", str(results_per_frame)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,  # where `-m bench...` finds this checkout
    )
    try:
        if peer.stdout.readline().strip() != "listening":
            raise RuntimeError("the fake scheduler did not start")
        with Client(address) as client:
            WORKLOADS[workload](client, 1000)  # warm-up (and the peer's JIT)
            me, other = psutil.Process(), psutil.Process(peer.pid)
            client_before, peer_before = _cpu(me), _cpu(other)
            start = time.perf_counter()
            WORKLOADS[workload](client, tasks)
            wall = time.perf_counter() - start
            client_cpu, peer_cpu = _cpu(me) - client_before, _cpu(other) - peer_before
        peer.wait(timeout=10)
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()
    return {"client_us": client_cpu / tasks * 1e6, "peer_us": peer_cpu / tasks * 1e6, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), action="append", help="default: map and submit")
    parser.add_argument("--peer-python", default=PYPY, help=f"the fake scheduler's interpreter (default: {PYPY})")
    parser.add_argument(
        "--results-per-frame",
        type=int,
        default=32,
        help="results per frame to the client (default 32: a cluster's results come back a few dozen at a time)",
    )
    parser.add_argument("--serve", metavar="ADDRESS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.results_per_frame)
        return
    if args.tasks < 1 or args.repeat < 1 or args.results_per_frame < 1:
        parser.error("--tasks, --repeat and --results-per-frame must be >= 1")
    workloads = args.workload or ["map", "submit"]
    runs: Dict[str, List[Dict[str, float]]] = {workload: [] for workload in workloads}
    for attempt in range(args.repeat):
        for workload in workloads:
            figures = measure(args.peer_python, workload, args.tasks, args.results_per_frame)
            runs[workload].append(figures)
            print(
                f"run {attempt + 1}: {workload}: client {figures['client_us']:.2f} us/task, "
                f"fake scheduler {figures['peer_us']:.2f} us/task, wall {figures['wall_s']:.2f} s",
                flush=True,
            )
    print(
        f"\nclient alone, {args.tasks:,} no-op tasks against a fake scheduler ({args.results_per_frame} results per "
        f"frame); medians of {args.repeat}"
    )
    header = f"{'API':<8}{'client us/task':>16}{'fake scheduler us/task':>24}{'wall s':>9}"
    print(header)
    print("-" * len(header))
    for workload, figures in runs.items():
        print(
            f"{workload:<8}{median([f['client_us'] for f in figures]):>16.2f}"
            f"{median([f['peer_us'] for f in figures]):>24.2f}{median([f['wall_s'] for f in figures]):>9.2f}"
        )


if __name__ == "__main__":
    main()
