"""`--preload MODULE:FUNCTION` on real clusters: tasks see what it set up, and every new task process runs it again
(after a kill, a crash, a timeout)."""

from __future__ import annotations

import os
import signal
import time
from typing import Iterator, Tuple

import psutil
import pytest

from scaler import Client
from scaler.errors import ProcessorDiedError, TaskTimeoutError
from scaler.testing.processes import ScalerProcess, wait_for
from tests.e2e import preload_target

SETUP = "tests.e2e.preload_target:setup"
WAIT = 30.0  # seconds any one step may take on a loaded 2-core machine


def crash_processor() -> None:
    os._exit(3)


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
