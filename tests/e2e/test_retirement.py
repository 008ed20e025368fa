"""Graceful retirement with real processes: `scaler_cluster` on SIGTERM retires its workers (README, "Retiring
workers: SIGTERM"). Each task writes a line when it starts, so a task that ran twice shows; every result must be
exact, and the retired cluster must exit with code 0 and leave no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import cloudpickle
import psutil
import pytest

from scaler import Client
from scaler.testing.processes import ScalerProcess, wait_exited, wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])

DURATIONS = (0.02, 0.1, 0.3, 0.8)  # varied, so that some tasks run and others wait when SIGTERM comes


def record_then_square(index: int, seconds: float, path: str) -> int:
    with open(path, "a") as runs:  # one short O_APPEND write per start: lines never interleave
        runs.write(f"{index} {os.getpid()}\n")
    time.sleep(seconds)
    return index * index


def stall_on_first_run(path: str) -> str:
    with open(path, "a") as runs:
        runs.write(f"{os.getpid()}\n")
    with open(path) as runs:
        if len(runs.readlines()) == 1:
            time.sleep(120)  # only the first run stalls: the run elsewhere returns at once
    return "done"


def runs(path: Path) -> List[List[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def start_cluster(address: str, log: Path, workers: int, retire_timeout: float) -> ScalerProcess:
    process = ScalerProcess(
        "scaler.cluster",
        ["-n", str(workers), "--retire-timeout", str(retire_timeout), "--heartbeat-interval", "0.5", address],
        str(log),
    )
    wait_for(lambda: process.output().count(": connected to") == workers, 20, f"{workers} worker(s) of {log.name}")
    return process


def assert_exits_cleanly(process: ScalerProcess, tree: List[psutil.Process], within: float) -> None:
    assert process.popen.wait(within) == 0, process.output()
    alive = wait_exited(tree, 5)
    assert not alive, f"left behind: {alive}"


@pytest.mark.parametrize("to", ["scaler_cluster", "every process"])
def test_sigterm_retires_a_cluster_mid_map_without_losing_or_repeating_a_task(to: str, scheduler, tmp_path) -> None:
    """`every process`: as Slurm signals a job step (`scancel --signal=TERM`, a time limit's `--signal=TERM@120`),
    the workers, fork servers and processors get it too; processors running tasks must not die of it."""
    address, scheduler_process = scheduler
    ledger = tmp_path / "runs.txt"
    retiring = start_cluster(address, tmp_path / "retiring.log", workers=2, retire_timeout=30)
    staying = start_cluster(address, tmp_path / "staying.log", workers=2, retire_timeout=30)
    try:
        tree = retiring.descendants()
        retiring_pids = {str(p.pid) for p in tree}
        with Client(address=address) as client:
            count = 32
            futures = [
                client.submit(record_then_square, i, DURATIONS[i % len(DURATIONS)], str(ledger)) for i in range(count)
            ]
            # SIGTERM while the retiring cluster runs a task and holds queued ones
            wait_for(lambda: any(pid in retiring_pids for _, pid in runs(ledger)), 20, "a task on the retiring cluster")
            for pid in [retiring.pid, *(p.pid for p in tree)] if to == "every process" else [retiring.pid]:
                os.kill(pid, signal.SIGTERM)
            assert [future.result(timeout=60) for future in futures] == [i * i for i in range(count)]
        started = [index for index, _ in runs(ledger)]
        assert sorted(started) == sorted(str(i) for i in range(count)), "every task started exactly once"
        assert_exits_cleanly(retiring, tree, within=20)
        output = retiring.output()
        assert "retiring 2 worker(s)" in output and "every worker retired" in output
        assert output.count("settled") == 2, "both workers left on the scheduler's go-ahead"
        held = [int(n) for n in re.findall(r"retiring \(received SIGTERM\): (\d+) task", scheduler_process.output())]
        assert len(held) == 2 and max(held) >= 2, "the retiring workers held queued tasks, which moved and ran once"
        assert staying.popen.poll() is None
    finally:
        retiring.stop()
        staying.stop()


@pytest.mark.parametrize("how", ["deadline", "second SIGTERM"])
def test_a_task_running_past_the_deadline_or_a_second_sigterm_runs_elsewhere_once_more(
    how: str, scheduler, tmp_path
) -> None:
    """The one case where retirement runs a task again: it did not finish in time. Its future still settles once,
    with the result of the run elsewhere, and the cluster stops within seconds, not after the task."""
    address, scheduler_process = scheduler
    ledger = tmp_path / "runs.txt"
    retiring = start_cluster(
        address, tmp_path / "retiring.log", workers=1, retire_timeout=1 if how == "deadline" else 60
    )
    staying = None
    try:
        tree = retiring.descendants()
        with Client(address=address) as client:
            future = client.submit(stall_on_first_run, str(ledger))
            wait_for(lambda: len(runs(ledger)) == 1, 20, "the task to start on the retiring cluster")
            staying = start_cluster(address, tmp_path / "staying.log", workers=1, retire_timeout=30)
            sent = time.monotonic()
            retiring.popen.send_signal(signal.SIGTERM)
            if how == "second SIGTERM":
                retiring.wait_for_output("retiring, 1 task(s)")
                retiring.popen.send_signal(signal.SIGTERM)
            assert future.result(timeout=30) == "done"
        assert_exits_cleanly(retiring, tree, within=15)
        assert time.monotonic() - sent < 15, "stopped long before the task would have ended"
        assert len(runs(ledger)) == 2
        if how == "deadline":
            assert "retirement deadline passed" in scheduler_process.output()
            assert "the deadline passed" in retiring.output()
        else:
            assert "stopping the 1 worker(s) still retiring at once" in retiring.output()
    finally:
        retiring.stop()
        if staying is not None:
            staying.stop()


def end_children_with_sigterm() -> tuple:
    forked = os.fork()
    if forked == 0:
        time.sleep(30)
        os._exit(0)
    os.kill(forked, signal.SIGTERM)
    _, status = os.waitpid(forked, 0)
    program = subprocess.Popen(["sleep", "30"])
    program.terminate()
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else None, program.wait(10)


def test_processes_a_task_starts_still_end_on_sigterm(cluster) -> None:
    """Processors ignore SIGTERM (a job manager's signal retires the worker), but not what their tasks fork or run."""
    address, _ = cluster
    with Client(address=address) as client:
        assert client.submit(end_children_with_sigterm).result(timeout=30) == (signal.SIGTERM, -signal.SIGTERM)
