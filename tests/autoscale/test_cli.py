"""`scaler_autoscale` from its command line: help, refused arguments, and what it logs when things go wrong."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from scaler.testing.processes import ROOT, ScalerProcess, wait_for
from tests.autoscale.scenario import Scenario


def _run(*arguments: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scaler.autoscale", *arguments],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        env=env,
        check=False,
    )


def test_help_lists_every_option() -> None:
    done = _run("-h")
    assert done.returncode == 0
    for option in (
        "--max-workers",
        "--min-workers",
        "--workers-per-job",
        "--idle-seconds",
        "--backend",
        "--deployment",
    ):
        assert option in done.stdout
    assert "-- scaler_cluster options" in done.stdout and "examples:" in done.stdout


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["tcp://127.0.0.1:1"], "the following arguments are required: --max-workers"),
        (["tcp://127.0.0.1:1", "--max-workers", "1", "--workers-per-job", "2"], "must be at least workers-per-job"),
        (["tcp://127.0.0.1:1", "--max-workers", "4", "--min-workers", "5"], "more than max-workers 4"),
        (["tcp://127.0.0.1:1", "--max-workers", "4", "--interval", "0"], "--interval must be > 0"),
        (["tcp://127.0.0.1:1", "--max-workers", "4", "--idle-seconds", "-1"], "idle-seconds must be a finite number"),
        (
            ["tcp://127.0.0.1:1", "--max-workers", "4", "--backend", "kubernetes", "--", "-n", "2"],
            "starts no scaler_cluster",
        ),
        (["tcp://127.0.0.1:1", "--max-workers", "4", "--backend", "nomad"], "invalid choice: 'nomad'"),
    ],
)
def test_arguments_that_cannot_work_are_refused(arguments, message) -> None:
    done = _run(*arguments)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_a_bad_address_is_refused() -> None:
    done = _run("127.0.0.1:2345", "--max-workers", "1")
    assert done.returncode == 1 and "scaler_autoscale: address must start with tcp:// or ipc://" in done.stderr


def test_a_timeline_that_cannot_be_written_is_refused(tmp_path) -> None:
    done = _run("tcp://127.0.0.1:1", "--max-workers", "1", "--timeline", str(tmp_path / "no" / "such" / "file"))
    assert done.returncode == 1 and "cannot write --timeline" in done.stderr and "No such file" in done.stderr


def test_slurm_needs_its_commands() -> None:
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # python, and no sbatch
    done = _run("tcp://127.0.0.1:1", "--max-workers", "1", "--backend", "slurm", env=env)
    assert done.returncode == 2 and "needs sbatch, squeue and scancel on PATH" in done.stderr


@pytest.mark.timeout(60)
def test_jobs_that_fail_are_not_restarted_in_a_loop(tmp_path) -> None:
    """A worker command that exits at once: one job, a warning, then nothing until the backoff is over."""
    with Scenario(tmp_path, status_interval=0.25) as scenario:
        autoscaler = scenario.start_autoscaler(
            ["--max-workers", "2", "--min-workers", "1", "--backoff", "60", "--worker-command", "false"],
            worker_arguments=None,
        )
        wait_for(lambda: "held back" in autoscaler.output(), 20, "the autoscaler to hold back after the failure")
        scenario.wait_for_steps(len(scenario.timeline()) + 8)  # two more seconds of statuses
        log = autoscaler.output()
        assert len(re.findall(r"started job\(s\) \d+", log)) == 1, log
        assert "scaler_cluster exited with code 1, not retired" in log
        assert re.search(r"job \d+ ended on its own", log)
        assert "1 job(s) wanted, held back until 60s after the last of 1 failed job(s)" in log
        assert log.count("held back") == 1, "the same note is not logged at every status"
        assert scenario.stop_autoscaler(timeout=20) == 0


@pytest.mark.timeout(30)
def test_no_status_is_reported_once_and_nothing_is_decided(tmp_path) -> None:
    autoscaler = ScalerProcess(
        "scaler.autoscale",
        ["tcp://127.0.0.1:1", "-ma", f"ipc://{tmp_path}/nothing", "--max-workers", "2", "--status-timeout", "0.5"],
        str(tmp_path / "autoscale.log"),
    )
    try:
        autoscaler.wait_for_output("no status from ipc://")
        assert "is the scheduler running, and is this its monitor address?" in autoscaler.output()
    finally:
        assert autoscaler.stop() == 0
    assert autoscaler.output().count("no status from") == 1
    assert "started job" not in autoscaler.output()
