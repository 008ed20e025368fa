"""Helpers for worker tests: finding the processes of a cluster, waiting on heartbeats and exits (a process that
exited: scaler.testing.processes.all_exited)."""

from __future__ import annotations

from typing import Callable, List

import psutil

from scaler.protocol import WorkerHeartbeat
from scaler.testing.processes import ScalerProcess, wait_for
from tests.worker.peer import SchedulerPeer


def processor_pids(process: ScalerProcess) -> List[int]:
    """Processors are the grandchildren of a worker agent: launcher -> agent -> fork server -> processor."""
    return [p.pid for p in process.descendants() if _depth_below(p, process.pid) == 3 and p.is_running()]


def _depth_below(process: psutil.Process, ancestor_pid: int) -> int:
    depth = 0
    while process is not None and process.pid != ancestor_pid:
        try:
            process = process.parent()
        except psutil.NoSuchProcess:
            return -1
        depth += 1
    return depth if process is not None else -1


def wait_heartbeat(
    peer: SchedulerPeer, condition: Callable[[WorkerHeartbeat], bool], timeout: float = 10.0, what: str = "a heartbeat"
) -> WorkerHeartbeat:
    """Pump until a heartbeat that arrives from now on satisfies `condition`."""
    seen = len(peer.heartbeats)
    found: List[WorkerHeartbeat] = []

    def arrived() -> bool:
        peer.pump(0.02)
        found.extend(hb for _, _, hb in peer.heartbeats[seen:] if condition(hb))
        return bool(found)

    wait_for(arrived, timeout, what, interval=0)
    return found[0]


def wait_exit(process: ScalerProcess, peer: SchedulerPeer, timeout: float = 15.0) -> int:
    """Keep serving the worker (heartbeats) until its launcher exits; returns the exit code."""
    wait_for(
        lambda: peer.pump(0.02) or process.popen.poll() is not None, timeout, f"pid {process.pid} to exit", interval=0
    )
    return process.popen.returncode
