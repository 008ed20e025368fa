"""scaler.utility.exceptions: code written for the seed system catches, by the seed system's names, what Scaler raises
in the same cases. With real scheduler and worker processes, except for the scheduler's notFound answer, which a
Client never provokes (a graph travels whole) and a protocol peer plays instead."""

from __future__ import annotations

import os
import sys
import time
from typing import Iterator

import cloudpickle
import psutil
import pytest

from scaler import Client
from scaler.errors import ScalerError
from scaler.protocol import Task, TaskResult, TaskStatus
from scaler.testing.protocol_peer import ProtocolPeer
from scaler.utility import exceptions
from scaler.utility.exceptions import (
    ClientCancelledException,
    ClientQuitException,
    ClientShutdownException,
    DisconnectedError,
    MissingObjects,
    NoWorkerError,
    ProcessorDiedError,
    TaskNotFoundError,
    WorkerDiedError,
)
from tests.e2e.live_cluster import LiveCluster

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need not import this module

pytestmark = pytest.mark.timeout(120)

# every name the seed system's scaler/utility/exceptions.py defines
SEED_NAMES = {
    "TaskNotFoundError",
    "WorkerDiedError",
    "NoWorkerError",
    "DisconnectedError",
    "ProcessorDiedError",
    "DeserializeObjectError",
    "MissingObjects",
    "ClientCancelledException",
    "ClientShutdownException",
    "ClientQuitException",
    "ObjectStorageException",
}


def noop_sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def exit_processor() -> None:
    os._exit(3)


def kill_my_worker() -> None:
    os.kill(psutil.Process(os.getppid()).ppid(), 9)  # the agent: processor <- fork server <- agent
    time.sleep(60)


@pytest.fixture
def live(tmp_path) -> Iterator[LiveCluster]:
    cluster = LiveCluster(tmp_path, extra_args=["--task-retry-limit", "1", "--max-tasks-waiting", "2"])
    yield cluster
    cluster.close()


def test_every_seed_name_is_there_and_an_exception() -> None:
    assert set(exceptions.__all__) == SEED_NAMES
    for name in SEED_NAMES:
        assert issubclass(getattr(exceptions, name), BaseException), name
    # the two that nothing raises here are still Scaler's errors, so `except ScalerError` covers them too
    assert issubclass(exceptions.DeserializeObjectError, ScalerError)
    assert issubclass(exceptions.ObjectStorageException, ScalerError)


def test_the_seed_systems_test_clear(cluster) -> None:
    """The seed system's own test_clear, which imports MissingObjects from here."""
    address, _ = cluster
    with Client(address, timeout_seconds=20) as client:
        arg_reference = client.send_object(0.5)
        future = client.submit(noop_sleep, arg_reference)
        client.clear()
        with pytest.raises(ClientCancelledException):  # clear() cancels all futures
            future.result(30)
        assert future.cancelled()
        with pytest.raises(MissingObjects):  # using an old reference fails
            client.submit(noop_sleep, arg_reference).result(30)
        assert client.submit(round, 3.14).result(30) == 3.0  # new tasks work


def test_processor_and_worker_deaths(live) -> None:
    live.add_cluster(2)
    live.wait_workers(2)
    with Client(live.address, timeout_seconds=20) as client:
        try:
            client.submit(exit_processor).result(30)
        except ProcessorDiedError as error:
            assert "code 3" in str(error)
        else:
            pytest.fail("no ProcessorDiedError")
        with pytest.raises(WorkerDiedError):  # the scheduler runs it once (--task-retry-limit 1)
            client.submit(kill_my_worker).result(60)


def test_a_refused_task_is_no_worker_error(live) -> None:
    with Client(live.address, timeout_seconds=20) as client:  # no workers: tasks wait, two at most
        waiting = [client.submit(noop_sleep, 0) for _ in range(2)]
        with pytest.raises(NoWorkerError):
            client.submit(noop_sleep, 0).result(30)
        assert not any(future.done() for future in waiting)


def test_a_disconnected_client(scheduler) -> None:
    address, _ = scheduler  # no workers: the task stays pending
    client = Client(address, timeout_seconds=20)
    pending = client.submit(noop_sleep, 0)
    client.disconnect()
    with pytest.raises(ClientQuitException):
        pending.result(30)
    assert pending.cancelled()
    with pytest.raises(DisconnectedError):
        client.submit(noop_sleep, 0)


def test_a_client_that_shut_the_cluster_down(scheduler) -> None:
    address, process = scheduler  # unprotected; no workers: the task stays pending
    client = Client(address, timeout_seconds=20)
    pending = client.submit(noop_sleep, 0)
    client.shutdown()
    assert process.popen.wait(20) == 0
    with pytest.raises(ClientShutdownException):
        pending.result(30)
    with pytest.raises(DisconnectedError):
        client.submit(noop_sleep, 0)


def test_an_unknown_task_is_task_not_found_error() -> None:
    def answer(task: Task) -> TaskResult:
        return TaskResult(task_id=task.task_id, status=TaskStatus.not_found, error_text="dependency unknown")

    with ProtocolPeer(answer=answer) as peer, Client(peer.address) as client:
        with pytest.raises(TaskNotFoundError, match="dependency unknown"):
            client.submit(noop_sleep, 0).result(10)
