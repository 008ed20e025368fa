"""Large objects a client sends (arguments, functions, send_object) kept by that client and fetched by the workers
that need them, on real processes: the scheduler's memory does not grow with them, a heavy function reaches its
workers while heartbeats keep flowing, and a client that leaves frees them on every worker."""

from __future__ import annotations

import functools
import os
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import cloudpickle
import numpy
import psutil
import pytest

from scaler import Client, Serializer
from scaler.testing.processes import wait_for
from tests.e2e.live_cluster import LiveCluster
from tests.e2e.shared_memory import data_descriptors, memfd_holders

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(180)

MiB = 1024 * 1024


@pytest.fixture
def live(tmp_path) -> Iterator[LiveCluster]:
    cluster = LiveCluster(tmp_path)
    yield cluster
    cluster.close()


class PeakRss:
    """The largest RSS of a process, sampled every 20 ms by a thread, above what it was when made."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self.start = self._process.memory_info().rss
        self.peak = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def growth(self) -> int:
        self._stop.set()
        self._thread.join(5)
        self.peak = max(self.peak, self._process.memory_info().rss)
        return self.peak - self.start


def column_sum(array: Any, column: int) -> float:
    return float(array[:, column].sum())


def checksum(blob: bytes, index: int) -> int:
    return blob[index * 4096] + len(blob)


def test_large_arguments_and_objects_leave_the_scheduler_alone(live) -> None:
    live.add_cluster(2)
    live.wait_workers(2)
    array = numpy.arange(32 * MiB, dtype=numpy.float64).reshape(-1, 1024)  # 256 MiB
    blob = bytes(range(256)) * (128 * MiB // 256)  # 128 MiB
    with Client(live.address) as client:
        client.submit(checksum, b"warm-up" * 10, 0).result(timeout=60)
        rss = PeakRss(live.scheduler.pid)
        total = client.submit(column_sum, array, 3).result(timeout=120)
        reference = client.send_object(blob, name="blob")
        sums = [future.result(timeout=120) for future in [client.submit(checksum, reference, i) for i in range(16)]]
        growth = rss.growth()
    assert total == float(array[:, 3].sum())
    assert sums == [blob[index * 4096] + len(blob) for index in range(16)]
    assert growth < 100 * MiB, f"the scheduler grew by {growth / MiB:.0f} MiB"


class TypedSerializer(Serializer):
    """The seeds' test_heavy_function serializer: a type byte, then the value."""

    @staticmethod
    def serialize(obj: Any) -> bytes:
        if isinstance(obj, int):
            return b"I" + str(obj).encode()
        return b"O" + cloudpickle.dumps(obj)

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        if payload[:1] == b"I":
            return int(payload[1:])
        return cloudpickle.loads(payload[1:])


def heavy(marker_directory: str, payload: bytes, index: int) -> int:
    """Counts its runs where the test looks, and returns what the seeds' test checks."""
    with open(os.path.join(marker_directory, f"{index}-{os.getpid()}-{os.urandom(4).hex()}"), "w"):
        pass
    return len(payload) * index


def test_a_heavy_function_runs_each_task_once_and_no_worker_misses_a_heartbeat(live, tmp_path: Path) -> None:
    """A functools.partial holding 500 MB, over 5 tasks on 3 workers whose scheduler drops a worker silent for 1.5 s:
    the function goes from the client to the workers, not through the scheduler's loop."""
    live.add_cluster(3)
    live.wait_workers(3)
    markers = tmp_path / "runs"
    markers.mkdir()
    function = functools.partial(heavy, str(markers), b"x" * 500_000_000)
    with Client(live.address, serializer=TypedSerializer) as client:
        results = [future.result(timeout=150) for future in [client.submit(function, i) for i in range(5)]]
    assert results == [500_000_000 * index for index in range(5)]
    runs = sorted(name.split("-")[0] for name in os.listdir(markers))
    assert runs == ["0", "1", "2", "3", "4"], f"each task ran once: {runs}"
    log = live.scheduler.output()
    assert "did not run for" not in log, "the scheduler's loop stalled"
    status = live.status(lambda status: len(status.workers) == 3)
    assert status.workers_lost == 0 and all(worker.previous_registrations == 0 for worker in status.workers)


def test_a_client_that_leaves_frees_what_it_kept_on_every_worker(live) -> None:
    live.add_cluster(2)
    live.wait_workers(2)
    blob = bytes(range(256)) * (8 * MiB // 256)
    client = Client(live.address)
    try:
        reference = client.send_object(blob)
        assert [f.result(timeout=60) for f in [client.submit(checksum, reference, i) for i in range(8)]] == [
            blob[index * 4096] + len(blob) for index in range(8)
        ]
        workers = [process for agent in live.agents() for process in [agent, *agent.children(recursive=True)]]
        assert memfd_holders(workers), "the workers mapped the client's object"
    finally:
        client.disconnect()
    wait_for(lambda: not memfd_holders(workers), 15, "the workers to let go of the object of a client that left")


def index_of(blob: bytes) -> int:
    return int.from_bytes(blob[:2], "big")


def test_a_client_keeps_one_descriptor_per_object_it_serves(live) -> None:
    """A kept object is one shared memory file, served to this host's workers by its descriptor: hashing it for its
    id must not keep a mapping, whose duplicated descriptor would double what the client holds (10,500 objects of
    70 KiB ran out of a 20,000 open-files limit)."""
    live.add_worker()
    live.wait_workers(1)
    count = 300
    with Client(live.address) as client:
        references = [client.send_object(index.to_bytes(2, "big") * (35 * 1024)) for index in range(count)]
        last = [client.submit(index_of, reference) for reference in references[-3:]]
        assert [future.result(timeout=60) for future in last] == [297, 298, 299]
        wait_for(lambda: data_descriptors()[1] >= count, 30, f"the {count} objects served from shared memory")
        descriptors, files = data_descriptors()
    assert descriptors == files, f"{descriptors} descriptors for {files} shared memory files"
