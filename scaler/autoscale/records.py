"""Internal: what the autoscaler's policy reads and decides: plain immutable records, no IO.

`Demand` is what the scheduler's status says about the work (built in demand.py, the one place that reads the status),
`Job` is what a backend says about one group of workers it started, and `Start` / `Retire` are the policy's decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, Optional, Tuple, Union


@dataclass(frozen=True)
class WorkerLoad:
    """One worker connected to the scheduler, as the policy needs it."""

    name: str  # the scheduler's name for it: W|host|pid|hex
    host: str  # where it runs and its pid, read from the name ("" and 0 when the name has another form)
    pid: int
    tasks: int  # tasks sent to it and not finished: running there or queued there

    @property
    def idle(self) -> bool:
        return self.tasks == 0


@dataclass(frozen=True)
class Demand:
    """The work in the scheduler at one instant."""

    tasks_waiting: int  # tasks that an extra worker could start now: held in the scheduler, or queued at a busy worker
    tasks_running: int
    workers: Tuple[WorkerLoad, ...]
    free_slots: Optional[int] = None  # slots free on the workers together; None from a scheduler that does not say
    oldest_wait_seconds: Optional[float] = None  # how long the ready task first in line has waited for a worker

    @property
    def tasks_unfinished(self) -> int:
        return self.tasks_waiting + self.tasks_running


@dataclass(frozen=True)
class Job:
    """One unit the backend starts and ends: a process, a Slurm job, a pod. It runs `workers_per_job` workers."""

    job_id: str
    submitted_at: float  # on the autoscaler's monotonic clock
    running: bool  # the cluster manager started it (not queued); its workers may still be connecting
    retiring: bool = False  # asked to stop; its workers finish and leave
    # (host, pid) of every process of the job, to tell which connected workers are its own; None when the backend
    # cannot see them (a Slurm job on another node, a Kubernetes pod): the policy then works with counts only.
    processes: Optional[FrozenSet[Tuple[str, int]]] = None


@dataclass(frozen=True)
class Start:
    count: int  # jobs to start
    reason: str


@dataclass(frozen=True)
class Retire:
    job_id: str
    reason: str
    failed: bool = False  # retired because it never got a worker connected, not because the pool shrinks


Decision = Union[Start, Retire]
