"""The scheduler's --per-worker-queue-size caps what one worker holds, whatever capacity it announces."""

from __future__ import annotations

import pytest

from scaler.protocol import Task
from scaler.scheduler.settings import SchedulerSettings
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, Harness


def test_a_worker_gets_no_more_than_the_scheduler_cap() -> None:
    harness = Harness(per_worker_queue_size=3)
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=100)
    out = harness.send(CLIENT, *[harness.task() for _ in range(5)])
    assert len([m for m in out[WORKER_A] if type(m) is Task]) == 3
    assert harness.core.state_counts[1] == 2  # the other two stay ready


def test_without_a_cap_the_worker_capacity_rules() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=4)
    out = harness.send(CLIENT, *[harness.task() for _ in range(5)])
    assert len([m for m in out[WORKER_A] if type(m) is Task]) == 4


def test_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="per_worker_queue_size"):
        SchedulerSettings(address="tcp://127.0.0.1:1", per_worker_queue_size=0)
