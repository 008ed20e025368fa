"""Logging never stalls a server: hostile input with stdout a pipe that nobody reads, as under a supervisor whose
reader stalled. Every server keeps serving, its warnings are rate limited, and it stops within a bound."""

from __future__ import annotations

import array
import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import List, Optional

import cloudpickle
import psutil
import pytest
import zmq

from scaler import Client
from scaler.config import (
    DEFAULT_PEER_WARNINGS_INTERVAL_SECONDS,
    DEFAULT_PEER_WARNINGS_PER_INTERVAL,
    DEFAULT_PEER_WARNINGS_PER_PEER,
)
from scaler.errors import ProcessorDiedError
from scaler.testing.processes import ROOT, ScalerProcess, fill_pipe, free_tcp_address, wait_exited, wait_for
from tests.e2e.monitor import wait_for_status

cloudpickle.register_pickle_by_value(sys.modules[__name__])

GARBAGE_CONNECTIONS = 20
GARBAGE_FRAMES = 500
MAP_TASKS = 200
STOP_SECONDS = 10.0  # SIGTERM to exit, with the output blocked: the log gives up after its own 2 s bound
# the interpreter of scheduler hosts: as tests/perf_e2e, $SCALER_SCHEDULER_PYTHON or the .venv-pypy of scripts/test.sh
PYPY = os.environ.get("SCALER_SCHEDULER_PYTHON") or os.path.join(ROOT, ".venv-pypy", "bin", "python")


def double(value: int) -> int:
    return 2 * value


def exit_processor() -> None:
    os._exit(3)


class UnreadStdout:
    """A CLI run as `python -m MODULE ARGS...` whose stdout is a pipe that nobody reads, optionally full from the
    start; stderr goes to a file, for the test's messages."""

    def __init__(
        self, module: str, args: List[str], stderr_path: Path, full: bool, python: str = sys.executable
    ) -> None:
        self._read_fd, write_fd = os.pipe()
        if full:
            fill_pipe(write_fd)
        self._stderr_path = stderr_path
        with open(stderr_path, "wb") as stderr:
            self.popen = subprocess.Popen([python, "-m", module, *args], stdout=write_fd, stderr=stderr, cwd=ROOT)
        os.close(write_fd)

    def unread_bytes(self) -> int:
        """What the process wrote to its stdout and nobody read."""
        count = array.array("i", [0])
        fcntl.ioctl(self._read_fd, termios.FIONREAD, count)
        return count[0]

    def stderr(self) -> str:
        return self._stderr_path.read_text(errors="replace")

    def stop(self) -> Optional[float]:
        """SIGTERM; the seconds it took to exit, or None if it did not within STOP_SECONDS (then it is killed).
        The whole tree is gone afterwards, and the pipe is closed."""
        tree = psutil.Process(self.popen.pid).children(recursive=True)
        started = time.monotonic()
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(STOP_SECONDS)
            took: Optional[float] = time.monotonic() - started
        except subprocess.TimeoutExpired:
            took = None
        self.kill(tree)
        return took

    def kill(self, tree: Optional[List[psutil.Process]] = None) -> None:
        if tree is None:
            tree = psutil.Process(self.popen.pid).children(recursive=True) if self.popen.poll() is None else []
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)
        for process in wait_exited(tree, 10):
            process.kill()
        if self._read_fd >= 0:
            os.close(self._read_fd)
            self._read_fd = -1


def _send_garbage(address: str) -> bytes:
    """20 TCP connections of random bytes, then 500 malformed frames (and multi-frame messages) from one DEALER,
    whose identity this returns."""
    host, port = address[len("tcp://") :].rsplit(":", 1)
    connections = []
    for _ in range(GARBAGE_CONNECTIONS):
        connection = socket.create_connection((host, int(port)), timeout=10)
        connection.sendall(os.urandom(4096))
        connections.append(connection)
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 5000)
    identity = b"X|garbage|" + os.urandom(4).hex().encode()
    dealer.setsockopt(zmq.ROUTING_ID, identity)
    dealer.connect(address)
    for index in range(GARBAGE_FRAMES):
        if index % 10 == 0:
            dealer.send_multipart([os.urandom(8), os.urandom(8)])
        else:
            dealer.send(os.urandom(1 + index % 200))
    dealer.close()  # lingers until every frame is handed over
    context.term()
    for connection in connections:
        connection.close()
    return identity


def _wait_until_all_read(monitor: str) -> None:
    """Until the scheduler's count of malformed frames holds still (the DEALER's 500 at least) for two statuses."""
    seen: List[int] = []

    def quiet(status) -> bool:
        seen.append(status.malformed)
        return len(seen) >= 2 and seen[-1] == seen[-2] >= GARBAGE_FRAMES

    wait_for_status(monitor, quiet, timeout=30)


def _scheduler(tmp_path: Path, full: bool, python: str) -> tuple:
    address = free_tcp_address()
    monitor = tmp_path / "monitor"
    scheduler = UnreadStdout(
        "scaler.scheduler", [address, "-ma", f"ipc://{monitor}"], tmp_path / "scheduler.stderr", full, python
    )
    # the monitor's ipc file appears once both sockets are bound; the log, which says so, is not readable here
    wait_for(lambda: monitor.exists() or scheduler.popen.poll() is not None, 20, "the scheduler's sockets")
    assert scheduler.popen.poll() is None, scheduler.stderr()
    return address, scheduler


def _map_succeeds(address: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    with Client(address, timeout_seconds=timeout) as client:
        futures = [client.submit(double, value) for value in range(MAP_TASKS)]
        results = [future.result(timeout=max(0.1, deadline - time.monotonic())) for future in futures]
    assert results == [2 * value for value in range(MAP_TASKS)]


@pytest.mark.parametrize(
    "full, python",
    [(False, sys.executable), (True, sys.executable), (False, PYPY)],
    ids=["unread-pipe", "full-pipe", "unread-pipe-pypy"],
)
def test_scheduler_with_unread_stdout_serves_after_garbage_and_stops(tmp_path, full, python) -> None:
    if not os.path.exists(python):
        pytest.skip(f"no PyPy environment at {python} (bash scripts/test.sh builds it)")
    address, scheduler = _scheduler(tmp_path, full, python)
    workers = ScalerProcess("scaler.cluster", ["-n", "1", address], str(tmp_path / "cluster.log"))
    try:
        _send_garbage(address)
        _map_succeeds(address)
        took = scheduler.stop()
        assert took is not None, f"the scheduler did not exit within {STOP_SECONDS}s of SIGTERM: {scheduler.stderr()}"
        assert scheduler.popen.returncode == 0, scheduler.stderr()
    finally:
        scheduler.kill()
        workers.stop()


def test_cluster_with_full_stdout_serves_while_its_processors_die_and_stops(tmp_path) -> None:
    """scaler_cluster and its workers share the stdout pipe; tasks that kill their processor make each worker log."""
    address = free_tcp_address()
    scheduler = ScalerProcess("scaler.scheduler", [address, "-ma", f"ipc://{tmp_path}/monitor"], str(tmp_path / "s"))
    cluster = UnreadStdout("scaler.cluster", ["-n", "2", address], tmp_path / "cluster.stderr", full=True)
    try:
        scheduler.wait_for_output("Scheduler: listening on")
        with Client(address, timeout_seconds=60) as client:
            for future in [client.submit(exit_processor) for _ in range(20)]:
                with pytest.raises(ProcessorDiedError):
                    future.result(timeout=60)
        _map_succeeds(address)
        workers = [child for child in psutil.Process(cluster.popen.pid).children(recursive=True)]
        took = cluster.stop()
        assert took is not None, f"scaler_cluster did not exit within {STOP_SECONDS}s of SIGTERM: {cluster.stderr()}"
        assert cluster.popen.returncode == 0, cluster.stderr()
        alive = wait_exited(workers, 5)
        assert not alive, f"left behind: {alive}"
    finally:
        cluster.kill()
        scheduler.stop()


def test_garbage_is_logged_a_few_times_then_summed_up(tmp_path) -> None:
    """With stdout to a file: a few lines per peer, at most so many in all, and summaries that count the rest. The
    random bytes on raw TCP connections also reach the scheduler as frames from peers of random identities (libzmq
    reads them as ZMTP 1.0), so the overall limit is met as well as the per-peer one."""
    address, monitor = free_tcp_address(), f"ipc://{tmp_path}/monitor"
    scheduler = ScalerProcess("scaler.scheduler", [address, "-ma", monitor], str(tmp_path / "s"))
    try:
        scheduler.wait_for_output("Scheduler: listening on")
        started = time.monotonic()
        dealer = _send_garbage(address)
        _wait_until_all_read(monitor)
        elapsed = time.monotonic() - started
    finally:
        assert scheduler.stop() == 0
    log = scheduler.output()
    intervals = 2 + int(elapsed // DEFAULT_PEER_WARNINGS_INTERVAL_SECONDS)  # the intervals the warnings can span
    warnings = re.findall(r"^\[WARNING\].*$", log, re.MULTILINE)
    summaries = [line for line in warnings if "suppressed" in line]
    assert summaries, log
    assert len(warnings) - len(summaries) <= DEFAULT_PEER_WARNINGS_PER_INTERVAL * intervals, log
    dealer_lines = log.count(f"unregistered peer {dealer!r}")
    assert dealer_lines <= DEFAULT_PEER_WARNINGS_PER_PEER * intervals, log  # 0 if the TCP garbage took them all
    name = re.escape(repr(dealer)[2:-1])
    dealer_suppressed = sum(int(count) for line in summaries for count in re.findall(rf"\b{name}: (\d+)", line))
    assert dealer_lines + dealer_suppressed == GARBAGE_FRAMES, log


def test_dying_processors_are_logged_a_few_times_then_summed_up(tmp_path) -> None:
    address = free_tcp_address()
    scheduler = ScalerProcess("scaler.scheduler", [address, "-ma", f"ipc://{tmp_path}/monitor"], str(tmp_path / "s"))
    cluster = ScalerProcess("scaler.cluster", ["-n", "1", address], str(tmp_path / "cluster.log"))
    deaths = 3 * DEFAULT_PEER_WARNINGS_PER_PEER
    try:
        scheduler.wait_for_output("Scheduler: listening on")
        with Client(address, timeout_seconds=60) as client:
            for future in [client.submit(exit_processor) for _ in range(deaths)]:
                with pytest.raises(ProcessorDiedError):
                    future.result(timeout=60)
    finally:
        assert cluster.stop() == 0
        scheduler.stop()
    log = cluster.output()
    lines = [line for line in log.splitlines() if "processor died with exit code 3" in line]
    assert len(lines) >= DEFAULT_PEER_WARNINGS_PER_PEER, log
    summaries = re.findall(r"Worker\[0\]: suppressed \d+ warning\(s\) in [\d.]+ s \(processor died: (\d+)\)", log)
    assert summaries and len(lines) + sum(int(count) for count in summaries) == deaths, log
    assert log.index(lines[DEFAULT_PEER_WARNINGS_PER_PEER - 1]) < log.index("suppressed"), log
