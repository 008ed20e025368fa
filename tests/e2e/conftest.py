from __future__ import annotations

import os
from typing import Iterator, Tuple

import pytest

from scaler.testing.processes import ScalerProcess, free_tcp_address


@pytest.fixture
def scheduler(tmp_path) -> Iterator[Tuple[str, ScalerProcess]]:
    """A scheduler started from its CLI on a free port, unprotected so tests may shut it down."""
    address = free_tcp_address()
    monitor = "ipc://{}".format(os.path.join(tmp_path, "monitor"))
    process = ScalerProcess(
        "scaler.scheduler",
        [address, "--monitor-address", monitor, "--no-protected", "--worker-timeout", "3"],
        str(tmp_path / "scheduler.log"),
    )
    try:
        process.wait_for_output("Scheduler: listening on")
        yield address, process
    finally:
        process.stop()


@pytest.fixture
def cluster(scheduler, tmp_path) -> Iterator[Tuple[str, ScalerProcess]]:
    """Two workers started from `scaler_cluster` beside the scheduler fixture."""
    address, _ = scheduler
    process = ScalerProcess("scaler.cluster", ["-n", "2", address], str(tmp_path / "cluster.log"))
    try:
        process.wait_for_output("Worker[1] started")
        yield address, process
    finally:
        process.stop()
