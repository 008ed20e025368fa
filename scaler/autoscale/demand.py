"""Internal: the one place that reads the scheduler's SchedulerStatus for the autoscaler: status in, `Demand` out.

The status carries the demand the scheduler keeps as tasks and workers change (docs/protocol.md, Monitoring): tasks
ready and held on no worker, tasks assigned to workers, tasks running there. An extra worker could start the ready
ones and those queued at a worker behind a running one. A scheduler from before those fields leaves them 0: then the
demand is worked out from the task counters by state and the per-worker rows, as before (a worker runs one task at a
time, so a worker with `sent` tasks runs one and queues the rest).
"""

from __future__ import annotations

from typing import Tuple

from scaler.autoscale.records import Demand, WorkerLoad
from scaler.monitor.model import publishes_demand
from scaler.protocol import SchedulerStatus

_HELD_STATES = ("ready",)  # unfinished, runnable, sent to no worker ("waiting" tasks wait on other tasks first)


def demand_from_status(status: SchedulerStatus) -> Demand:
    workers = tuple(WorkerLoad(w.name, *worker_host_pid(w.name), tasks=w.sent) for w in status.workers)
    if publishes_demand(status):
        queued_at_workers = max(0, status.tasks_assigned - status.tasks_running)
        return Demand(
            tasks_waiting=status.tasks_ready + queued_at_workers,
            tasks_running=status.tasks_running,
            workers=workers,
            free_slots=status.free_slots,
            oldest_wait_seconds=status.oldest_ready_wait_us / 1_000_000,
        )
    held = sum(counter.value for counter in status.task_states if counter.name in _HELD_STATES)
    running = sum(1 for worker in workers if worker.tasks)
    queued_at_workers = sum(worker.tasks - 1 for worker in workers if worker.tasks > 1)
    return Demand(tasks_waiting=held + queued_at_workers, tasks_running=running, workers=workers)


def worker_host_pid(name: str) -> Tuple[str, int]:
    """The host and pid in a worker's name `W|host|pid|hex` (scaler.io.sockets.make_identity); ("", 0) otherwise."""
    parts = name.split("|")
    if len(parts) != 4 or not parts[2].isdigit():
        return "", 0
    return parts[1], int(parts[2])
