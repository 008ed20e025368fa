"""A task waiting on a future parks its processor: the worker takes back what it handed that processor ahead and runs
it on another one, answers every task once, and can still cancel the parked task."""

from __future__ import annotations

import os
import sys

import cloudpickle

from scaler.protocol import TaskCancel, TaskResult, TaskStatus, heartbeat_flags
from scaler.testing.processes import wait_for
from tests.worker.helpers import wait_heartbeat

cloudpickle.register_pickle_by_value(sys.modules[__name__])

_TASK_LOCK = heartbeat_flags.TASK_LOCK


def wait_on_a_pending_future(seconds: float) -> int:
    """Blocks on a future nobody settles (as a parent on its child), for `seconds`; returns the processor's pid."""
    if seconds:
        import concurrent.futures

        from scaler.client.future import ScalerFuture

        try:
            ScalerFuture(os.urandom(16)).result(timeout=seconds)
        except concurrent.futures.TimeoutError:
            pass
    return os.getpid()


def results(peer, tasks) -> dict:
    return {task.task_id: peer.result_of(task, 30) for task in tasks}


def test_parked_processor_hands_back_its_prefetched_tasks_and_they_run_elsewhere(peer, worker) -> None:
    warmup = [peer.task(wait_on_a_pending_future, 0) for _ in range(5)]
    peer.send(worker.identity, *warmup)
    (first_pid,) = {cloudpickle.loads(r.payload) for r in results(peer, warmup).values()}
    # The function is known to be quick now, so the worker hands the parent and the tasks behind it at once.
    parent = peer.task(wait_on_a_pending_future, 3)
    behind = [peer.task(wait_on_a_pending_future, 0) for _ in range(5)]
    peer.send(worker.identity, parent, *behind)
    behind_results = results(peer, behind)
    assert all(r.status == TaskStatus.success for r in behind_results.values())
    assert not any(isinstance(m, TaskResult) and m.task_id == parent.task_id for _, m in peer.inbox), "still parked"
    other_pids = {cloudpickle.loads(r.payload) for r in behind_results.values()}
    parent_result = peer.result_of(parent, 30)
    parent_pid = cloudpickle.loads(parent_result.payload)
    assert parent_pid == first_pid and parent_pid not in other_pids
    peer.pump_for(0.5)
    assert not [m for _, m in peer.inbox if isinstance(m, TaskResult)], "every task answered exactly once"
    after = peer.task(wait_on_a_pending_future, 0)
    assert peer.run(worker.identity, after).status == TaskStatus.success


def test_parked_task_counts_as_running_and_can_be_canceled(peer, worker) -> None:
    parent = peer.task(wait_on_a_pending_future, 60)
    peer.send(worker.identity, parent)
    wait_heartbeat(peer, lambda hb: hb.running == 1 and not hb.flags & _TASK_LOCK, what="a parked task, idle processor")
    other = peer.task(wait_on_a_pending_future, 0)
    other_pid = cloudpickle.loads(peer.run(worker.identity, other).payload)
    peer.send(worker.identity, TaskCancel(task_ids=[parent.task_id]))
    assert peer.result_of(parent, 10).status == TaskStatus.canceled
    wait_for(lambda: "canceled running task" in worker.process.output(), 10, "the cancel in the log")
    again = peer.task(wait_on_a_pending_future, 0)
    assert cloudpickle.loads(peer.run(worker.identity, again).payload) == other_pid, "the active processor lives on"
