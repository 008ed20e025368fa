"""The scaling policy, sans IO: direct steps for the rules, and a simulated world (simulation.py) for behaviour over
time, with the policy's invariants checked after every step."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.autoscale.policy import PolicySettings, ScalingPolicy
from scaler.autoscale.records import Demand, Job, Retire, Start, WorkerLoad
from tests.autoscale.simulation import HOST, World


def _settings(**overrides) -> PolicySettings:
    values = dict(max_workers=8, min_workers=0, workers_per_job=2, idle_seconds=10.0, start_timeout_seconds=20.0)
    values.update(overrides)
    return PolicySettings(**values)


def _worker(pid: int, tasks: int = 0) -> WorkerLoad:
    return WorkerLoad(f"W|{HOST}|{pid}|x", HOST, pid, tasks)


def _job(job_id: str, pids=(), running: bool = True, mapped: bool = True, submitted_at: float = 0.0) -> Job:
    processes = frozenset((HOST, pid) for pid in pids) if mapped else None
    return Job(job_id, submitted_at=submitted_at, running=running, processes=processes)


# --- settings -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(max_workers=-1), "max_workers must be an int >= 0"),
        (dict(workers_per_job=0), "workers_per_job must be >= 1"),
        (dict(max_workers=1, workers_per_job=2), "at least workers_per_job"),
        (dict(min_workers=7, max_workers=7, workers_per_job=2), "more than max_workers 7"),
        (dict(idle_seconds=float("inf")), "idle_seconds must be a finite number"),
        (dict(min_workers=True), "min_workers must be an int"),
    ],
)
def test_settings_refuse_what_cannot_work(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        _settings(**overrides)


def test_jobs_are_whole() -> None:
    settings = _settings(min_workers=3, max_workers=9, workers_per_job=2)
    assert (settings.min_jobs, settings.max_jobs) == (2, 4)  # min rounds up, max rounds down


# --- single steps -------------------------------------------------------------------------------------------------


def test_a_burst_from_zero_starts_every_job_it_needs_at_once() -> None:
    policy = ScalingPolicy(_settings())
    decisions = policy.step(0.0, Demand(tasks_waiting=5, tasks_running=0, workers=()), [])
    policy.validate()
    assert [type(d) for d in decisions] == [Start]
    assert decisions[0].count == 3  # 5 tasks -> 5 workers -> 3 jobs of 2
    assert "5 task(s) waiting" in decisions[0].reason


def test_jobs_still_starting_are_counted() -> None:
    policy = ScalingPolicy(_settings())
    demand = Demand(tasks_waiting=100, tasks_running=0, workers=())
    (start,) = policy.step(0.0, demand, [])
    assert start.count == 4  # capped at max_workers 8
    queued = [_job(str(i), running=False) for i in range(4)]
    for now in (1.0, 2.0, 3.0):  # the same tasks still wait: nothing more starts
        assert policy.step(now, demand, queued) == []
        policy.validate()


def test_a_larger_demand_tops_up_the_pool() -> None:
    policy = ScalingPolicy(_settings())
    workers = (_worker(11, 1), _worker(12, 1))
    jobs = [_job("1", pids=(10, 11, 12))]
    decisions = policy.step(0.0, Demand(tasks_waiting=3, tasks_running=2, workers=workers), jobs)
    policy.validate()
    assert [(type(d), d.count) for d in decisions] == [(Start, 2)]  # 5 unfinished -> 3 jobs, 1 there


def test_min_workers_are_started_without_demand_and_kept() -> None:
    policy = ScalingPolicy(_settings(min_workers=3))
    (start,) = policy.step(0.0, Demand(0, 0, ()), [])
    assert start.count == 2 and "below --min-workers 3" in start.reason
    jobs = [_job("1", pids=(10, 11, 12)), _job("2", pids=(20, 21, 22))]
    idle = Demand(0, 0, (_worker(11), _worker(12), _worker(21), _worker(22)))
    for now in range(1, 100):
        assert policy.step(float(now), idle, jobs) == []  # idle for long, but the floor
        policy.validate()


def test_a_job_is_retired_only_after_all_its_workers_were_idle_for_idle_seconds() -> None:
    policy = ScalingPolicy(_settings(idle_seconds=10.0))
    jobs = [_job("1", pids=(10, 11, 12)), _job("2", pids=(20, 21, 22))]
    busy = Demand(0, 1, (_worker(11), _worker(12), _worker(21, 1), _worker(22)))
    idle = Demand(0, 0, (_worker(11), _worker(12), _worker(21), _worker(22)))
    assert policy.step(0.0, busy, jobs) == []
    assert policy.step(9.9, busy, jobs) == []  # job 1 idle 9.9 s; job 2 busy
    (retire,) = policy.step(10.0, busy, jobs)
    assert retire == Retire("1", retire.reason) and "had no task for 10s" in retire.reason
    policy.validate()
    jobs = [dataclasses.replace(jobs[0], retiring=True), jobs[1]]  # as the backend now lists it
    assert policy.step(15.0, idle, jobs) == []  # job 2 became idle at 15
    (retire,) = policy.step(25.0, idle, jobs)
    assert retire.job_id == "2"


def test_idle_noise_shorter_than_idle_seconds_retires_nothing() -> None:
    policy = ScalingPolicy(_settings(idle_seconds=10.0))
    jobs = [_job("1", pids=(10, 11, 12))]
    rng = random.Random(7)
    for now in range(0, 300):
        busy_at = now % 9 == 0  # a task every 9 s, on one worker or the other
        pid = rng.choice((11, 12))
        workers = tuple(_worker(p, 1 if busy_at and p == pid else 0) for p in (11, 12))
        demand = Demand(0, int(busy_at), workers)
        decisions = policy.step(float(now), demand, jobs)
        policy.validate()
        # each worker alone may idle more than 10 s, but the job never does: it keeps its workers
        assert not any(isinstance(d, Retire) for d in decisions) or not busy_at


def test_a_queued_job_is_cancelled_once_the_surplus_lasted_idle_seconds() -> None:
    policy = ScalingPolicy(_settings(idle_seconds=5.0))
    policy.step(0.0, Demand(4, 0, ()), [])  # starts 2 jobs
    queued = [_job("1", running=False), _job("2", running=False)]
    assert policy.step(1.0, Demand(0, 0, ()), queued) == []  # the tasks ran elsewhere; surplus since 1
    assert policy.step(5.9, Demand(0, 0, ()), queued) == []
    decisions = policy.step(6.0, Demand(0, 0, ()), queued)
    policy.validate()
    assert sorted(d.job_id for d in decisions) == ["1", "2"]
    assert all("has not started" in d.reason for d in decisions)


def test_without_process_information_jobs_are_retired_by_counting_idle_workers_once() -> None:
    policy = ScalingPolicy(_settings(idle_seconds=5.0))
    jobs = [_job("a", mapped=False), _job("b", mapped=False, submitted_at=0.5)]
    workers = (_worker(1), _worker(2), _worker(3, 1), _worker(4))
    assert policy.step(0.0, Demand(0, 1, workers), jobs) == []
    (retire,) = policy.step(5.0, Demand(0, 1, workers), jobs)  # 3 idle workers: one job's worth
    policy.validate()
    assert retire.job_id == "b" and "cluster manager's choice" in retire.reason  # the newest
    # the retired replica's workers may still be connected while they leave: they are not counted again
    jobs = [jobs[0]]
    for now in (6.0, 7.0, 30.0):
        assert policy.step(now, Demand(0, 1, workers), jobs) == []
        policy.validate()


def test_a_job_whose_workers_never_connect_fails_and_starts_wait_a_growing_backoff() -> None:
    policy = ScalingPolicy(_settings(start_timeout_seconds=20.0, backoff_seconds=30.0))
    waiting = Demand(tasks_waiting=2, tasks_running=0, workers=())
    (start,) = policy.step(0.0, waiting, [])
    jobs = [_job("1", pids=(10, 11, 12))]
    assert policy.step(1.0, waiting, jobs) == []  # running since 1 s
    assert policy.step(21.0, waiting, jobs) == []
    decisions = policy.step(21.5, waiting, jobs)
    policy.validate()
    assert len(decisions) == 1 and decisions[0].failed and "start timeout 20s" in decisions[0].reason
    assert policy.notes and "held back until 30s after the last of 1 failed job(s)" in policy.notes[0]
    assert policy.step(51.0, waiting, []) == []  # backoff until 51.5
    (again,) = policy.step(51.5, waiting, [])
    assert isinstance(again, Start)
    policy.validate()
    jobs = [_job("2", pids=(20, 21, 22))]
    policy.step(52.0, waiting, jobs)
    decisions = policy.step(72.5, waiting, jobs)  # fails too: the backoff doubles
    assert decisions[0].failed
    assert "held back until 60s after the last of 2 failed job(s)" in policy.notes[0]
    policy.step(100.0, Demand(2, 0, (_worker(99),)), [])  # a worker connects (from elsewhere): backoff over
    assert policy.notes == [] and policy.describe()["failures"] == 0


def test_a_job_that_ends_on_its_own_is_a_failure() -> None:
    policy = ScalingPolicy(_settings(backoff_seconds=30.0))
    jobs = [_job("1", pids=(10, 11, 12))]
    policy.step(0.0, Demand(0, 2, (_worker(11, 1), _worker(12, 1))), jobs)
    assert policy.step(1.0, Demand(2, 0, ()), []) == []
    assert policy.warnings == ["job 1 ended on its own"]
    assert "held back" in policy.notes[0]


def test_a_retired_job_that_ends_is_no_failure() -> None:
    policy = ScalingPolicy(_settings(idle_seconds=1.0))
    jobs = [_job("1", pids=(10, 11, 12))]
    idle = Demand(0, 0, (_worker(11), _worker(12)))
    policy.step(0.0, idle, jobs)
    (retire,) = policy.step(1.0, idle, jobs)
    policy.step(2.0, Demand(0, 0, ()), [])
    assert policy.warnings == [] and policy.describe()["failures"] == 0


def test_bad_input_is_refused() -> None:
    policy = ScalingPolicy(_settings())
    policy.step(5.0, Demand(0, 0, ()), [])
    with pytest.raises(ValueError, match="time went backwards"):
        policy.step(4.0, Demand(0, 0, ()), [])
    with pytest.raises(ValueError, match="same name"):
        policy.step(6.0, Demand(0, 0, (_worker(1), _worker(1))), [])
    with pytest.raises(ValueError, match="same id"):
        policy.step(7.0, Demand(0, 0, ()), [_job("1"), _job("1")])


# --- over time, in the simulated world ----------------------------------------------------------------------------


def test_burst_grows_to_max_then_shrinks_to_min_within_the_targets() -> None:
    world = World(_settings(min_workers=2, max_workers=8, workers_per_job=2, idle_seconds=10.0), task_seconds=1.0)
    world.run(3)
    assert world.live_jobs() == 1  # the floor
    world.add_tasks(200)
    burst_at = world.now
    world.step()
    assert world.starts()[-1] == (burst_at + 1, 3)  # the first status after the burst starts every missing job
    world.run(200)
    assert world.held == 0 and world.done == 200
    assert max(live for _, live in world.live_history) == 4
    assert sum(count for _, count in world.starts()) == 4, "the floor's job, then 3: none twice while they start"
    back_at_min = min(t for t, live in world.live_history if t > world.last_done_at and live == 1)
    assert back_at_min <= world.last_done_at + 10.0 + 2 * world.interval
    assert world.live_jobs() == 1


@pytest.mark.parametrize("mapped", [True, False])
def test_noisy_demand_does_not_flap(mapped: bool) -> None:
    """Demand jumping between 2 and 8 tasks every second, with a peak of 8 at least every 7 s (shorter than
    idle_seconds): the pool grows once to 8 and stays there; nothing is retired and started again."""
    world = World(_settings(max_workers=8, workers_per_job=1, idle_seconds=10.0), task_seconds=1.0, mapped=mapped)
    rng = random.Random(1)
    for second in range(300):
        world.add_tasks(8 if second % 7 == 0 else rng.randint(2, 8))
        world.step()
    assert sum(count for _, count in world.starts()) == 8, f"started once each: {world.starts()}"
    assert world.retires() == []
    changes = sum(1 for (_, a), (_, b) in zip(world.live_history, world.live_history[1:]) if a != b)
    assert changes <= 3, "the pool changed size only while growing"
    world.run(40)
    assert world.live_jobs() == 0
    last_retire = max(t for t, _ in world.retires())
    assert last_retire <= world.last_done_at + 10.0 + 2 * world.interval


@settings(max_examples=60, deadline=None)
@given(
    arrivals=st.lists(st.integers(min_value=0, max_value=30), min_size=5, max_size=80),
    per_job=st.integers(min_value=1, max_value=3),
    min_jobs=st.integers(min_value=0, max_value=2),
    mapped=st.booleans(),
    broken=st.integers(min_value=0, max_value=2),
)
def test_any_demand_keeps_the_invariants_and_settles_at_min(arrivals, per_job, min_jobs, mapped, broken) -> None:
    settings_ = PolicySettings(
        max_workers=4 * per_job,
        min_workers=min_jobs * per_job,
        workers_per_job=per_job,
        idle_seconds=5.0,
        start_timeout_seconds=8.0,
        backoff_seconds=4.0,
    )
    # without process information a job that never connects cannot be told from one that is slow: only mapped jobs
    world = World(settings_, mapped=mapped, break_next_jobs=broken if mapped else 0)
    for count in arrivals:
        world.add_tasks(count)
        world.step()  # validate() and the max are checked in every step
    world.run(400)  # long enough for every task, failure backoff and idle timer
    assert world.held == 0 and world.done == sum(arrivals), "every task ran"
    assert world.live_jobs() == settings_.min_jobs
    assert all(job.retired_at is None for job in world.jobs.values())
