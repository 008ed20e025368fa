"""A client's objects leave the workers when the client leaves (real processes): they would stay for the workers'
object retention time (an hour by default), in each worker's agent and again in its task process."""

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


def rss_of_workers(agents: List[psutil.Process]) -> List[int]:
    """The RSS of each agent, its fork server and its task processes."""
    return [process.memory_info().rss for agent in agents for process in [agent, *agent.children(recursive=True)]]


@pytest.mark.parametrize("leaves", ["disconnect", "clear"])
def test_the_objects_of_a_client_that_leaves_or_clears_are_freed_on_every_worker(live, leaves: str) -> None:
    live.add_cluster(2)
    live.wait_workers(2)
    agents = live.agents()
    with Client(live.address) as client:
        # 100 MB: well above what an idle agent or task process uses (about 40 MB), and quick to relay through the
        # scheduler on a loaded machine
        reference = client.send_object(b"x" * (100 * MB))
        futures = [client.submit(size_after, reference, 0.3) for _ in range(8)]  # both workers fetch it
        assert [future.result(timeout=60) for future in futures] == [100 * MB] * 8
        held = rss_of_workers(agents)
        assert sum(rss > 100 * MB for rss in held) >= 4, f"two agents and two task processes hold it: {held}"
        if leaves == "clear":
            client.clear()
            wait_for(lambda: max(rss_of_workers(agents)) < 80 * MB, 20, f"the object freed (RSS {held})")
    if leaves == "disconnect":
        wait_for(lambda: max(rss_of_workers(agents)) < 80 * MB, 20, f"the object freed (RSS {held})")
