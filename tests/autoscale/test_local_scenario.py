"""`scaler_autoscale --backend local` with real processes: a scheduler, scaler_cluster jobs started and retired by
the autoscaler, a burst of tasks from a client. The faster twin of the Slurm scenario, and the policy's test bed."""

from __future__ import annotations

import re

import pytest

from scaler.testing.processes import all_exited
from tests.autoscale.scenario import Scenario

INTERVAL = 0.5
IDLE = 3.0


@pytest.mark.timeout(90)
def test_local_pool_grows_with_a_burst_and_shrinks_back_to_min(tmp_path) -> None:
    with Scenario(tmp_path, status_interval=INTERVAL) as scenario:
        autoscaler = scenario.start_autoscaler(
            ["--backend", "local", "--min-workers", "1", "--max-workers", "3", "--idle-seconds", str(IDLE)]
        )
        scenario.wait_for_workers(1, timeout=30)  # the floor, with no task at all

        sent_at = scenario.burst(tasks=30, seconds=0.2)
        runs = scenario.runs()
        assert sorted(runs) == list(range(30)) and set(runs.values()) == {1}, f"each task ran once: {runs}"
        assert max(sample.workers for sample in scenario.samples) == 3, "the pool reached --max-workers"

        last_end = scenario.last_task_end()
        scenario.wait_for_workers(1, timeout=IDLE + 20)
        timeline = scenario.timeline()
        (start,) = [entry for entry in timeline if entry["started"] and entry["time"] >= sent_at]
        assert start["started"] == 2, "every missing job started in one decision"
        assert scenario.statuses_until(sent_at, start) <= 3, "scaled up within 3 status intervals of the burst"
        retires = [entry for entry in timeline if entry["retired"]]
        assert sum(len(entry["retired"]) for entry in retires) == 2
        assert scenario.statuses_until(last_end + IDLE, retires[-1]) <= 2, (
            "back to --min-workers within --idle-seconds plus 2 intervals"
        )
        assert min(sample.workers for sample in scenario.samples if sample.time > sent_at) >= 1, "never below min"

        log = autoscaler.output()
        assert "below --min-workers 1; starting 1 job(s) of 1" in log
        assert re.search(r"scale up: \d+ task\(s\) waiting, \d+ running; .* want 3 \(max 3\): starting 2 job\(s\)", log)
        assert len(re.findall(r"retire: job \d+: its 1 worker\(s\) had no task for \d+s \(idle-seconds 3\)", log)) == 2

        children = autoscaler.descendants()
        assert scenario.stop_autoscaler(timeout=30) == 0
        assert all_exited(children)
        assert "stopped (SIGTERM)" in autoscaler.output()
