"""The scheduler core's invariants, checked by `SchedulerCore.validate()` after every step of the tests (never in
production): each task is in one place, the counters match the collections, retiring workers get nothing new."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaler.scheduler.state import ASSIGNED, CANCELING, READY, STATE_NAMES

if TYPE_CHECKING:
    from scaler.scheduler.core import SchedulerCore


def check_invariants(core: SchedulerCore) -> None:
    counts = [0] * len(STATE_NAMES)
    queued = {task.task_id for task in core.ready if task.state == READY and core.tasks.get(task.task_id) is task}
    for task_id, task in core.tasks.items():
        assert task.task_id == task_id
        counts[task.state] += 1
        if task.state in (ASSIGNED, CANCELING):
            worker = core.workers.get(task.worker)
            assert worker is not None, f"task {task_id.hex()} is assigned to an unknown worker"
            assert task_id in worker.assigned, f"task {task_id.hex()} is missing from its worker's assigned set"
        else:
            assert task.worker is None, f"task {task_id.hex()} is {STATE_NAMES[task.state]} and has a worker"
        if task.state == READY:
            assert task_id in queued, f"ready task {task_id.hex()} is not in the ready queue"
        client = core.clients.get(task.client)
        if client is not None:
            assert task_id in client.tasks
    assert counts == core.state_counts, (counts, core.state_counts)
    for identity, worker in core.workers.items():
        assert worker.identity == identity
        for task_id in worker.assigned:
            task = core.tasks.get(task_id)
            assert task is not None and task.worker == identity, f"{worker.name} holds a task not assigned to it"
    retiring = {identity for identity, worker in core.workers.items() if worker.retire_deadline is not None}
    assert retiring == set(core.retiring), "the retiring workers and the retiring index differ"
    for identity, worker in core.retiring.items():
        assert core.workers.get(identity) is worker
