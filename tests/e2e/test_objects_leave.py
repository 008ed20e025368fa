"""A client's objects leave the workers when the client leaves or clears them (real processes): they would stay for the
workers' object retention time (an hour by default), in each worker's agent (a descriptor of the client's shared
memory) and in its task process (the object deserialized)."""

from __future__ import annotations

import sys
import time
from typing import Iterator, List

import cloudpickle
import psutil
import pytest

from scaler import Client
from scaler.testing.processes import wait_for
from tests.e2e.live_cluster import LiveCluster
from tests.e2e.shared_memory import memfd_holders

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(120)

MB = 1_000_000


@pytest.fixture
def live(tmp_path) -> Iterator[LiveCluster]:
    cluster = LiveCluster(tmp_path)
    yield cluster
    cluster.close()


def size_after(data: bytes, seconds: float) -> int:
    time.sleep(seconds)
    return len(data)


def processes_of(agents: List[psutil.Process]) -> List[psutil.Process]:
    """Each agent, its fork server and its task processes."""
    return [process for agent in agents for process in [agent, *agent.children(recursive=True)]]


def rss_of(processes: List[psutil.Process]) -> List[int]:
    return [process.memory_info().rss for process in processes if process.is_running()]


@pytest.mark.parametrize("leaves", ["disconnect", "clear"])
def test_the_objects_of_a_client_that_leaves_or_clears_are_freed_on_every_worker(live, leaves: str) -> None:
    live.add_cluster(2)
    live.wait_workers(2)
    workers = processes_of(live.agents())
    with Client(live.address) as client:
        # 100 MB: well above what an idle agent or task process uses (about 40 MB)
        reference = client.send_object(b"x" * (100 * MB))
        futures = [client.submit(size_after, reference, 0.3) for _ in range(8)]  # both workers fetch it
        assert [future.result(timeout=60) for future in futures] == [100 * MB] * 8
        held = rss_of(workers)
        assert sum(rss > 100 * MB for rss in held) >= 2, f"both task processes hold it: {held}"
        assert len(memfd_holders(workers)) >= 2, "both agents hold the client's memory"
        if leaves == "clear":
            client.clear()
            wait_for(lambda: max(rss_of(workers)) < 80 * MB, 20, f"the object freed (RSS {held})")
            wait_for(lambda: not memfd_holders(workers), 20, "the client's memory let go of")
    if leaves == "disconnect":
        wait_for(lambda: max(rss_of(workers)) < 80 * MB, 20, f"the object freed (RSS {held})")
        wait_for(lambda: not memfd_holders(workers), 20, "the client's memory let go of")
