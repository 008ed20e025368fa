"""A scheduler with a small --max-frame-bytes, on real processes: objects, arguments and results larger than the limit
travel in chunks under it, and a message that cannot be split is refused by its sender with an error that names the
limit, instead of ZeroMQ dropping the connection again and again."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Iterator, Tuple

import cloudpickle
import pytest

from scaler import Client
from scaler.errors import FrameTooLargeError
from scaler.testing.processes import ScalerProcess, free_tcp_address

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(120)

LIMIT = 4 * 1024 * 1024
BIG = 20_000_000


def make(size: int) -> bytes:
    return b"r" * size


def count_args(*args: bytes) -> int:
    return len(args)


@pytest.fixture
def limited(tmp_path) -> Iterator[Tuple[str, ScalerProcess, ScalerProcess]]:
    address = free_tcp_address()
    monitor = "ipc://{}".format(os.path.join(tmp_path, "monitor"))
    scheduler = ScalerProcess(
        "scaler.scheduler",
        [address, "--monitor-address", monitor, "--max-frame-bytes", str(LIMIT)],
        str(tmp_path / "scheduler.log"),
    )
    cluster = None
    try:
        scheduler.wait_for_output("Scheduler: listening on")
        cluster = ScalerProcess("scaler.cluster", ["-n", "2", address], str(tmp_path / "cluster.log"))
        cluster.wait_for_output("Worker[1] started")
        yield address, scheduler, cluster
    finally:
        if cluster is not None:
            cluster.stop()
        scheduler.stop()


def test_objects_arguments_and_results_over_the_limit_travel_in_chunks(limited) -> None:
    address, scheduler, cluster = limited
    with Client(address=address, timeout_seconds=30) as client:
        argument = b"a" * BIG
        assert client.submit(len, argument).result(timeout=60) == BIG
        reference = client.send_object(b"o" * BIG)
        assert client.submit(len, reference).result(timeout=60) == BIG
        assert client.submit(make, BIG).result(timeout=60) == b"r" * BIG
    for log in (scheduler.output(), cluster.output()):
        assert "registered again" not in log and "without a goodbye" not in log, log


def test_a_message_over_the_limit_fails_its_task_and_names_the_limit(limited) -> None:
    address, scheduler, _ = limited
    with Client(address=address, timeout_seconds=30) as client:
        # inline arguments (each under the 64 KiB inline limit) travel in the Task itself: 80 of them are 4.8 MB
        many = [bytes([index]) * 60_000 for index in range(80)]
        future = client.submit(count_args, *many)
        with pytest.raises(FrameTooLargeError, match=f"frame limit of {LIMIT} bytes .*--max-frame-bytes"):
            future.result(timeout=30)
        graph = {f"k{index}": (count_args, data) for index, data in enumerate(many)}
        with pytest.raises(FrameTooLargeError, match="--max-frame-bytes"):
            client.submit_graph(graph, keys=list(graph))
        assert client.submit(count_args, *many[:10]).result(timeout=30) == 10, "the client goes on"
    assert "without a goodbye" not in scheduler.output()


def test_a_limit_below_one_mib_is_refused_at_start() -> None:
    process = subprocess.run(
        [sys.executable, "-m", "scaler.scheduler", free_tcp_address(), "--max-frame-bytes", "100000"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert process.returncode == 2
    assert "--max-frame-bytes" in process.stderr and "must be >= 1048576 (1 MiB)" in process.stderr
