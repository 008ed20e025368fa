"""The shell's status when psutil cannot read the scheduler's own /proc files (a scheduler out of descriptors)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import List

import pytest

from scaler.scheduler.settings import SchedulerSettings
from scaler.scheduler.shell import SchedulerShell

pytestmark = pytest.mark.timeout(60)


class _Process:
    """psutil.Process's part the status reads, failing while `failing` is set, as at the open-files limit."""

    def __init__(self) -> None:
        self.failing = False
        self.rss = 1000

    def oneshot(self) -> _Process:
        return self

    def __enter__(self) -> None:
        if self.failing:
            raise OSError(24, "Too many open files")

    def __exit__(self, *exc: object) -> None:
        pass

    def cpu_percent(self) -> float:
        return 12.5

    def memory_info(self) -> SimpleNamespace:
        return SimpleNamespace(rss=self.rss)


def test_a_status_repeats_the_last_usage_when_psutil_cannot_read_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = SchedulerSettings(f"ipc://{tmp_path}/scheduler", monitor_address=f"ipc://{tmp_path}/monitor")
    caplog.set_level(logging.WARNING, logger="scaler.scheduler.shell")
    seen: List[tuple] = []

    async def scenario() -> None:
        shell = SchedulerShell(settings, handle_signals=False)
        serving = asyncio.ensure_future(shell.run())
        try:
            process = shell._process = _Process()
            status = shell.status()
            seen.append((status.cpu, status.rss))
            process.failing, process.rss = True, 2000
            for _ in range(3):
                status = shell.status()  # no exception: the tick that publishes it goes on
                seen.append((status.cpu, status.rss))
            process.failing = False
            seen.append((shell.status().cpu, shell.status().rss))
            process.failing = True
            shell.status()
        finally:
            shell.stop("test over")
            await serving

    asyncio.run(scenario())
    assert seen == [(12.5, 1000), (12.5, 1000), (12.5, 1000), (12.5, 1000), (12.5, 2000)]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # once per stretch of failures, not once per status
    assert "cannot read its own CPU and memory" in warnings[0] and "Too many open files" in warnings[0]
