"""What idle workers cost any ZeroMQ scheduler here: the floor under the scheduler's idle CPU.

    .venv/bin/python -m bench.scale.heartbeat_floor --workers 4096

Starts, under the interpreter named, a bare ROUTER that does only what heartbeats need (accepts Hello, decodes each
heartbeat, and with --echo, the default, answers HeartbeatEcho as the protocol asks), connects the same simulated
workers as bench/scale/scale_sim.py (scaler/testing/sim_peers.py, one heartbeat a second each), and reports the CPU that
process used while they idle, next to the real scheduler's. Nothing in the router is Scaler's: what it costs is libzmq's
I/O thread, the kernel's loopback TCP and pyzmq's calls.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from bench.localcluster import PYPY
from scaler.testing.processes import free_tcp_address
from scaler.testing.sim_peers import PeerHost

ROOT = Path(__file__).resolve().parents[2]
ME = ["-m", "bench.scale.heartbeat_floor"]  # how this module runs itself as the bare router


def router(address: str, echo: bool, interval: float) -> None:
    import zmq

    from scaler.protocol import (
        PROTOCOL_VERSION,
        HeartbeatEcho,
        Hello,
        HelloReply,
        WorkerHeartbeat,
        decode_frame,
        encode,
    )

    sock = zmq.Context().socket(zmq.ROUTER)
    for option, value in ((zmq.SNDHWM, 0), (zmq.RCVHWM, 0), (zmq.BACKLOG, 4096)):
        sock.setsockopt(option, value)
    sock.bind(address)
    reply = encode(
        HelloReply(protocol_version=PROTOCOL_VERSION, accepted=True, heartbeat_interval_ms=round(interval * 1000))
    )
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    while True:
        poller.poll(1000)
        while True:
            try:
                peer = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            (message,) = decode_frame(sock.recv())
            if isinstance(message, Hello):
                sock.send_multipart([peer, reply])
            elif echo and isinstance(message, WorkerHeartbeat):  # not the WorkerDisconnects at the end
                sock.send_multipart([peer, encode(HeartbeatEcho(sent_at_us=message.sent_at_us))])


def idle_cpu(python: str, command: list, workers: int, seconds: float, directory: Path) -> float:
    address = free_tcp_address()
    # this module as the bare router finds the checkout's bench/ through PYTHONPATH: it runs in `directory`
    env = dict(os.environ, PYTHONPATH=str(ROOT)) if command[:2] == ME else None
    process = subprocess.Popen([python, *command, address], cwd=directory, env=env)
    host = None
    try:
        time.sleep(2.0)
        host = PeerHost(PYPY, ["workers", address, "--count", str(workers)], directory / "workers.log")
        host.expect("connected", timeout=120)
        time.sleep(10.0)  # PyPy compiles what it runs often
        measured = psutil.Process(process.pid)
        before, start = sum(measured.cpu_times()[:2]), time.monotonic()
        time.sleep(seconds)
        return (sum(measured.cpu_times()[:2]) - before) / (time.monotonic() - start) * 100
    finally:
        if host is not None:
            host.stop()
        process.terminate()
        process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=PYPY, help="runs the bare router and the scheduler")
    parser.add_argument("--workers", type=int, default=4096)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--interval", type=float, action="append", help="heartbeat interval in seconds, repeatable (default 1)"
    )
    parser.add_argument("--router", metavar="ADDRESS", help=argparse.SUPPRESS)  # internal: be the bare router
    parser.add_argument("--no-echo", dest="echo", action="store_false", help=argparse.SUPPRESS)
    args = parser.parse_args()
    intervals = args.interval or [1.0]
    if args.router:
        router(args.router, args.echo, intervals[0])
        return
    me = ME
    with tempfile.TemporaryDirectory(prefix="scaler-floor-") as directory:
        path = Path(directory)
        print(f"{args.workers} idle simulated workers; CPU of the serving process:")
        for interval in intervals:
            # the scheduler's worker timeout stays 5 heartbeats at least, as its default of 5 s is for 1 s
            timeout = max(5.0, 5 * interval)
            cells = [
                ("bare router, heartbeats read and echoed", [*me, "--interval", str(interval), "--router"]),
                ("bare router, heartbeats read only", [*me, "--interval", str(interval), "--no-echo", "--router"]),
                (
                    "scaler scheduler",
                    [
                        "-m",
                        "scaler.scheduler",
                        "--logging-level",
                        "WARNING",
                        "--monitor-address",
                        f"ipc://{path}/monitor",
                    ]
                    + ["--heartbeat-interval", str(interval), "--worker-timeout", str(timeout)],
                ),
            ]  # each gets its address last
            for label, command in cells:
                cpu = idle_cpu(args.python, command, args.workers, args.seconds, path)
                print(f"  heartbeat every {interval:g} s: {label:<42}{cpu:6.1f}% of a core", flush=True)


if __name__ == "__main__":
    main()
