"""A small discrete-time world for the scaling policy: a scheduler queue, workers that run one task at a time, and a
cluster manager that queues jobs, starts them, and drains retired ones, all with delays. No processes, no sockets.

The policy is stepped once per `interval` seconds with the Demand and jobs of that instant, exactly as the runner
does, and `validate()` is called after every step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from scaler.autoscale.policy import PolicySettings, ScalingPolicy
from scaler.autoscale.records import Decision, Demand, Job, Retire, Start, WorkerLoad

HOST = "simhost"


@dataclass
class SimJob:
    job_id: str
    submitted_at: float
    running_at: float  # when the cluster manager starts it
    connect_at: float  # when its workers connect
    pids: List[int]
    retired_at: Optional[float] = None
    broken: bool = False  # its workers never connect


@dataclass
class SimWorker:
    name: str
    job_id: str
    busy_until: Optional[float] = None  # running a task until then


@dataclass
class World:
    settings: PolicySettings
    interval: float = 1.0
    queue_delay: float = 2.0  # submitted -> running
    boot_delay: float = 1.0  # running -> workers connected
    task_seconds: float = 1.0
    mapped: bool = True  # whether the backend sees the jobs' processes
    now: float = 0.0
    held: int = 0  # tasks in the scheduler, sent to no worker
    done: int = 0
    last_done_at: float = 0.0
    jobs: Dict[str, SimJob] = field(default_factory=dict)
    workers: Dict[str, SimWorker] = field(default_factory=dict)
    log: List[Tuple[float, List[Decision]]] = field(default_factory=list)
    live_history: List[Tuple[float, int]] = field(default_factory=list)
    break_next_jobs: int = 0  # the next N jobs started never connect a worker
    _serial: int = 0

    def __post_init__(self) -> None:
        self.policy = ScalingPolicy(self.settings)

    # --- the world moving on ---

    def add_tasks(self, count: int) -> None:
        self.held += count

    def advance(self) -> None:
        self.now = round(self.now + self.interval, 9)
        for job in list(self.jobs.values()):
            if job.retired_at is not None:  # a retired job's workers finish their task, then the job ends
                mine = [w for w in self.workers.values() if w.job_id == job.job_id]
                if all(w.busy_until is None for w in mine):
                    for worker in mine:
                        del self.workers[worker.name]
                    del self.jobs[job.job_id]
                continue
            if (
                not job.broken
                and job.connect_at <= self.now
                and not any(w.job_id == job.job_id for w in self.workers.values())
            ):
                for pid in job.pids[1:]:
                    name = f"W|{HOST}|{pid}|{pid:012x}"
                    self.workers[name] = SimWorker(name, job.job_id)
        for worker in self.workers.values():
            if worker.busy_until is not None and worker.busy_until <= self.now:
                worker.busy_until = None
                self.done += 1
                self.last_done_at = self.now
        retiring = {job.job_id for job in self.jobs.values() if job.retired_at is not None}
        for worker in sorted(self.workers.values(), key=lambda w: w.name):
            if self.held and worker.busy_until is None and worker.job_id not in retiring:
                self.held -= 1
                worker.busy_until = self.now + self.task_seconds

    # --- what the policy sees ---

    def demand(self) -> Demand:
        workers = tuple(
            WorkerLoad(w.name, HOST, int(w.name.split("|")[2]), 0 if w.busy_until is None else 1)
            for w in self.workers.values()
        )
        running = sum(1 for w in workers if w.tasks)
        return Demand(tasks_waiting=self.held, tasks_running=running, workers=workers)

    def job_views(self) -> List[Job]:
        return [
            Job(
                job_id=job.job_id,
                submitted_at=job.submitted_at,
                running=job.running_at <= self.now,
                retiring=job.retired_at is not None,
                processes=frozenset((HOST, pid) for pid in job.pids) if self.mapped else None,
            )
            for job in self.jobs.values()
        ]

    def live_jobs(self) -> int:
        return sum(1 for job in self.jobs.values() if job.retired_at is None)

    # --- one step of the autoscaler ---

    def step(self) -> List[Decision]:
        self.advance()
        decisions = self.policy.step(self.now, self.demand(), self.job_views())
        self.policy.validate()
        for decision in decisions:
            if isinstance(decision, Start):
                self.policy.jobs_started(self.now, [self._start_job() for _ in range(decision.count)])
            else:
                assert isinstance(decision, Retire)
                self.jobs[decision.job_id].retired_at = self.now
        self.log.append((self.now, decisions))
        self.live_history.append((self.now, self.live_jobs()))
        assert self.live_jobs() <= self.settings.max_jobs
        return decisions

    def run(self, seconds: float) -> None:
        end = self.now + seconds
        while self.now < end - 1e-9:
            self.step()

    def _start_job(self) -> str:
        self._serial += 1
        base = 1000 * self._serial
        broken = self.break_next_jobs > 0
        self.break_next_jobs -= 1 if broken else 0
        running_at = self.now + self.queue_delay
        self.jobs[str(self._serial)] = SimJob(
            job_id=str(self._serial),
            submitted_at=self.now,
            running_at=running_at,
            connect_at=running_at + self.boot_delay,
            pids=[base + i for i in range(self.settings.workers_per_job + 1)],  # the launcher, then its workers
            broken=broken,
        )
        return str(self._serial)

    # --- reading the log ---

    def starts(self) -> List[Tuple[float, int]]:
        return [(t, d.count) for t, ds in self.log for d in ds if isinstance(d, Start)]

    def retires(self) -> List[Tuple[float, Retire]]:
        return [(t, d) for t, ds in self.log for d in ds if isinstance(d, Retire)]
