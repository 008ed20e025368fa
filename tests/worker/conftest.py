from __future__ import annotations

from typing import Callable, Iterator, List, NamedTuple

import pytest

from scaler.protocol import Hello
from scaler.testing.processes import ScalerProcess, wait_for
from tests.worker.helpers import all_gone, processor_pids
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
    for process in started:
        tree = [process.pid, *(child.pid for child in process.descendants())]
        process.stop()
        print(f"--- output of cluster {process.pid} ---\n{process.output()}")  # shown by pytest when a test fails
        wait_for(lambda tree=tree: all_gone(tree), 10, f"no process left of cluster {process.pid}")


@pytest.fixture
def worker(peer: SchedulerPeer, start_cluster) -> RunningWorker:
    process = start_cluster()
    identity, hello = peer.accept()
    # the agent says Hello before it forks its first processor (it sends what it has before a fork)
    wait_for(lambda: peer.pump(0.01) or len(processor_pids(process)) == 1, 10, "the worker's first processor")
    return RunningWorker(identity, hello, process)
