"""Internal: the `slurm` backend: each job is a Slurm batch job (`sbatch`) that runs `scaler_cluster` on its allocated
node.

A job is retired through SIGTERM, which `scaler_cluster` answers by retiring its workers (the scheduler sends them no
new task, their running tasks finish, then they exit): `scancel --batch --signal=TERM JOB` signals the batch step's own
process only, which is `scaler_cluster` itself (the job script `exec`s it), so the workers' task processes are not hit
directly and Slurm does not kill anything. Once scaler_cluster exits, the job ends. A job still in the queue a few
seconds after `retire_timeout` (the workers' retirement deadline) is cancelled with plain `scancel JOB` (Slurm's SIGTERM
to every process, then SIGKILL after the cluster's KillWait). Jobs not yet started are cancelled at once. The job script
also asks Slurm for a SIGTERM 120 s before a `--time` limit (`--signal=B:TERM@120`), so a time limit retires the workers
gracefully too.

Which connected workers belong to which job is known when the job runs on this host (`scontrol listpids` only answers
there); for jobs on other nodes the policy works with counts (see policy.py). The autoscaler only knows the jobs it
started: on a clean exit it retires them all and waits for them; if it is killed, they run on until their time limit.
"""

from __future__ import annotations

import getpass
import logging
import socket
import subprocess
import time
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

from scaler.autoscale.backends.base import (
    Backend,
    BackendError,
    WorkerCommand,
    command_text,
    retired_job_deadline,
)
from scaler.autoscale.records import Job

logger = logging.getLogger(__name__)

_PENDING_STATES = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESIZING"}
_RUNNING_STATES = {"RUNNING", "SUSPENDED", "STOPPED"}
_ENDING_STATES = {"COMPLETING", "SIGNALING", "STAGE_OUT"}
_COMMAND_TIMEOUT_SECONDS = 30.0  # a Slurm command that takes longer than this has failed: slurmctld is not answering
_PIDS_REFRESH_SECONDS = 30.0


class _SlurmJob:
    __slots__ = ("submitted_at", "state", "retire_deadline", "pids", "pids_at")

    def __init__(self, submitted_at: float) -> None:
        self.submitted_at = submitted_at
        self.state = "PENDING"  # as squeue said last
        self.retire_deadline: Optional[float] = None
        self.pids: FrozenSet[int] = frozenset()
        self.pids_at = -1e300


class SlurmBackend(Backend):
    name = "slurm"

    def __init__(
        self, command: WorkerCommand, retire_timeout_seconds: float, job_name: str, sbatch_options: Sequence[str] = ()
    ) -> None:
        self._workers_per_job = command.workers_per_job
        self._command = command.arguments()
        self._retire_timeout = retired_job_deadline(retire_timeout_seconds)
        self._job_name = job_name
        self._sbatch = ["sbatch", "--parsable", f"--job-name={job_name}", *sbatch_options]
        self._host = socket.gethostname()
        self._user = getpass.getuser()
        self._jobs: Dict[str, _SlurmJob] = {}

    def job_script(self) -> str:
        return "\n".join(
            [
                "#!/bin/sh",
                f"# scaler_autoscale: one job of {self._workers_per_job} Scaler worker(s); SIGTERM retires them",
                "#SBATCH --ntasks=1",
                f"#SBATCH --cpus-per-task={self._workers_per_job}",
                "#SBATCH --signal=B:TERM@120",
                f"exec {command_text(self._command)}",
                "",
            ]
        )

    def describe(self) -> str:
        return f"slurm: `{command_text(self._sbatch)}` with a job script that runs `{command_text(self._command)}`"

    def poll(self, now: float) -> List[Job]:
        if not self._jobs:
            return []
        output = _run(["squeue", "--noheader", f"--user={self._user}", f"--name={self._job_name}", "--format=%i|%T|%N"])
        listed: Dict[str, Tuple[str, str]] = {}
        for line in output.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3:
                listed[parts[0]] = (parts[1], parts[2])
        jobs = []
        for job_id, job in list(self._jobs.items()):
            state, nodes = listed.get(job_id, ("GONE", ""))
            retiring = job.retire_deadline is not None
            ended = state not in _PENDING_STATES | _RUNNING_STATES | (_ENDING_STATES if retiring else set())
            if ended:
                del self._jobs[job_id]
                if retiring:
                    logger.info("job %s: ended", job_id)
                else:
                    logger.warning("job %s: ended without being retired (%s)", job_id, state.lower())
                continue
            job.state = state
            if job.retire_deadline is not None and now >= job.retire_deadline:  # retiring
                logger.warning("job %s: still %s %gs after SIGTERM, cancelling it", job_id, state, self._retire_timeout)
                _try_run(["scancel", job_id])
                job.retire_deadline = now + self._retire_timeout
            running = state not in _PENDING_STATES
            jobs.append(
                Job(
                    job_id=job_id,
                    submitted_at=job.submitted_at,
                    running=running,
                    retiring=retiring,
                    processes=self._processes(job_id, job, nodes, now) if running else None,
                )
            )
        return jobs

    def _processes(self, job_id: str, job: _SlurmJob, nodes: str, now: float) -> Optional[FrozenSet[Tuple[str, int]]]:
        """(host, pid) of the job's processes if it runs on this host alone, else None (unknown)."""
        if nodes.split(".")[0] != self._host.split(".")[0]:
            return None
        # refreshed until scaler_cluster has forked its workers, then now and then
        if len(job.pids) <= self._workers_per_job or now - job.pids_at > _PIDS_REFRESH_SECONDS:
            output = _try_run(["scontrol", "listpids", job_id], quiet=True)
            if output is None:
                return None
            job.pids = frozenset(int(line.split()[0]) for line in output.splitlines() if line[:1].isdigit())
            job.pids_at = now
        return frozenset((self._host, pid) for pid in job.pids)

    def start(self, count: int, now: float) -> List[str]:
        started: List[str] = []
        script = self.job_script()
        for _ in range(count):
            try:
                output = _run(self._sbatch, script)
            except BackendError:
                if not started:
                    raise
                logger.exception("sbatch failed after %d job(s) of %d", len(started), count)
                break
            job_id = output.strip().split(";")[0]  # --parsable: "ID" or "ID;CLUSTER"
            if not job_id.isdigit():
                raise BackendError(f"sbatch answered {output.strip()!r}, not a job id")
            self._jobs[job_id] = _SlurmJob(now)
            started.append(job_id)
        return started

    def retire(self, job_id: str, now: float) -> None:
        job = self._jobs[job_id]
        if job.retire_deadline is not None:
            return
        job.retire_deadline = now + self._retire_timeout
        if job.state in _RUNNING_STATES:
            _try_run(["scancel", "--batch", "--signal=TERM", job_id])
        else:
            _try_run(["scancel", job_id])  # not started: nothing to drain

    def close(self) -> None:
        """Retire every job, wait up to retire_timeout for them to end, then scancel what is left."""
        now = time.monotonic()
        self._retire_all(list(self._jobs), now)
        deadline = now + self._retire_timeout
        while self._jobs and time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                self.poll(time.monotonic())
            except BackendError as error:
                logger.warning("%s", error)
        if self._jobs:
            logger.warning(
                "jobs %s still running %gs after SIGTERM, cancelling them", ",".join(self._jobs), self._retire_timeout
            )
            _try_run(["scancel", *self._jobs])
        self._jobs.clear()


def _run(command: List[str], stdin: Optional[str] = None) -> str:
    try:
        done = subprocess.run(
            command, input=stdin, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BackendError(f"{command[0]}: {error}") from error
    if done.returncode != 0:
        raise BackendError(f"{command_text(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _try_run(command: List[str], quiet: bool = False) -> Optional[str]:
    """The command's output, or None if it failed (logged as a warning unless `quiet`)."""
    try:
        return _run(command)
    except BackendError as error:
        logger.log(logging.DEBUG if quiet else logging.WARNING, "%s", error)
        return None
