"""One real cluster for the integration tests (a scheduler and two workers started from the CLIs, as on other hosts),
shared by the whole package, since starting it and importing dask, pandas or scikit-learn in every worker process
costs seconds; each test gets its own Client."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from scaler import Client
from scaler.testing.processes import ScalerProcess, free_tcp_address


class SharedCluster:
    def __init__(self, address: str, monitor_address: str) -> None:
        self.address = address
        self.monitor_address = monitor_address


@pytest.fixture(scope="package")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedCluster]:
    directory: Path = tmp_path_factory.mktemp("integrations")
    address = free_tcp_address()
    monitor = f"ipc://{directory}/monitor"
    scheduler = ScalerProcess(
        "scaler.scheduler",
        [address, "--monitor-address", monitor, "--status-interval", "0.2"],
        str(directory / "scheduler.log"),
    )
    try:
        scheduler.wait_for_output("Scheduler: listening on")
        workers = ScalerProcess("scaler.cluster", ["-n", "2", address], str(directory / "cluster.log"))
        try:
            workers.wait_for_output("Worker[1] started")
            yield SharedCluster(address, monitor)
        finally:
            workers.stop()
    finally:
        scheduler.stop()


@pytest.fixture
def client(shared_cluster: SharedCluster) -> Iterator[Client]:
    with Client(shared_cluster.address, timeout_seconds=30) as connected:
        yield connected
