from __future__ import annotations

import signal
import time
from typing import Callable, Iterator, List, NamedTuple

import psutil
import pytest

from scaler.protocol import Hello
from scaler.testing.processes import ScalerProcess, all_exited, still_running, wait_for
from tests.worker.helpers import processor_pids
from tests.worker.peer import SchedulerPeer


class RunningWorker(NamedTuple):
    identity: bytes
    hello: Hello
    process: ScalerProcess  # the `scaler_cluster -n 1` launcher


@pytest.fixture
def peer() -> Iterator[SchedulerPeer]:
    scheduler = SchedulerPeer()
    yield scheduler
    scheduler.close()


@pytest.fixture
def start_cluster(peer: SchedulerPeer, tmp_path) -> Iterator[Callable[..., ScalerProcess]]:
    """Start `python -m scaler.cluster ... PEER_ADDRESS`; every one is stopped, and checked to leave no process."""
    started: List[ScalerProcess] = []

    def start(*options: str, workers: int = 1) -> ScalerProcess:
        arguments = [
            "-n",
            str(workers),
            "--heartbeat-interval",
            "0.1",
            "--death-timeout",
            "15",
            "--logging-level",
            "DEBUG",
            *options,
            peer.address,
        ]
        process = ScalerProcess("scaler.cluster", arguments, str(tmp_path / f"cluster{len(started)}.log"))
        started.append(process)
        return process

    yield start
    # SIGTERM retires a worker: the peer lets it go at once, as a scheduler would, so it need not wait to hear nothing
    # for the peer timeout. Every process of the tree must then exit by itself: what stop() has to SIGKILL is a failure
    # of the test, reported once every cluster is stopped.
    peer.let_retiring_workers_go = True
    left_behind = []
    for process in started:
        # handles taken before the SIGTERM: a pid reused meanwhile is not taken for a process left behind
        tree = [psutil.Process(process.pid), *process.descendants()] if process.popen.poll() is None else []
        if tree:
            process.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        while not all_exited(tree) and time.monotonic() < deadline:
            peer.pump(0.02)
        running = [handle.pid for handle in tree if still_running(handle)]
        if running:
            left_behind.append(f"cluster {process.pid}: {running} still running 15 s after its SIGTERM")
        process.stop()
        print(f"--- output of cluster {process.pid} ---\n{process.output()}")  # shown by pytest when a test fails
    if left_behind:
        pytest.fail("processes outlived their cluster's SIGTERM: " + "; ".join(left_behind))


@pytest.fixture
def worker(peer: SchedulerPeer, start_cluster) -> RunningWorker:
    process = start_cluster()
    identity, hello = peer.accept()
    # the agent says Hello before it forks its first processor (it sends what it has before a fork)
    wait_for(lambda: peer.pump(0.01) or len(processor_pids(process)) == 1, 10, "the worker's first processor")
    return RunningWorker(identity, hello, process)
