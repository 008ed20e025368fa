"""`--preload MODULE:FUNCTION` on real clusters: tasks see what it set up, every new task process runs it again (after a
kill, a crash, a timeout, to take over from a parked parent), so does an actor's process, and one that fails stops the
cluster at start with its traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Optional, Tuple

import psutil
import pytest

from scaler import Client, Cluster, SchedulerClusterCombo
from scaler.errors import ProcessorDiedError, TaskTimeoutError
from scaler.testing.processes import ROOT, ScalerProcess, wait_for
from scaler.worker.core import EXIT_PRELOAD_FAILED
from tests.e2e import preload_target

SETUP = "tests.e2e.preload_target:setup"
FAILING = "tests.e2e.preload_target:fail"
WAIT = 30.0  # seconds any one step may take on a loaded 2-core machine


State = Tuple[int, Optional[int], int]  # what preload_target.state returns


def crash_processor() -> None:
    os._exit(3)


def parent_and_child(client: Client) -> Tuple[State, State]:
    """The preload's state in this task's process and in that of a nested task it waits on: while it waits, its
    process is parked and the worker's next task process (forked then, or a spare) runs the child."""
    child = client.submit(preload_target.state)
    return preload_target.state(), child.result(timeout=WAIT)


class PreloadReader:
    """An actor that reports the preload's state in its own process."""

    def state(self) -> State:
        return preload_target.state()


@pytest.fixture
def preloaded(scheduler, tmp_path) -> Iterator[Tuple[str, ScalerProcess]]:
    """One worker from `scaler_cluster --preload`, beside the scheduler fixture."""
    address, _ = scheduler
    process = ScalerProcess("scaler.cluster", ["-n", "1", "--preload", SETUP, address], str(tmp_path / "cluster.log"))
    try:
        process.wait_for_output("Worker[0]: connected to", timeout=WAIT)
        yield address, process
    finally:
        process.stop()


def fresh_state(client: Client, old_pid: int) -> Tuple[int, int, int]:
    """The preload's state as a task sees it, from a task process other than `old_pid` (replaced by now)."""
    state = client.submit(preload_target.state).result(timeout=WAIT)
    assert state[0] != old_pid, "the process was replaced"
    return state


def test_tasks_see_the_preload_and_every_new_task_process_runs_it_again(preloaded) -> None:
    address, cluster = preloaded
    with Client(address) as client:
        pid, preloaded_in, runs = client.submit(preload_target.state).result(timeout=WAIT)
        assert (preloaded_in, runs) == (pid, 1), "the preload ran once, in the task's own process"
        assert client.submit(preload_target.state).result(timeout=WAIT) == (pid, pid, 1), "once per process"

        os.kill(pid, signal.SIGKILL)  # a task process killed between tasks
        wait_for(lambda: not psutil.pid_exists(pid), WAIT, "the killed task process to be gone")
        killed = pid
        pid, preloaded_in, runs = fresh_state(client, killed)
        assert (preloaded_in, runs) == (pid, 1), "its replacement ran the preload"

        with pytest.raises(ProcessorDiedError):  # a task that crashes its process
            client.submit(crash_processor).result(timeout=WAIT)
        crashed = pid
        pid, preloaded_in, runs = fresh_state(client, crashed)
        assert (preloaded_in, runs) == (pid, 1)

        with pytest.raises(TaskTimeoutError):  # a task stopped at its timeout: its process is replaced
            client.options(timeout_seconds=0.5).submit(time.sleep, 60).result(timeout=WAIT)
        timed_out = pid
        pid, preloaded_in, runs = fresh_state(client, timed_out)
        assert (preloaded_in, runs) == (pid, 1)
    assert "preload" not in cluster.output().lower().replace(SETUP.lower(), ""), "no complaint about it"


def test_the_process_that_takes_over_from_a_parked_parent_ran_the_preload(preloaded) -> None:
    """Without the preload there, the child would find the module as the fork server left it: (pid, None, 0)."""
    address, _ = preloaded
    with Client(address) as client:
        for _ in range(2):  # the second time, the first parent's process (a spare by then) may take over
            parent, child = client.submit(parent_and_child, client).result(timeout=WAIT)
            assert parent[0] != child[0], "the child ran in another process than its waiting parent"
            for pid, preloaded_in, runs in (parent, child):
                assert (preloaded_in, runs) == (pid, 1), "each process ran the preload once, before its first task"


def test_an_actors_process_runs_the_preload(preloaded) -> None:
    address, _ = preloaded
    with Client(address) as client:
        reader = client.actor(PreloadReader)
        pid, preloaded_in, runs = reader.state().result(timeout=WAIT)
        assert (preloaded_in, runs) == (pid, 1)
        assert client.submit(os.getpid).result(timeout=WAIT) != pid, "the actor has a process of its own"
        reader.close()


def test_a_failing_preload_stops_the_cluster_at_start_with_its_traceback() -> None:
    """No scheduler needed: the worker runs the preload before it registers."""
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "scaler.cluster", "-n", "2", "--preload", FAILING, "tcp://127.0.0.1:1"],
        capture_output=True, text=True, timeout=WAIT, cwd=ROOT,
    )  # fmt: skip
    assert completed.returncode == EXIT_PRELOAD_FAILED, completed.stdout + completed.stderr
    output = completed.stdout + completed.stderr
    assert "Traceback (most recent call last)" in output
    assert 'preload_target.py", line' in output and "RuntimeError: no pricing curves today" in output
    assert f"the preload {FAILING} failed at start" in output, "the launcher says why the cluster stops"
    assert "connecting to" not in output, "no worker registered"
    assert time.monotonic() - started < 15, "at once, not after a loop of dying workers"


def test_a_preload_that_cannot_be_imported_stops_the_cluster() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "scaler.cluster", "-n", "1", "--preload", "no_such_module:setup", "tcp://127.0.0.1:1"],
        capture_output=True, text=True, timeout=WAIT, cwd=ROOT,
    )  # fmt: skip
    assert completed.returncode == EXIT_PRELOAD_FAILED
    assert "ModuleNotFoundError: No module named 'no_such_module'" in completed.stdout
    assert "importlib" not in completed.stdout, "the traceback starts at the user's code, not the import machinery"


def test_a_preload_past_the_memory_limit_stops_the_cluster_at_start() -> None:
    """Its memory is the task process's: the watchdog samples that process while the preload runs."""
    completed = subprocess.run(
        [
            sys.executable, "-m", "scaler.cluster", "-n", "1",
            "--preload", "tests.e2e.preload_target:hold_memory",
            "--memory-limit", "150MB", "--memory-enforcement", "watchdog", "--heartbeat-interval", "0.1",
            "tcp://127.0.0.1:1",
        ],
        capture_output=True, text=True, timeout=WAIT, cwd=ROOT,
    )  # fmt: skip
    assert completed.returncode == EXIT_PRELOAD_FAILED, completed.stdout
    assert "past the memory stop threshold" in completed.stdout


def test_a_malformed_preload_is_refused_before_anything_starts() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "scaler.cluster", "--preload", "nonsense", "tcp://127.0.0.1:1"],
        capture_output=True, text=True, timeout=WAIT, cwd=ROOT,
    )  # fmt: skip
    assert completed.returncode == 2
    assert "argument --preload: must be MODULE:FUNCTION" in completed.stderr
    with pytest.raises(ValueError, match="preload must be MODULE:FUNCTION"):
        Cluster("tcp://127.0.0.1:1", preload="pricing.setup")
    with pytest.raises(TypeError, match="preload must be a str"):
        SchedulerClusterCombo(preload=print)


def test_cluster_and_combo_raise_when_the_preload_fails(tmp_path: Path) -> None:
    cluster = Cluster("tcp://127.0.0.1:1", n_workers=1, preload=FAILING, logging_paths=(str(tmp_path / "log"),))
    with pytest.raises(RuntimeError, match=f"the preload {FAILING} failed"):
        cluster.start()
    assert not cluster.is_alive()
    assert "RuntimeError: no pricing curves today" in (tmp_path / "log").read_text()
    with pytest.raises(RuntimeError, match=f"the preload {FAILING} failed"):
        SchedulerClusterCombo(n_workers=1, preload=FAILING, logging_paths=(str(tmp_path / "log"),))


def test_a_combo_with_a_preload_starts_once_it_ran() -> None:
    with SchedulerClusterCombo(n_workers=2, preload=SETUP) as combo:
        with Client(combo.get_address()) as client:
            pid, preloaded_in, runs = client.submit(preload_target.state).result(timeout=WAIT)
            assert (preloaded_in, runs) == (pid, 1)
