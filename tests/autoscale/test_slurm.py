"""Scaler on a real Slurm: a one-node cluster (munged, slurmctld, slurmd; local_slurm.py) on this machine.

- the elastic pool: a scheduler with no worker, `scaler_autoscale --backend slurm`, a burst of tasks; the pool grows
  through Slurm jobs (squeue), every result is right, no task runs twice, the pool shrinks back to --min-workers;
- the fixed pool: README's `sbatch deploy/slurm/scaler-pool.sbatch ADDRESS`, stopped with `scancel --signal=TERM`.

Set SCALER_SLURM_TIMELINE=FILE to keep the elastic scenario's timeline (bench/scale/plot_autoscale.py draws it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from scaler.testing.processes import ROOT, wait_for
from tests.autoscale.local_slurm import LocalSlurm, slurm_available
from tests.autoscale.scenario import Scenario

INTERVAL = 0.5  # the scheduler's status interval, and the autoscaler's
IDLE = 3.0
JOB_NAME = "scaler-elastic"
POOL_SCRIPT = Path(ROOT) / "deploy" / "slurm" / "scaler-pool.sbatch"

pytestmark = pytest.mark.skipif(slurm_available() is not None, reason=str(slurm_available()))


@pytest.fixture(scope="module")
def slurm() -> Iterator[LocalSlurm]:
    cluster = LocalSlurm()
    cluster.start()
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)  # for the processes the tests start: the autoscaler, sbatch
    try:
        yield cluster
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        left = cluster.stop()
    assert left == [], "no process of the Slurm cluster or its jobs outlived it"


def _running(jobs) -> int:
    return sum(1 for state in (jobs or {}).values() if state == "RUNNING")


@pytest.mark.timeout(120)
def test_elastic_pool_grows_through_slurm_jobs_and_shrinks_back(slurm: LocalSlurm, tmp_path) -> None:
    with Scenario(
        tmp_path, status_interval=INTERVAL, count_jobs=lambda: slurm.jobs(JOB_NAME), more_logs=slurm.logs
    ) as scenario:
        autoscaler = scenario.start_autoscaler(
            [
                "--backend",
                "slurm",
                "--job-name",
                JOB_NAME,
                f"--sbatch-option=--output={tmp_path}/slurm-%j.out",
                "--min-workers",
                "0",
                "--max-workers",
                "4",
                "--workers-per-job",
                "2",
                "--idle-seconds",
                str(IDLE),
                "--retire-timeout",
                "30",
            ]
        )
        scenario.wait_for_steps(2)  # the autoscaler has looked at two statuses: no demand, no job
        assert slurm.jobs(JOB_NAME) == {} and scenario.workers() == 0
        assert not any(entry["started"] for entry in scenario.timeline())

        sent_at = scenario.burst(tasks=40, seconds=0.25)
        runs = scenario.runs()
        assert sorted(runs) == list(range(40)) and set(runs.values()) == {1}, f"each task ran once: {runs}"
        last_end = scenario.last_task_end()

        wait_for(lambda: slurm.jobs(JOB_NAME) == {}, IDLE + 30, "every Slurm job to end after the burst")
        empty_at = time.time()
        scenario.wait_for_workers(0, timeout=5)  # the scheduler's next status shows them gone

        timeline = scenario.timeline()
        (start,) = [entry for entry in timeline if entry["started"]]
        assert start["started"] == 2, "both jobs of 2 workers submitted in one decision"
        assert scenario.statuses_until(sent_at, start) <= 3, "scaled up within 3 status intervals of the burst"
        assert max(sample.workers for sample in scenario.samples) == 4, "the pool reached --max-workers"
        assert max(_running(sample.jobs) for sample in scenario.samples) == 2, "squeue showed both jobs running"
        retires = [entry for entry in timeline if entry["retired"]]
        assert sorted(job for entry in retires for job in entry["retired"]) == sorted(
            {job for sample in scenario.samples for job in (sample.jobs or {})}
        ), "every job was retired by the autoscaler, none ended on its own"
        retired_at = max(entry["time"] for entry in retires)
        assert scenario.statuses_until(last_end + IDLE, retires[-1]) <= 2, "retired within --idle-seconds + 2 intervals"
        assert "ended without being retired" not in autoscaler.output()

        _keep_timeline(scenario, sent_at, start["time"], last_end, retired_at, empty_at)
        assert scenario.stop_autoscaler(timeout=30) == 0


def _keep_timeline(
    scenario: Scenario, sent_at: float, started_at: float, last_end: float, retired_at: float, empty_at: float
) -> None:
    """Where SCALER_SLURM_TIMELINE says: the samples and the events, in seconds from the burst."""
    path = os.environ.get("SCALER_SLURM_TIMELINE")
    if not path:
        return
    first_four = min(sample.time for sample in scenario.samples if sample.workers == 4)
    first_running = min(sample.time for sample in scenario.samples if _running(sample.jobs) == 2)
    record = {
        "settings": {"interval": INTERVAL, "idle_seconds": IDLE, "max_workers": 4, "workers_per_job": 2, "tasks": 40},
        "events": {
            "burst": 0.0,
            "jobs submitted": started_at - sent_at,
            "both jobs running": first_running - sent_at,
            "4 workers connected": first_four - sent_at,
            "last task done": last_end - sent_at,
            "jobs retired": retired_at - sent_at,
            "queue empty": empty_at - sent_at,
        },
        "samples": [
            {
                "t": round(sample.time - sent_at, 3),
                "workers": sample.workers,
                "busy": sample.busy,
                "jobs_running": _running(sample.jobs),
                "jobs_pending": sum(1 for state in (sample.jobs or {}).values() if state != "RUNNING"),
            }
            for sample in scenario.samples
        ],
    }
    Path(path).write_text(json.dumps(record, indent=1) + "\n")


@pytest.mark.timeout(90)
def test_fixed_pool_sbatch_script(slurm: LocalSlurm, tmp_path) -> None:
    with Scenario(tmp_path, status_interval=INTERVAL, more_logs=slurm.logs) as scenario:
        environment = slurm.environment()
        environment["PATH"] = f"{os.path.dirname(sys.executable)}:{environment['PATH']}"  # scaler_cluster
        environment["PYTHONPATH"] = ROOT  # the workers import the tasks from tests/
        job_id = _sbatch(environment, tmp_path, scenario.address)
        scenario.wait_for_workers(2, timeout=60)  # --cpus-per-task=2: two workers
        assert slurm.jobs("scaler-pool") == {job_id: "RUNNING"}

        scenario.burst(tasks=20, seconds=0.1)
        runs = scenario.runs()
        assert sorted(runs) == list(range(20)) and set(runs.values()) == {1}

        slurm.run("scancel", "--signal=TERM", job_id)  # as README says: the workers leave, the job ends
        scenario.wait_for_workers(0, timeout=30)
        wait_for(lambda: slurm.jobs("scaler-pool") == {}, 30, "the pool's job to end")
        output = (tmp_path / f"pool-{job_id}.out").read_text()
        assert "ClusterProcess: received SIGTERM" in output and "every worker retired" in output, output


@pytest.mark.timeout(120)
def test_scancel_signal_term_mid_burst_retires_a_pool_without_losing_or_repeating_a_task(
    slurm: LocalSlurm, tmp_path
) -> None:
    """Two pools of one worker; one gets `scancel --signal=TERM` (Slurm's SIGTERM to every process of the step) while
    the burst runs: its running task finishes, its queued ones run on the other pool, each task starts once."""
    with Scenario(tmp_path, status_interval=INTERVAL, more_logs=slurm.logs) as scenario:
        environment = slurm.environment()
        environment["PATH"] = f"{os.path.dirname(sys.executable)}:{environment['PATH']}"  # scaler_cluster
        environment["PYTHONPATH"] = ROOT  # the workers import the tasks from tests/
        leaving = _sbatch(environment, tmp_path, scenario.address, "--cpus-per-task=1")
        scenario.wait_for_workers(1, timeout=60)  # the first pool takes its share of the burst
        staying = _sbatch(environment, tmp_path, scenario.address, "--cpus-per-task=1")
        scenario.wait_for_workers(2, timeout=60)

        def retire_the_first_pool() -> None:
            wait_for(lambda: scenario.journal.exists() and scenario.runs(), 20, "the first task to start")
            slurm.run("scancel", "--signal=TERM", leaving)

        scenario.burst(tasks=16, seconds=0.3, meanwhile=retire_the_first_pool)
        runs = scenario.runs()
        assert sorted(runs) == list(range(16)) and set(runs.values()) == {1}, f"each task started once: {runs}"
        wait_for(lambda: leaving not in slurm.jobs("scaler-pool"), 30, "the retired pool's job to end")
        output = (tmp_path / f"pool-{leaving}.out").read_text()
        assert "every worker retired" in output and "retired: every task you held is settled" in output, output
        assert slurm.jobs("scaler-pool") == {staying: "RUNNING"}
        slurm.run("scancel", "--signal=TERM", staying)
        wait_for(lambda: slurm.jobs("scaler-pool") == {}, 30, "the other pool's job to end")


def _sbatch(environment: dict, directory: Path, address: str, *options: str) -> str:
    done = subprocess.run(
        ["sbatch", "--parsable", f"--output={directory}/pool-%j.out", *options, str(POOL_SCRIPT), address],
        env=environment,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.strip().split(";")[0]
