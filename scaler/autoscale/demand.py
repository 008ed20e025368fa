"""The one place that reads the scheduler's SchedulerStatus for the autoscaler: status in, `Demand` out.

Today the status has task counters by state (`taskStates`) and one row per worker (`workers`, whose `sent` is the
number of that worker's unfinished tasks). A worker runs one task at a time, so a worker with `sent` tasks runs one and
queues the rest; tasks in the scheduler's `ready` state are held because no worker has a free slot. When the status
carries demand fields of its own (tasks waiting, running, free slots, age of the oldest waiting task), only this
module changes.
"""

from __future__ import annotations

from typing import Tuple

from scaler.autoscale.records import Demand, WorkerLoad
from scaler.protocol import SchedulerStatus

_HELD_STATES = ("ready",)  # unfinished, runnable, sent to no worker ("waiting" tasks wait on other tasks first)


def demand_from_status(status: SchedulerStatus) -> Demand:
    held = sum(counter.value for counter in status.task_states if counter.name in _HELD_STATES)
    workers = tuple(WorkerLoad(w.name, *worker_host_pid(w.name), tasks=w.sent) for w in status.workers)
    running = sum(1 for worker in workers if worker.tasks)
    queued_at_workers = sum(worker.tasks - 1 for worker in workers if worker.tasks > 1)
    return Demand(tasks_waiting=held + queued_at_workers, tasks_running=running, workers=workers)


def worker_host_pid(name: str) -> Tuple[str, int]:
    """The host and pid in a worker's name `W|host|pid|hex` (scaler.io.sockets.make_identity); ("", 0) otherwise."""
    parts = name.split("|")
    if len(parts) != 4 or not parts[2].isdigit():
        return "", 0
    return parts[1], int(parts[2])
