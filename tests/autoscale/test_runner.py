"""The autoscaler's loop body (runner.Autoscaler.act) with a backend in memory that can be made to fail: backend
errors are logged once and decide nothing, a failed retirement is tried again, a failed start backs off."""

from __future__ import annotations

import io
import json
import logging
from typing import List, Optional

from scaler.autoscale.backends.base import Backend, BackendError
from scaler.autoscale.policy import PolicySettings, ScalingPolicy
from scaler.autoscale.records import Job, Retire, Start
from scaler.autoscale.runner import Autoscaler
from scaler.protocol import Counter, SchedulerStatus, WorkerStatus


class MemoryBackend(Backend):
    name = "memory"

    def __init__(self) -> None:
        self.jobs: List[Job] = []
        self.fail_poll = self.fail_start = self.fail_retire = False
        self.retired: List[str] = []

    def describe(self) -> str:
        return "memory"

    def poll(self, now: float) -> List[Job]:
        if self.fail_poll:
            raise BackendError("squeue: slurmctld is not answering")
        return list(self.jobs)

    def start(self, count: int, now: float) -> List[str]:
        if self.fail_start:
            raise BackendError("sbatch: invalid partition")
        ids = [str(len(self.jobs) + i + 1) for i in range(count)]
        self.jobs += [Job(job_id, now, running=True, processes=frozenset({("h", int(job_id))})) for job_id in ids]
        return ids

    def retire(self, job_id: str, now: float) -> None:
        if self.fail_retire:
            raise BackendError("scancel: timed out")
        self.retired.append(job_id)
        self.jobs = [job for job in self.jobs if job.job_id != job_id]

    def close(self) -> None:
        pass


def _status(ready: int, workers: List[int]) -> SchedulerStatus:
    """`ready` tasks held; one worker per entry, named after the job (pid = job id) with that many tasks."""
    return SchedulerStatus(
        time_us=1,
        task_states=[Counter(name="ready", value=ready)],
        workers=[WorkerStatus(name=f"W|h|{job}|x", sent=tasks) for job, tasks in enumerate(workers, start=1)],
    )


def _autoscaler(backend: Backend, timeline: Optional[io.StringIO] = None) -> Autoscaler:
    policy = ScalingPolicy(PolicySettings(max_workers=2, idle_seconds=5.0, backoff_seconds=10.0))
    return Autoscaler(policy, backend, timeline=timeline)


def test_a_backend_that_cannot_list_its_jobs_decides_nothing_and_is_logged_once(caplog) -> None:
    backend = MemoryBackend()
    backend.fail_poll = True
    autoscaler = _autoscaler(backend)
    with caplog.at_level(logging.INFO):
        for now in range(5):
            assert autoscaler.act(float(now), _status(3, [])) == []
        backend.fail_poll = False
        assert [type(d) for d in autoscaler.act(5.0, _status(3, []))] == [Start]
    assert caplog.text.count("cannot list jobs, deciding nothing: squeue: slurmctld is not answering") == 1
    assert "the memory backend answers again" in caplog.text


def test_a_failed_start_backs_off(caplog) -> None:
    backend = MemoryBackend()
    backend.fail_start = True
    autoscaler = _autoscaler(backend)
    with caplog.at_level(logging.INFO):
        autoscaler.act(0.0, _status(3, []))
        assert autoscaler.act(1.0, _status(3, [])) == []  # held back
        backend.fail_start = False
        assert autoscaler.act(9.0, _status(3, [])) == []
        assert [type(d) for d in autoscaler.act(10.0, _status(3, []))] == [Start]
    assert "cannot start jobs: sbatch: invalid partition" in caplog.text
    assert backend.jobs and len(backend.jobs) == 2


def test_a_failed_retirement_is_tried_again(caplog) -> None:
    backend = MemoryBackend()
    autoscaler = _autoscaler(backend)
    autoscaler.act(0.0, _status(2, []))
    assert len(backend.jobs) == 2
    autoscaler.act(1.0, _status(0, [0, 0]))  # both workers connected, idle from 1 s
    backend.fail_retire = True
    with caplog.at_level(logging.INFO):
        decisions = autoscaler.act(6.0, _status(0, [0, 0]))
    assert [type(d) for d in decisions] == [Retire, Retire] and backend.retired == []
    assert "cannot retire job 1: scancel: timed out" in caplog.text
    backend.fail_retire = False
    decisions = autoscaler.act(7.0, _status(0, [0, 0]))
    assert sorted(d.job_id for d in decisions) == ["1", "2"] and sorted(backend.retired) == ["1", "2"]


def test_the_timeline_has_one_line_per_step() -> None:
    timeline = io.StringIO()
    autoscaler = _autoscaler(MemoryBackend(), timeline)
    autoscaler.act(0.0, _status(2, []))
    autoscaler.act(1.0, _status(0, [1, 1]))
    lines = [json.loads(line) for line in timeline.getvalue().splitlines()]
    assert [(entry["started"], entry["workers"], entry["jobs"], entry["busy_workers"]) for entry in lines] == [
        (2, 0, 0, 0),
        (0, 2, 2, 2),
    ]
