"""Internal: what every backend does: start jobs of workers, list them, retire them. The policy never sees a backend."""

from __future__ import annotations

import logging
import shlex
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from scaler import config
from scaler.autoscale.records import Job

logger = logging.getLogger(__name__)


class BackendError(Exception):
    """The cluster manager refused or failed a request; the message says what it answered."""


def default_worker_command() -> List[str]:
    """`scaler_cluster` as this interpreter runs it, so jobs use the same installation as the autoscaler."""
    return [sys.executable, "-m", "scaler.cluster"]


@dataclass(frozen=True)
class WorkerCommand:
    """What each job of the local and slurm backends runs: `scaler_cluster --num-workers N [options] ADDRESS`."""

    base: Tuple[str, ...]  # scaler_cluster, e.g. ("/venv/bin/python", "-m", "scaler.cluster")
    address: str
    workers_per_job: int
    options: Tuple[str, ...] = ()  # given after `--` on the autoscaler's command line

    def arguments(self, *more_options: str) -> List[str]:
        return [
            *self.base,
            "--num-workers",
            str(self.workers_per_job),
            *more_options,
            *self.options,
            "--",
            self.address,
        ]


def retired_job_deadline(retire_timeout_seconds: float) -> float:
    """Seconds after SIGTERM by which a job's scaler_cluster has surely exited: its workers' retirement deadline, the
    grace they give the scheduler, and the launcher's time to stop them. A job still there then is killed."""
    return (
        retire_timeout_seconds + config.DEFAULT_RETIRE_GRACE_SECONDS + config.DEFAULT_CLUSTER_SHUTDOWN_TIMEOUT_SECONDS
    )


def command_text(command: Sequence[str]) -> str:
    return " ".join(shlex.quote(part) for part in command)


class Backend(ABC):
    name: str

    @abstractmethod
    def describe(self) -> str:
        """One line for the start-up log: where jobs go and what they run."""

    @abstractmethod
    def poll(self, now: float) -> List[Job]:
        """The jobs started and not ended yet, retiring ones included; raises BackendError if it cannot tell."""

    @abstractmethod
    def start(self, count: int, now: float) -> List[str]:
        """Start `count` jobs; returns their ids (fewer if one failed after others started; BackendError if none)."""

    @abstractmethod
    def retire(self, job_id: str, now: float) -> None:
        """Ask a job to stop: its workers get SIGTERM, finish and leave. Returns at once."""

    @abstractmethod
    def close(self) -> None:
        """The autoscaler stops: what becomes of the jobs is the backend's to say (in its docstring)."""

    def _retire_all(self, job_ids: Sequence[str], now: float) -> None:
        """For close(): every job at once, then the backend waits for them."""
        if job_ids:
            logger.info("stopping: retiring job(s) %s and waiting for them to end", ", ".join(job_ids))
        for job_id in job_ids:
            self.retire(job_id, now)
