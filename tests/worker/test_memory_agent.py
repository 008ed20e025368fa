"""A real worker (scaler_cluster, its agent and processors) under a memory limit, driven by a fake scheduler: held
results past the spill threshold go to files in the worker's own temporary directory and come back, byte for byte,
when asked for (docs/guide/memory.md)."""

from __future__ import annotations

import os
import sys
from typing import List

import cloudpickle
import psutil
import pytest

from scaler.protocol import ObjectDelete, ObjectPut, ObjectRequest, TaskStatus
from scaler.testing.processes import wait_for
from scaler.worker.memory import CgroupMaker
from tests.worker.peer import SchedulerPeer

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MB = 1_000_000


def make(size: int, fill: int) -> bytes:
    return bytes([fill]) * size


def spilled_files(agent_pid: int) -> List[str]:
    """The agent's descriptors on files of its spill directory (unnamed: their disk space goes with them)."""
    links = []
    for fd in os.listdir(f"/proc/{agent_pid}/fd"):
        try:
            links.append(os.readlink(f"/proc/{agent_pid}/fd/{fd}"))
        except OSError:
            pass
    return [link for link in links if "scaler-worker-" in link]


def upload(peer: SchedulerPeer, identity: bytes, object_id: bytes) -> bytes:
    """The worker's held result, as it uploads it when the scheduler relays it."""
    peer.send(identity, ObjectRequest(object_ids=[object_id], via_scheduler=True))
    chunks = {}
    while True:
        put = peer.expect(ObjectPut, 30, object_id=object_id)
        chunks[put.chunk_index] = bytes(put.payload)
        if len(chunks) == put.chunk_count:
            return b"".join(chunks[index] for index in range(put.chunk_count))


@pytest.mark.parametrize("enforcement", ["watchdog", "cgroup"])
def test_held_results_past_the_spill_threshold_go_to_disk_and_come_back(
    peer: SchedulerPeer, start_cluster, enforcement: str
) -> None:
    """With cgroups, the results a processor wrote stay charged to its cgroup until spilled: not counted twice."""
    if enforcement == "cgroup" and CgroupMaker.probe(f"scaler-{os.getpid()}", MB)[0] is None:
        pytest.skip("no memory cgroup here")
    process = start_cluster("--memory-limit", "400MB", "--memory-enforcement", enforcement)
    identity, hello = peer.accept(holds_on_workers=True, memory_pause=True)
    assert hello.memory_limit == 400 * MB
    (agent,) = psutil.Process(process.pid).children()
    tasks = [peer.task(make, 100 * MB, index) for index in range(5)]
    for task in tasks:  # 500 MB held: past the spill threshold (240 MB) and the limit itself
        result = peer.run(identity, task, 30)
        assert result.status == TaskStatus.success and result.held_bytes > 100 * MB, result.error_text

    def spilled() -> int:
        return peer.heartbeats[-1][2].spilled_bytes if peer.heartbeats else 0

    wait_for(lambda: peer.pump(0.05) or spilled() >= 300 * MB, 30, "held results spilled")
    assert len(spilled_files(agent.pid)) >= 3, "on disk, in the worker's own directory"
    assert agent.memory_info().rss < 200 * MB
    for index, task in enumerate(tasks):  # read back, each as it was
        payload = cloudpickle.loads(upload(peer, identity, task.task_id))
        assert payload == make(100 * MB, index)
        del payload
        peer.send(identity, ObjectDelete(object_ids=[task.task_id]))
    wait_for(lambda: peer.pump(0.05) or spilled() == 0, 30, "spilled results freed")
    assert not spilled_files(agent.pid), "freed results leave the disk"


def test_cgroups_left_by_a_killed_agent_are_removed_by_the_next_one() -> None:
    maker, why = CgroupMaker.probe(f"scaler-{os.getpid()}", 400 * MB)
    if maker is None:
        pytest.skip(f"no memory cgroup here: {why}")
    stale_pid = 2**22 + 12345  # above pid_max's default: no process has it
    stale = os.path.join(maker.base, f"scaler-{stale_pid}-1")
    os.mkdir(stale)
    mine = maker.make("7")
    try:
        maker.remove_stale()
        assert not os.path.exists(stale) and os.path.exists(mine.path), "only a dead agent's cgroups go"
    finally:
        mine.remove()
        if os.path.exists(stale):
            os.rmdir(stale)


def _map_and_allocate(steps, shared_fd: int, shared_size: int, own_size: int) -> None:
    """Map a shared memory file and read it whole, as a task reading a held result; then allocate memory of its own.
    Each step waits for the test to look (its end of the pipe answers)."""
    import mmap

    mapping = mmap.mmap(shared_fd, shared_size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    bytes(mapping)  # every page present
    steps.send("mapped")
    steps.recv()
    own = bytearray(own_size)  # zero-filled: every page written
    steps.send("allocated")
    steps.recv()
    del own, mapping


def test_a_task_process_is_counted_without_the_held_results_it_keeps_mapped() -> None:
    """The watchdog counts a process as its PSS less the held results it says it keeps mapped (the worker counts them
    once, as held results); shared memory of its own still counts."""
    import multiprocessing

    from scaler.io.shared_bytes import SharedBytes
    from scaler.worker.memory import pss_bytes

    rollup = "/proc/self/smaps_rollup"
    if not os.path.exists(rollup):
        pytest.skip("no smaps_rollup (Linux before 4.14)")
    with open(rollup) as lines:
        if "Pss_Shmem:" not in lines.read():
            pytest.skip("no Pss_Shmem in smaps_rollup (Linux before 5.7)")
    held = SharedBytes.create(b"h" * (64 * MB))
    context = multiprocessing.get_context("fork")
    steps, child_steps = context.Pipe()
    child = context.Process(target=_map_and_allocate, args=(child_steps, held.fd, held.size, 64 * MB))
    child.start()
    try:
        assert steps.poll(30) and steps.recv() == "mapped"
        mapped = pss_bytes(child.pid, kept_bytes=held.size)
        assert pss_bytes(child.pid) - mapped > 60 * MB, "kept, the 64 MB it maps are left out; else they count"
        assert pss_bytes(child.pid, kept_bytes=10 * held.size) > mapped - MB, "less its shared memory at most"
        steps.send("go on")
        assert steps.poll(30) and steps.recv() == "allocated"
        assert pss_bytes(child.pid, kept_bytes=held.size) - mapped > 60 * MB, "its own 64 MB count in full"
        steps.send("end")
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join()
