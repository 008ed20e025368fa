"""A worker's memory limit end to end: a scheduler and a cluster from their CLIs, real processes, real allocations.

A task that allocates past a 400 MB limit fails with MemoryLimitError, under a memory cgroup (cgroup v1 on these
machines) and under the watchdog alone; the worker goes on, and the tasks after it run. The kernel's OOM killer
prefers task processes to the agent and the cluster process (docs/guide/memory.md)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Iterator

import cloudpickle
import psutil
import pytest

from scaler import Client
from scaler.errors import MemoryLimitError
from scaler.protocol import heartbeat_flags
from scaler.testing.processes import wait_for
from scaler.worker.memory import CgroupMaker
from tests.e2e.live_cluster import LiveCluster
from tests.worker.helpers import processor_pids

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WAIT = 60  # seconds any result may take on a loaded machine
MB = 1_000_000


def allocate(bytes_per_second: float, total: int, step: int = 10 * MB) -> int:
    """Allocates (and touches) `total` bytes at `bytes_per_second`, holding all of it; returns the bytes held."""
    held = []
    start = time.perf_counter()
    while len(held) * step < total:
        held.append(b"\x01" * step)
        pause = start + len(held) * step / bytes_per_second - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
    return len(held) * step


def square(value: int) -> int:
    return value * value


def hold(size: int, started: str, release: str, seconds: float) -> int:
    """Holds `size` bytes (touched) until the file `release` exists, or `seconds` passed; says it started first."""
    held = b"\x01" * size
    Path(started).touch()
    deadline = time.monotonic() + seconds
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(held)


def cgroups_possible() -> bool:
    maker, _ = CgroupMaker.probe(f"scaler-test-{os.getpid()}", 400 * MB)
    return maker is not None


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LiveCluster]:
    cluster = LiveCluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.mark.parametrize("enforcement", ["cgroup", "watchdog"])
def test_a_task_past_the_limit_fails_with_memory_limit_error_and_the_worker_goes_on(
    cluster: LiveCluster, enforcement: str
) -> None:
    if enforcement == "cgroup" and not cgroups_possible():
        pytest.skip("this host lets us make no memory cgroup")
    launcher = cluster.add_cluster(1, "--memory-limit", "400MB", "--memory-enforcement", enforcement)
    expected = "a memory cgroup per task process" if enforcement == "cgroup" else "enforced by the watchdog"
    launcher.wait_for_output(expected)  # the log says at start how the limit is enforced
    (agent,) = cluster.agents()
    with Client(address=cluster.address) as client:
        future = client.submit(allocate, 1e9, 2000 * MB)
        started = time.monotonic()
        with pytest.raises(MemoryLimitError) as raised:
            future.result(timeout=WAIT)
        seconds = time.monotonic() - started
        error = raised.value
        assert isinstance(error, MemoryError) and error.limit_bytes == 400 * MB
        assert "limit of 400 MB" in str(error) and "at its peak" in str(error)
        assert seconds < 10, f"the error took {seconds:.1f} s"  # 0.4 s of allocation, then a kill
        futures = [client.submit(square, i) for i in range(50)]  # the next 50 tasks run as ever
        assert [future.result(timeout=WAIT) for future in futures] == [i * i for i in range(50)]
    assert cluster.agents() == [agent], "the same worker agent: only its task process was replaced"


def test_a_kill_by_the_kernel_at_the_cgroup_limit_is_reported_as_memory_limit_error(cluster: LiveCluster) -> None:
    if not cgroups_possible():
        pytest.skip("this host lets us make no memory cgroup")
    # The watchdog's threshold at the limit itself: only the kernel can stop the task first.
    cluster.add_cluster(1, "--memory-limit", "400MB", "--memory-enforcement", "cgroup", "--memory-stop-fraction", "1")
    with Client(address=cluster.address) as client:
        with pytest.raises(MemoryLimitError, match="kernel") as raised:
            client.submit(allocate, 1e10, 800 * MB, 100 * MB).result(timeout=WAIT)
        assert 0 < raised.value.peak_bytes <= 400 * MB
        assert client.submit(square, 7).result(timeout=WAIT) == 49


def test_task_processes_are_the_oom_killers_first_choice(cluster: LiveCluster) -> None:
    launcher = cluster.add_cluster(2)
    launcher_process = psutil.Process(launcher.pid)
    agents = cluster.agents()

    def adj(pid: int) -> int:
        return int(Path(f"/proc/{pid}/oom_score_adj").read_text())

    wait_for(lambda: len(processor_pids(launcher)) == 2, WAIT, "each worker's first processor")
    processors = processor_pids(launcher)
    assert len(agents) == 2
    lowest_processor = min(adj(pid) for pid in processors)
    others = [launcher_process.pid] + [agent.pid for agent in agents]
    others += [child.pid for agent in agents for child in agent.children() if child.pid not in processors]
    assert all(adj(pid) < lowest_processor for pid in others), [(pid, adj(pid)) for pid in others + processors]


def test_a_worker_above_its_pause_threshold_takes_no_task_until_its_memory_falls(
    cluster: LiveCluster, tmp_path: Path
) -> None:
    cluster.add_cluster(1, "--memory-limit", "400MB", "--memory-enforcement", "watchdog")
    (limited,) = [worker.name for worker in cluster.wait_workers(1).workers]

    def paused(status) -> bool:
        return any(w.name == limited and w.flags & heartbeat_flags.MEMORY_PAUSED for w in status.workers)

    started, release = str(tmp_path / "started"), str(tmp_path / "release")
    with Client(address=cluster.address) as client:
        # 340 MB: above the pause threshold (320 MB), below the stop threshold (380 MB)
        holding = client.submit(hold, 340 * MB, started, release, WAIT)
        cluster.status(paused, timeout=WAIT)
        # the watchdog may see the bytes while they are still being written, before the task says it started
        wait_for(lambda: os.path.exists(started), WAIT, "the holding task to start")
        cluster.add_cluster(1)  # no limit
        cluster.wait_workers(2)
        futures = [client.submit(square, i) for i in range(20)]
        # they run on the other worker while the paused one still holds its 340 MB
        assert [future.result(timeout=WAIT) for future in futures] == [i * i for i in range(20)]
        assert not holding.done()
        Path(release).touch()
        assert holding.result(timeout=WAIT) == 340 * MB
        cluster.status(lambda status: not paused(status), timeout=WAIT)


def gated_allocate(gate: str, size: int) -> int:
    """Waits for the file `gate` (bounded), then allocates and touches `size` bytes."""
    deadline = time.monotonic() + WAIT
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(b"\x01" * size)


def test_placement_learns_across_two_clusters_with_different_limits(cluster: LiveCluster, tmp_path: Path) -> None:
    small = cluster.add_cluster(1, "--memory-limit", "400MB")
    gate = str(tmp_path / "gate")
    with Client(address=cluster.address) as client:
        first = client.submit(gated_allocate, gate, 600 * MB)  # on the small worker, the only one yet
        cluster.status(lambda status: status.tasks_running == 1, WAIT)
        cluster.add_cluster(1, "--memory-limit", "2GB")
        cluster.wait_workers(2)
        Path(gate).touch()
        assert first.result(timeout=WAIT) == 600 * MB, "past 400 MB on the small worker, then run on the large one"
    assert small.output().count("the task used more memory than the limit") == 1
    with Client(address=cluster.address) as another:  # another client, its own function ids: the same function
        futures = [another.submit(gated_allocate, gate, 600 * MB) for _ in range(3)]
        assert [future.result(timeout=WAIT) for future in futures] == [600 * MB] * 3
    assert small.output().count("the task used more memory than the limit") == 1, "learned: none ran on the small one"
