"""Internal: the `local` backend: each job is a `scaler_cluster` process on this host. The test bed of the policy.

A job is retired with SIGTERM to its `scaler_cluster`, which retires its workers: they take no new task, their queued
tasks go to other workers and the running ones finish within `retire_timeout` (then run elsewhere); a job still running
a few seconds after that is killed with its whole tree. Jobs run with `--exit-with-parent`, so they also stop when the
autoscaler dies; on a clean exit the autoscaler retires them all and waits for them.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import time
from typing import Dict, List, Optional

import psutil

from scaler.autoscale.backends.base import (
    Backend,
    BackendError,
    WorkerCommand,
    command_text,
    retired_job_deadline,
)
from scaler.autoscale.records import Job

logger = logging.getLogger(__name__)


class _LocalJob:
    __slots__ = ("popen", "submitted_at", "retire_deadline")

    def __init__(self, popen: subprocess.Popen, submitted_at: float) -> None:
        self.popen = popen
        self.submitted_at = submitted_at
        self.retire_deadline: Optional[float] = None


class LocalBackend(Backend):
    name = "local"

    def __init__(self, command: WorkerCommand, retire_timeout_seconds: float) -> None:
        self._command = command.arguments("--exit-with-parent")
        self._retire_timeout = retired_job_deadline(retire_timeout_seconds)
        self._host = socket.gethostname()
        self._jobs: Dict[str, _LocalJob] = {}

    def describe(self) -> str:
        return f"local: each job runs `{command_text(self._command)}` on this host"

    def poll(self, now: float) -> List[Job]:
        jobs = []
        for job_id, job in list(self._jobs.items()):
            code = job.popen.poll()
            if code is not None:
                del self._jobs[job_id]
                retired = job.retire_deadline is not None
                log = logger.info if retired and code == 0 else logger.warning
                log("job %s: scaler_cluster exited with code %d%s", job_id, code, "" if retired else ", not retired")
                continue
            if job.retire_deadline is not None and now >= job.retire_deadline:
                logger.warning("job %s: still running %gs after SIGTERM, killing it", job_id, self._retire_timeout)
                _kill_tree(job.popen)
            jobs.append(
                Job(
                    job_id=job_id,
                    submitted_at=job.submitted_at,
                    running=True,
                    retiring=job.retire_deadline is not None,
                    processes=frozenset((self._host, pid) for pid in _tree_pids(job.popen.pid)),
                )
            )
        return jobs

    def start(self, count: int, now: float) -> List[str]:
        started: List[str] = []
        for _ in range(count):
            try:
                popen = subprocess.Popen(self._command, stdin=subprocess.DEVNULL)
            except OSError as error:
                if not started:
                    raise BackendError(f"cannot run {self._command[0]}: {error}") from error
                logger.error("cannot run %s: %s", self._command[0], error)
                break
            job_id = str(popen.pid)  # the launcher's pid: unique while it runs, and what ps shows
            self._jobs[job_id] = _LocalJob(popen, now)
            started.append(job_id)
        return started

    def retire(self, job_id: str, now: float) -> None:
        job = self._jobs[job_id]
        if job.retire_deadline is None:
            job.retire_deadline = now + self._retire_timeout
            _signal(job.popen, signal.SIGTERM)

    def close(self) -> None:
        """Retire every job and wait for them (killing any still running after retire_timeout)."""
        now = time.monotonic()
        self._retire_all(list(self._jobs), now)
        deadline = now + self._retire_timeout
        for job in self._jobs.values():
            try:
                job.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning(
                    "pid %d: still running %gs after SIGTERM, killing it", job.popen.pid, self._retire_timeout
                )
                _kill_tree(job.popen)
        self._jobs.clear()


def _tree_pids(pid: int) -> List[int]:
    try:
        return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
    except psutil.NoSuchProcess:
        return [pid]


def _signal(popen: subprocess.Popen, signum: int) -> None:
    try:
        popen.send_signal(signum)
    except ProcessLookupError:
        pass


def _kill_tree(popen: subprocess.Popen) -> None:
    try:
        children = psutil.Process(popen.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    _signal(popen, signal.SIGKILL)
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    popen.wait()
