"""A scheduler with more peers than its open-files limit allowed: it raises the limit itself, or, past the hard limit,
says so, keeps serving the peers it holds and does not spin. Simulated workers (scaler/testing/sim_peers.py: a real
socket, handshake and heartbeats each, a thousand in one process) against the PyPy scheduler, where it is meant to
run."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Tuple

import psutil
import pytest

from scaler.testing.processes import ROOT, ScalerProcess, free_tcp_address, wait_for
from scaler.testing.sim_peers import PeerHost

PYPY = Path(ROOT) / ".venv-pypy" / "bin" / "python"

pytestmark = pytest.mark.timeout(150)
needs_pypy = pytest.mark.skipif(not PYPY.exists(), reason="no PyPy environment: scripts/test.sh builds .venv-pypy")


def under_ulimit(option: str) -> list:
    """A command prefix: the process starts under `ulimit OPTION` (bash's), e.g. "-Sn 1024"."""
    return ["bash", "-c", f'ulimit {option} && exec "$@"', "ulimit"]


def start_scheduler(tmp_path: Path, limit: str, python: str) -> ScalerProcess:
    address = free_tcp_address()
    scheduler = ScalerProcess(
        "scaler.scheduler",
        [address, "--monitor-address", f"ipc://{tmp_path / 'monitor'}"],
        str(tmp_path / "scheduler.log"),
        python,
        prefix=under_ulimit(limit),
    )
    scheduler.address = address  # type: ignore[attr-defined]
    scheduler.wait_for_output("peers on the scheduler address", timeout=60)
    return scheduler


def connections_held_and_queued(pid: int, address: str) -> Tuple[int, int]:
    """The TCP connections process `pid` holds on the port of `address`, and how many its listening socket there
    queued unaccepted (the kernel's count: rx_queue of the listener in /proc/net/tcp)."""
    port = int(address.rpartition(":")[2])
    process = psutil.Process(pid)
    connections = getattr(process, "net_connections", process.connections)("tcp")
    held = sum(1 for c in connections if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port)
    queued = 0
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:  # 0A: LISTEN
                queued = int(fields[4].rpartition(":")[2], 16)
    return held, queued


def idle_cpu_percent(pid: int, seconds: float) -> float:
    process = psutil.Process(pid)
    before = sum(process.cpu_times()[:2])
    start = time.monotonic()
    time.sleep(seconds)
    return (sum(process.cpu_times()[:2]) - before) / (time.monotonic() - start) * 100


def test_a_process_raises_its_soft_open_files_limit_to_the_hard_one() -> None:
    script = (
        "import resource; from scaler.io.limits import raise_open_files_limit; "
        "print(raise_open_files_limit().describe(), resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard < 1024 or hard == resource.RLIM_INFINITY:
        pytest.skip("the hard open-files limit is too low to see it raised, or unlimited")
    out = subprocess.run(
        [*under_ulimit("-Sn 512"), sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert f"open-files limit {hard} (raised from 512; hard limit {hard})" in out and f"({hard}, {hard})" in out, out


@needs_pypy
def test_1100_workers_all_connect_to_a_scheduler_started_under_a_soft_limit_of_1024(tmp_path: Path) -> None:
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 2500:
        pytest.skip("the hard open-files limit is below what 1,100 workers and this test need")
    scheduler = start_scheduler(tmp_path, "-Sn 1024", str(PYPY))
    workers = None
    try:
        assert "raised from 1024" in scheduler.output(), scheduler.output()
        workers = PeerHost(sys.executable, ["workers", scheduler.address, "--count", "1100"], tmp_path / "w.log")
        workers.expect("connected", timeout=90)  # every one of them had its HelloReply
        assert workers.ask({"cmd": "stats"})["connected"] == 1100
        assert "Traceback" not in scheduler.output()
    finally:
        if workers is not None:
            workers.stop()
        scheduler.stop()


def test_past_the_hard_limit_the_scheduler_names_it_serves_whom_it_holds_and_does_not_spin(tmp_path: Path) -> None:
    # soft and hard: it cannot raise the limit. On this interpreter, not PyPy: a PyPy process still compiling its hot
    # paths in its first minute uses a few % of a core however idle, which would blur the difference that matters here:
    # a scheduler out of descriptors used to spin at 100%.
    scheduler = start_scheduler(tmp_path, "-n 128", sys.executable)
    hosts = []
    try:
        clients = PeerHost(
            sys.executable,
            ["clients", scheduler.address, "--count", "1", "--scheduler-pid", str(scheduler.pid)],
            tmp_path / "c.log",
        )
        hosts.append(clients)
        clients.expect("connected", timeout=30)
        # more than the limit allows at all: those the door (or, in a burst, running out of descriptors) stops wait
        workers = PeerHost(sys.executable, ["workers", scheduler.address, "--count", "200"], tmp_path / "w.log")
        hosts.append(workers)
        wait_for(
            lambda: any(
                line.startswith("[WARNING]") and "open-files limit 128 (hard limit 128)" in line
                for line in scheduler.output().splitlines()
            ),
            60,
            "a warning naming the limit",
        )
        assert "ulimit -n" in scheduler.output(), "the log says how to raise the limit"
        scheduler.wait_for_output("new connections wait", timeout=60)  # the door is shut

        def all_held_are_served() -> bool:
            """Nothing left to accept, and each connection the scheduler holds belongs to a peer it answered (a busy
            scheduler answers those it accepted last seconds later)."""
            held, queued = connections_held_and_queued(scheduler.pid, scheduler.address)
            return queued == 0 and held == workers.ask({"cmd": "stats"})["connected"] + 1  # and the client

        wait_for(all_held_are_served, 60, "the workers it holds, every one answered")
        connected = workers.ask({"cmd": "stats"})["connected"]
        held = connections_held_and_queued(scheduler.pid, scheduler.address)[0]
        assert 10 <= connected < 128, connected
        cpu = idle_cpu_percent(scheduler.pid, 5.0)
        assert cpu < 5.0, f"the scheduler used {cpu:.1f}% of a core while its door was shut"
        # the peers it holds are served: a burst of tasks runs on the connected workers, every result back once
        clients.ask({"cmd": "burst", "tasks": 2000})
        clients.ask({"cmd": "drain", "timeout": 60})
        drained = clients.expect("drained", timeout=70)
        assert drained["submitted"] == drained["answered"] == 2000
        assert workers.ask({"cmd": "stats"})["answered"] == 2000
        assert workers.ask({"cmd": "stats"})["connected"] == connected, "nobody got in while the door was shut"
        assert connections_held_and_queued(scheduler.pid, scheduler.address)[0] == held, "nor did a connection"
        assert os.path.exists(scheduler.log_path) and "Traceback" not in scheduler.output()
    finally:
        for host in reversed(hosts):
            host.stop()
        scheduler.stop()
