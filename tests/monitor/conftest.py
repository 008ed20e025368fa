from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from typing import Iterator, List

import pytest

from scaler.testing.processes import ScalerProcess, free_tcp_address
from tests.monitor.terminal import Tmux

STATUS_INTERVAL_SECONDS = "0.25"  # four statuses a second keep the live tests short


class MonitoredCounter:
    """An actor for the live tests: a class of an importable module, so that the workers can load it."""

    def __init__(self) -> None:
        self.value = 0

    def add(self, amount: int) -> int:
        self.value += amount
        return self.value


@dataclass
class LiveCluster:
    address: str
    monitor_address: str
    scheduler: ScalerProcess
    workers: ScalerProcess

    def worker_pids(self) -> List[int]:
        """Every process below `scaler_cluster`: the worker agents, whose pids are in their names, and processors."""
        return [process.pid for process in self.workers.descendants()]


@pytest.fixture
def live_cluster(tmp_path) -> Iterator[LiveCluster]:
    """A scheduler and `scaler_cluster -n 2`, started from their CLIs as real processes."""
    directory = tempfile.mkdtemp(prefix="scaler-mon-")  # short: ipc paths are limited to about 100 bytes
    address = free_tcp_address()
    monitor_address = f"ipc://{directory}/monitor"
    scheduler = ScalerProcess(
        "scaler.scheduler",
        [address, "--monitor-address", monitor_address, "--status-interval", STATUS_INTERVAL_SECONDS],
        str(tmp_path / "scheduler.log"),
    )
    workers = None
    try:
        scheduler.wait_for_output("Scheduler: listening on")
        workers = ScalerProcess("scaler.cluster", ["-n", "2", address], str(tmp_path / "cluster.log"))
        workers.wait_for_output("Worker[1] started")
        yield LiveCluster(address, monitor_address, scheduler, workers)
    finally:
        if workers is not None:
            workers.stop()
        scheduler.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    terminal = Tmux()
    try:
        yield terminal
    finally:
        terminal.kill()
