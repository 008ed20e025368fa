"""Internal: the autoscaler's policy, sans IO: `step(now, demand, jobs)` in, decisions out. No sockets, processes or
clocks.

How it keeps the pool between min and max workers without flapping:

- **Up fast.** The pool wants one worker per unfinished task (running or waiting), within [min, max], in whole jobs of
  `workers_per_job`. When tasks wait and the pool is short, it starts every missing job in one decision.
- **Pending jobs count.** The pool is the jobs asked for, not the workers connected: a job still queued in Slurm or
  still starting its workers is counted, so the next status, which still shows the same tasks waiting, starts nothing.
- **Down slow (hysteresis).** A job is retired only once every worker of it has had no task for `idle_seconds`, and
  only down to what the demand wants (never below min). A job not started yet (queued) is cancelled once the pool has
  had more jobs than it wants for `idle_seconds`. Busy-then-idle noise shorter than `idle_seconds` retires nothing.
- **Back off after failures.** A job that ends on its own, or runs `start_timeout_seconds` with none of its workers
  connected, is a failure: no job is started for `backoff_seconds`, doubled with each further failure (up to 8x) and
  reset once a new worker connects. A broken worker command thus costs one job per backoff, not one per status.

Which connected workers belong to which job is known when the backend can see the job's processes (`Job.processes`);
otherwise (Kubernetes, Slurm jobs on other nodes) the policy counts: it retires a job for every `workers_per_job`
workers idle long enough, and counts as many fewer idle workers until that many have left.

`max_workers` bounds the jobs that are not being retired: a job draining its last workers while a new burst starts
another is not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set

from scaler.autoscale.records import Decision, Demand, Job, Retire, Start, WorkerLoad

MAX_BACKOFF_FACTOR = 8


@dataclass(frozen=True)
class PolicySettings:
    max_workers: int
    min_workers: int = 0
    workers_per_job: int = 1
    idle_seconds: float = 60.0
    start_timeout_seconds: float = 300.0
    backoff_seconds: float = 30.0
    retire_timeout_seconds: float = 120.0  # a retired job's workers are expected gone within this

    def __post_init__(self) -> None:
        for name in ("max_workers", "min_workers", "workers_per_job"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        for name in ("idle_seconds", "start_timeout_seconds", "backoff_seconds", "retire_timeout_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < math.inf):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
        if self.workers_per_job < 1:
            raise ValueError(f"workers_per_job must be >= 1, got {self.workers_per_job}")
        if self.max_workers < self.workers_per_job:
            raise ValueError(
                f"max_workers ({self.max_workers}) must be at least workers_per_job ({self.workers_per_job})"
            )
        if self.min_jobs * self.workers_per_job > self.max_workers:
            raise ValueError(
                f"min_workers {self.min_workers} takes {self.min_jobs} job(s) of {self.workers_per_job} workers, "
                f"more than max_workers {self.max_workers}"
            )

    @property
    def min_jobs(self) -> int:
        return -(-self.min_workers // self.workers_per_job)

    @property
    def max_jobs(self) -> int:
        return self.max_workers // self.workers_per_job


class ScalingPolicy:
    def __init__(self, settings: PolicySettings) -> None:
        self.settings = settings
        self.notes: List[str] = []  # why the last step decided nothing, where that is worth telling
        self.warnings: List[str] = []  # what went wrong in the last step (jobs ending on their own)
        self._idle_since: Dict[str, float] = {}  # connected idle worker -> since when (no task)
        # workers expected to leave, one deadline each, for jobs retired without knowing their workers; they are not
        # counted as idle workers again (the cluster manager chooses which leave, so they are counted, not named)
        self._departing: List[float] = []
        self._unowned: Set[str] = set()  # connected workers no job of known processes owns, at the last step
        self._jobs: Dict[str, Job] = {}  # the backend's jobs at the last step
        self._running_since: Dict[str, float] = {}
        self._retired: Set[str] = set()  # jobs this policy retired: their end is expected
        self._surplus_since: Optional[float] = None  # since when the pool has had more jobs than it wants
        self._failures = 0
        self._backoff_until = -math.inf
        self._backoff_seconds = 0.0
        self._now = -math.inf
        self._connected: Set[str] = set()
        self._last_live = 0
        self._last_wanted_jobs = 0
        self._last_decisions: List[Decision] = []

    # --- the step -----------------------------------------------------------------------------------------------------

    def step(self, now: float, demand: Demand, jobs: Sequence[Job]) -> List[Decision]:
        if now < self._now:
            raise ValueError(f"time went backwards: {now} after {self._now}")
        self._now = now
        self.notes = []
        self.warnings = []
        self._observe_jobs(now, jobs)
        self._observe_workers(now, demand)
        settings = self.settings
        per_job = settings.workers_per_job
        owned = _owned_workers(demand.workers, jobs)
        self._count_departures(now, demand, owned)
        live = [job for job in jobs if not job.retiring]
        wanted_workers = min(max(demand.tasks_unfinished, settings.min_workers), settings.max_workers)
        wanted_jobs = min(max(-(-wanted_workers // per_job), settings.min_jobs), settings.max_jobs)

        decisions: List[Decision] = []
        for job in self._never_connected(now, live, owned):
            reason = (
                f"job {job.job_id} has run {now - self._running_since[job.job_id]:.0f}s with no worker of it "
                f"connected (start timeout {settings.start_timeout_seconds:g}s): is the scheduler address reachable "
                "from it, and does its worker command work?"
            )
            decisions.append(Retire(job.job_id, reason, failed=True))
            self._fail(now)
        failed = {decision.job_id for decision in decisions if isinstance(decision, Retire)}  # all are, so far
        live = [job for job in live if job.job_id not in self._retired and job.job_id not in failed]

        if len(live) > wanted_jobs:
            self._surplus_since = now if self._surplus_since is None else self._surplus_since
        else:
            self._surplus_since = None
        short = wanted_jobs - len(live)
        if short > 0 and (demand.tasks_waiting > 0 or len(live) < settings.min_jobs):
            if now < self._backoff_until:
                # the same words for the whole backoff, so that the runner logs it once
                self.notes.append(
                    f"{short} job(s) wanted, held back until {self._backoff_seconds:g}s after the last of "
                    f"{self._failures} failed job(s)"
                )
            else:
                decisions.append(Start(short, self._start_reason(demand, live, owned, wanted_workers, short)))
        elif len(live) > wanted_jobs:
            decisions += self._retirements(now, demand, live, owned, len(live) - wanted_jobs)

        self._last_live = len(live)
        self._last_wanted_jobs = wanted_jobs
        self._last_decisions = decisions
        for decision in decisions:
            if isinstance(decision, Retire):
                self._retired.add(decision.job_id)
        return decisions

    def jobs_started(self, now: float, job_ids: Sequence[str]) -> None:
        """The backend started these jobs for the last Start: one that is gone by the next step ended on its own."""
        for job_id in job_ids:
            self._jobs.setdefault(job_id, Job(job_id, submitted_at=now, running=False))

    def start_failed(self, now: float) -> None:
        """The backend started none or only some of the last Start's jobs: a failure; the next start waits a backoff."""
        self._fail(now)

    def retire_failed(self, job_id: str) -> None:
        """The backend could not retire the job: it is live again, and may be retired at a later step."""
        self._retired.discard(job_id)

    # --- observing ----------------------------------------------------------------------------------------------------

    def _observe_jobs(self, now: float, jobs: Sequence[Job]) -> None:
        current = {job.job_id: job for job in jobs}
        if len(current) != len(jobs):
            raise ValueError("two jobs have the same id")
        for job_id in self._jobs:
            if job_id in current:
                continue
            if job_id in self._retired:
                self._retired.discard(job_id)
            else:
                self.warnings.append(f"job {job_id} ended on its own")
                self._fail(now)
            self._running_since.pop(job_id, None)
        for job in jobs:
            if job.running and job.job_id not in self._running_since:
                self._running_since[job.job_id] = now
        self._jobs = current

    def _observe_workers(self, now: float, demand: Demand) -> None:
        names = {worker.name for worker in demand.workers}
        if len(names) != len(demand.workers):
            raise ValueError("two workers have the same name")
        if names - self._connected:
            self._failures = 0  # a new worker connected: starting jobs works
            self._backoff_until = -math.inf
        self._connected = names
        for worker in demand.workers:
            if worker.idle:
                self._idle_since.setdefault(worker.name, now)
            else:
                self._idle_since.pop(worker.name, None)
        self._idle_since = {name: since for name, since in self._idle_since.items() if name in names}

    def _fail(self, now: float) -> None:
        self._failures += 1
        factor = min(2 ** (self._failures - 1), MAX_BACKOFF_FACTOR)
        self._backoff_seconds = self.settings.backoff_seconds * factor
        self._backoff_until = now + self._backoff_seconds

    def _never_connected(self, now: float, live: List[Job], owned: Dict[str, List[WorkerLoad]]) -> List[Job]:
        timeout = self.settings.start_timeout_seconds
        return [
            job
            for job in live
            if job.processes is not None
            and job.job_id in self._running_since
            and not owned[job.job_id]
            and now - self._running_since[job.job_id] > timeout
        ]

    # --- deciding -----------------------------------------------------------------------------------------------------

    def _start_reason(
        self, demand: Demand, live: List[Job], owned: Dict[str, List[WorkerLoad]], wanted: int, count: int
    ) -> str:
        settings = self.settings
        per_job = settings.workers_per_job
        starting = sum(1 for job in live if job.processes is None or not owned[job.job_id])
        pool = f"{len(live) * per_job} worker(s) in {len(live)} job(s), {starting} of them starting"
        if demand.tasks_waiting == 0:
            return f"{pool}: below --min-workers {settings.min_workers}; starting {count} job(s) of {per_job}"
        if demand.oldest_wait_seconds is not None:
            pool += f"; the first ready task has waited {demand.oldest_wait_seconds:.1f}s"
        return (
            f"{demand.tasks_waiting} task(s) waiting, {demand.tasks_running} running; {pool}; want {wanted} "
            f"(max {settings.max_workers}): starting {count} job(s) of {per_job}"
        )

    def _retirements(
        self, now: float, demand: Demand, live: List[Job], owned: Dict[str, List[WorkerLoad]], surplus: int
    ) -> List[Decision]:
        settings = self.settings
        idle_for = settings.idle_seconds
        wanted_text = f"the demand ({demand.tasks_unfinished} unfinished task(s), min {settings.min_workers})"
        decisions: List[Decision] = []

        # Jobs not started yet cost nothing to cancel, newest first, once the surplus has lasted idle_seconds.
        surplus_lasted = self._surplus_since is not None and now - self._surplus_since >= idle_for
        not_started = [job for job in live if not job.running]
        for job in sorted(not_started, key=lambda job: job.submitted_at, reverse=True):
            if len(decisions) == surplus or not surplus_lasted:
                break
            reason = f"job {job.job_id} has not started and the pool has had more than {wanted_text} for {idle_for:g}s"
            decisions.append(Retire(job.job_id, reason))

        # Jobs whose own workers all had no task for idle_seconds, the longest idle first.
        idle_jobs = []
        for job in live:
            workers = owned.get(job.job_id, [])
            if job.running and job.processes is not None and workers and all(self._idle_long(w) for w in workers):
                idle_jobs.append((max(self._idle_since[w.name] for w in workers), job, workers))
        for last_busy, job, workers in sorted(idle_jobs, key=lambda entry: entry[0]):
            if len(decisions) == surplus:
                break
            reason = (
                f"job {job.job_id}: its {len(workers)} worker(s) had no task for {now - last_busy:.0f}s "
                f"(idle-seconds {idle_for:g}), more workers than {wanted_text}"
            )
            decisions.append(Retire(job.job_id, reason))

        # Jobs whose workers the backend cannot tell apart: one per workers_per_job workers that no job of known
        # processes owns and that had no task for idle_seconds, less the workers of such jobs retired and not gone yet.
        spare = sum(1 for w in demand.workers if w.name in self._unowned and self._idle_long(w)) - len(self._departing)
        blind = [job for job in live if job.running and job.processes is None]
        for job in sorted(blind, key=lambda job: job.submitted_at, reverse=True):
            if len(decisions) == surplus or spare < settings.workers_per_job:
                break
            spare -= settings.workers_per_job
            self._departing += [now + settings.retire_timeout_seconds] * settings.workers_per_job
            reason = (
                f"job {job.job_id}: {settings.workers_per_job} more worker(s) had no task for {idle_for:g}s, more "
                f"workers than {wanted_text} (which of its workers leave is the cluster manager's choice)"
            )
            decisions.append(Retire(job.job_id, reason))
        return decisions

    def _count_departures(self, now: float, demand: Demand, owned: Dict[str, List[WorkerLoad]]) -> None:
        """Workers of jobs retired by counting leave: each one gone settles one expected departure."""
        mine = {worker.name for workers in owned.values() for worker in workers}
        unowned = {worker.name for worker in demand.workers if worker.name not in mine}
        gone = len(self._unowned - self._connected)
        self._unowned = unowned
        self._departing = [deadline for deadline in self._departing[gone:] if deadline > now]

    def _idle_long(self, worker: WorkerLoad) -> bool:
        since = self._idle_since.get(worker.name)
        return since is not None and self._now - since >= self.settings.idle_seconds

    # --- checking -----------------------------------------------------------------------------------------------------

    def validate(self) -> None:
        """The invariants, checked by the tests after every step."""
        settings = self.settings
        assert set(self._idle_since) <= self._connected, "idle timers only for connected workers"
        assert all(since <= self._now for since in self._idle_since.values()), "an idle timer starts in the future"
        assert self._unowned <= self._connected, "unowned workers are connected ones"
        assert all(deadline > self._now for deadline in self._departing), "expected departures expire"
        assert self._retired <= set(self._jobs), "retired jobs are jobs the backend still lists"
        starts = [d for d in self._last_decisions if isinstance(d, Start)]
        retires = [d for d in self._last_decisions if isinstance(d, Retire)]
        assert len(starts) <= 1, "one start decision per step"
        assert all(d.count >= 1 for d in starts), "a start starts something"
        assert len({d.job_id for d in retires}) == len(retires), "a job is retired once"
        assert all(d.job_id in self._jobs for d in retires), "only known jobs are retired"
        started = sum(d.count for d in starts)
        assert self._last_live + started <= settings.max_jobs, "never more jobs than max_workers allows"
        if starts:
            assert self._now >= self._backoff_until, "no start during a backoff"
            assert all(d.failed for d in retires), "never start and retire for idleness in the same step"
        shrinking = sum(1 for d in retires if not d.failed)
        assert shrinking == 0 or self._last_live - shrinking >= max(settings.min_jobs, self._last_wanted_jobs), (
            "retirements never go below what the demand wants, nor below min_workers"
        )

    def describe(self) -> Dict[str, object]:
        """The policy's state, for the timeline."""
        return {
            "failures": self._failures,
            "backoff_seconds": max(0.0, self._backoff_until - self._now) if self._failures else 0.0,
            "idle_workers": len(self._idle_since),
            "departing_workers": len(self._departing),
        }


def _owned_workers(workers: Sequence[WorkerLoad], jobs: Sequence[Job]) -> Dict[str, List[WorkerLoad]]:
    """For each job whose processes the backend sees: the connected workers that are its processes."""
    owner: Dict[tuple, str] = {}
    for job in jobs:
        for process in job.processes or ():
            owner[process] = job.job_id
    owned: Dict[str, List[WorkerLoad]] = {job.job_id: [] for job in jobs if job.processes is not None}
    for worker in workers:
        job_id = owner.get((worker.host, worker.pid))
        if job_id is not None:
            owned[job_id].append(worker)
    return owned
