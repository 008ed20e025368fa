from __future__ import annotations

import os
from typing import Iterator, Tuple

import pytest

from scaler.testing.processes import ScalerProcess, free_tcp_address
from tests.e2e.live_cluster import LiveCluster


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


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory) -> Iterator[LiveCluster]:
    """The scaler.compat.ray tests' cluster: a scheduler and two workers from the CLIs, one per test module."""
    live = LiveCluster(tmp_path_factory.mktemp("ray"))
    try:
        live.add_cluster(2)
        yield live
    finally:
        live.close()


@pytest.fixture
def ray_connected(ray_cluster: LiveCluster) -> Iterator[LiveCluster]:
    """A scaler.compat.ray session connected to ray_cluster, shut down after the test."""
    import scaler.compat.ray as ray

    ray.init(address=ray_cluster.address)
    try:
        yield ray_cluster
    finally:
        ray.shutdown()
