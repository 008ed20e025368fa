"""Workers SIGKILLed mid-task, workers added mid-run, tasks that kill their worker or their processor, and a client
that vanishes: with real scheduler and worker processes."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from typing import Iterator

import cloudpickle
import psutil
import pytest

from scaler import Client
from scaler.errors import ProcessorDiedError, WorkerDiedError
from scaler.testing.processes import ROOT, all_exited, wait_for
from tests.e2e.live_cluster import LiveCluster, unfinished

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def live(tmp_path) -> Iterator[LiveCluster]:
    cluster = LiveCluster(tmp_path, client_timeout_seconds=2.0)
    yield cluster
    cluster.close()


def square_after(seconds: float, value: int, marker_directory: str) -> int:
    """Leaves a file per start, so the test can see which tasks ran more than once."""
    with open(os.path.join(marker_directory, f"{value}.{os.getpid()}"), "w"):
        pass
    time.sleep(seconds)
    return value * value


def worker_pid(seconds: float) -> int:
    """The pid of the worker agent running this task: the processor's grandparent (agent, fork server, processor)."""
    time.sleep(seconds)
    return psutil.Process(os.getppid()).ppid()


def kill_my_worker() -> None:
    os.kill(psutil.Process(os.getppid()).ppid(), signal.SIGKILL)
    time.sleep(60)


def exit_processor() -> None:
    os._exit(3)


def test_sigkilled_worker_mid_task_its_tasks_run_elsewhere(live, tmp_path) -> None:
    live.add_worker()
    live.add_worker()
    live.wait_workers(2)
    markers = tmp_path / "markers"
    markers.mkdir()
    with Client(live.address) as client:
        futures = [client.submit(square_after, 1.0, value, str(markers)) for value in range(6)]
        wait_for(lambda: len(os.listdir(markers)) >= 2, 20, "both workers running a task")
        victim = live.kill_worker()
        assert [future.result(timeout=30) for future in futures] == [value * value for value in range(6)]
    assert "removed (no heartbeat" in live.scheduler.output()
    starts = sorted(name.split(".")[0] for name in os.listdir(markers))
    assert len(starts) > 6, "the task running on the killed worker ran again"
    assert set(starts) == {str(value) for value in range(6)}
    assert all_exited([victim])


def test_worker_added_mid_run_takes_queued_tasks(live) -> None:
    live.add_worker()
    live.wait_workers(1)
    with Client(live.address) as client:
        futures = [client.submit(worker_pid, 0.2) for _ in range(30)]
        wait_for(lambda: sum(future.done() for future in futures) >= 2, 20, "the first worker running")
        live.add_worker()
        pids = {future.result(timeout=30) for future in futures}
    assert pids == {agent.pid for agent in live.agents()}, "both workers ran tasks: queued ones moved to the new one"
    assert len(pids) == 2


def test_task_that_kills_its_worker_fails_after_the_retry_cap(live, tmp_path) -> None:
    for _ in range(4):
        live.add_worker()
    live.wait_workers(4)
    with Client(live.address) as client:
        future = client.submit(kill_my_worker)
        with pytest.raises(WorkerDiedError, match="running on 3 workers that died"):
            future.result(timeout=60)
        assert len(live.agents()) == 1, "three workers died, no more"
        assert client.submit(square_after, 0, 7, str(tmp_path)).result(timeout=20) == 49, "the cluster still works"


def test_task_that_kills_its_processor_fails_at_once_and_the_worker_goes_on(live) -> None:
    live.add_worker()
    live.wait_workers(1)
    (agent,) = live.agents()
    with Client(live.address) as client:
        with pytest.raises(ProcessorDiedError, match="exit code 3|exit status 3|code 3"):
            client.submit(exit_processor).result(timeout=20)
        assert client.submit(worker_pid, 0).result(timeout=20) == agent.pid


def test_vanished_client_has_its_tasks_canceled_and_objects_freed(live, tmp_path) -> None:
    live.add_worker()
    live.wait_workers(1)
    script = textwrap.dedent(
        f"""
        import time
        from scaler import Client
        client = Client({live.address!r})
        reference = client.send_object(list(range(1000)), name="big")
        futures = [client.submit(time.sleep, 60) for _ in range(5)]
        print("submitted", flush=True)
        time.sleep(600)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=ROOT)
    try:
        assert select.select([child.stdout], [], [], 30)[0], "the child client did not submit within 30 s"
        assert child.stdout.readline().strip() == b"submitted"
        live.status(lambda status: unfinished(status) == 5 and status.clients == 1)
        child.kill()
        child.wait(10)
        # gone from the scheduler, and (a heartbeat later) from the worker's queue and processor
        live.status(
            lambda status: status.clients == 0 and unfinished(status) == 0 and status.workers[0].queued == 0,
            timeout=20,
        )
    finally:
        child.kill()
        child.wait(10)
    assert "5 unfinished task(s) canceled" in live.scheduler.output()
    assert "object(s) freed" in live.scheduler.output()
    with Client(live.address) as client:  # the worker's processor was freed: a new task runs at once
        assert client.submit(worker_pid, 0).result(timeout=10) == live.agents()[0].pid
