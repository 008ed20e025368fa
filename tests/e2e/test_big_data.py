"""Tasks that take and return large values on a real cluster (scheduler and 2 workers from their CLIs): no worker
wedges, whatever the sizes in each direction, and every result is right.

An agent that waited for room to write a large task to its processor, while the processor waited for the agent to
read its large results, silenced the worker for good: these workloads wedged both workers within seconds."""

from __future__ import annotations

import random
import sys

import cloudpickle
import dask
import dask.array as da
import numpy as np
import pytest

from scaler import Client

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(180)

MiB = 1024 * 1024


def plus_one(array: np.ndarray) -> np.ndarray:
    return array + 1


def resized(data: bytes, size: int) -> bytes:
    return data[:1] * size


def assert_no_worker_lost(scheduler_process) -> None:
    log = scheduler_process.output()
    assert "removed (no heartbeat" not in log, log


@pytest.mark.parametrize("count, size", [(60, 8 * MiB), (400, 128 * 1024)], ids=["60x8MiB", "400x128KiB"])
def test_arrays_in_and_out(scheduler, cluster, count: int, size: int) -> None:
    address, _ = cluster
    with Client(address=address, timeout_seconds=60) as client:
        arrays = [np.full(size // 8, index, dtype=np.float64) for index in range(count)]
        futures = [client.submit(plus_one, array) for array in arrays]
        for index, future in enumerate(futures):
            result = future.result(timeout=120)
            assert result.nbytes == size and result[0] == result[-1] == index + 1
    assert_no_worker_lost(scheduler[1])


def test_a_dask_array_matrix_product(scheduler, cluster) -> None:
    address, _ = cluster
    x = da.random.RandomState(7).random_sample((4000, 4000), chunks=(1000, 1000))
    with Client(address=address, timeout_seconds=60) as client:
        (ours,) = dask.compute((x @ x.T).mean(), scheduler=client.get)
    (expected,) = dask.compute((x @ x.T).mean(), scheduler="threads")
    np.testing.assert_allclose(ours, expected, rtol=1e-9)
    assert_no_worker_lost(scheduler[1])


def test_random_sizes_both_ways(scheduler, cluster) -> None:
    """Arguments and results from 0 to 16 MiB, mixed at random (seeded): small and large meet on both sides of
    the channel between an agent and its processor."""
    address, _ = cluster
    generator = random.Random(20261128)
    sizes = [
        (generator.choice([0, 1, 1000, 64 * 1024, MiB, 16 * MiB]), generator.randrange(0, 16 * MiB + 1))
        for _ in range(48)
    ]
    with Client(address=address, timeout_seconds=60) as client:
        futures = [
            client.submit(resized, bytes([index % 251]) * argument, result)
            for index, (argument, result) in enumerate(sizes)
        ]
        for index, ((argument, result_size), future) in enumerate(zip(sizes, futures)):
            result = future.result(timeout=150)
            assert len(result) == (result_size if argument else 0)
            assert result[:1] == (bytes([index % 251]) if argument and result_size else b"")
    assert_no_worker_lost(scheduler[1])
