"""The JIT warm-up's private workload (scaler/scheduler/warmup.py): it routes every task and leaves nothing behind."""

from __future__ import annotations

import logging

import pytest

from scaler.protocol import TaskResult
from scaler.scheduler import warmup

pytestmark = pytest.mark.timeout(60)


def test_a_round_routes_the_map_and_the_tree_and_leaves_the_private_core_empty() -> None:
    workload = warmup._Workload()
    core = workload.core
    assert len(core.workers) == 2 and len(core.clients) == 1
    for round_number in range(1, 3):  # the second round reuses the task ids of the first
        workload.round()
        core.validate()
        assert not core.tasks and not core.objects
        # what the client asked for: every map task, and of the tree only its root
        assert core.sent_counts[TaskResult.WHICH] == round_number * (warmup.MAP_TASKS + 1)
    workload.leave()
    assert not core.workers and not core.clients


def test_warm_up_logs_nothing_and_gives_the_loggers_back(caplog: pytest.LogCaptureFixture) -> None:
    core_logger = logging.getLogger("scaler.scheduler.core")
    caplog.set_level(logging.DEBUG)
    report = warmup.warm_up(0.0)  # at least one round, however short the time
    assert report.rounds == 1 and report.tasks == warmup.MAP_TASKS + 2 * warmup.TREE_LEAVES - 1
    assert not [record for record in caplog.records if record.name.startswith("scaler")]
    assert core_logger.disabled is False
    core_logger.info("after the warm-up")
    assert [record.getMessage() for record in caplog.records] == ["after the warm-up"]


def test_only_pypy_is_warmed() -> None:
    assert warmup.should_warm_up(1.0) is warmup.IS_PYPY
    assert warmup.should_warm_up(0.0) is False


def test_a_failed_warm_up_is_logged_and_the_scheduler_serves_anyway(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from scaler.scheduler import shell

    def broken(seconds: float) -> warmup.WarmupReport:
        raise AssertionError("JIT warm-up: 3 synthetic tasks left in the private core")

    monkeypatch.setattr(shell, "warm_up", broken)
    caplog.set_level(logging.INFO)
    shell._warm_up_jit(0.1)  # returns: run_scheduler goes on to serve
    (record,) = [r for r in caplog.records if r.name == "scaler.scheduler.shell"]
    assert record.levelno == logging.ERROR and "serving without it" in record.getMessage()
    assert "3 synthetic tasks left" in caplog.text  # the traceback says what went wrong
