"""ReadyQueue.members: the unfinished tasks of a resource requirement, queued or not, for which its queue lives. It
must stay exact on every path a task takes (the harness's validate() recomputes it from the task table after each
step); each test below drives one path and checks the queues that remain."""

from __future__ import annotations

from typing import Dict, List

from scaler.protocol import (
    BalanceRequest,
    BalanceResponse,
    ClientDisconnect,
    Resource,
    TaskCancel,
    TaskStatus,
    WorkerDisconnect,
    WorkerHeartbeat,
)
from scaler.scheduler.resources import Resources
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, Harness, of_type, result

GPU = (("gpu", 1.0),)
GPU_WORKER = b"W|test|7|gpu"
_TASK_LOCK = 4  # WorkerHeartbeat.flags bit: the worker's processor is busy


def needs(**amounts: float) -> List[Resource]:
    return [Resource(name=name, amount=amount) for name, amount in amounts.items()]


def members(harness: Harness) -> Dict[Resources, int]:
    return {requirement: queue.members for requirement, queue in harness.core.ready_queues.items()}


def test_submitted_and_finished_tasks() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(GPU_WORKER, resources={"gpu": 1})
    tasks = [harness.task(resources=needs(gpu=1)) for _ in range(3)]
    harness.send(CLIENT, *tasks)
    assert members(harness) == {(): 0, GPU: 3}
    for task in tasks:
        harness.send(GPU_WORKER, result(task))
    assert members(harness) == {(): 0}


def test_zero_amounts_are_no_requirement_and_count_in_no_queue() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    task = harness.task(resources=needs(gpu=0))
    harness.send(CLIENT, task)
    assert harness.core.tasks[task.task_id].queue is harness.core._plain
    harness.send(WORKER_A, result(task))
    assert members(harness) == {(): 0}, "the queue of no requirement counts no member"


def test_canceled_while_ready_and_while_assigned() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(GPU_WORKER, capacity=1, resources={"gpu": 1})
    running, waiting = harness.task(resources=needs(gpu=1)), harness.task(resources=needs(gpu=1))
    harness.send(CLIENT, running, waiting)
    harness.send(CLIENT, TaskCancel(task_ids=[waiting.task_id]))
    assert members(harness) == {(): 0, GPU: 1}
    harness.send(CLIENT, TaskCancel(task_ids=[running.task_id]))
    assert members(harness) == {(): 0, GPU: 1}, "canceling: still unfinished until its worker answers"
    harness.send(GPU_WORKER, result(running, TaskStatus.canceled))
    assert members(harness) == {(): 0}


def test_a_retry_keeps_its_task_a_member() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(GPU_WORKER, resources={"gpu": 1})
    task = harness.task(resources=needs(gpu=1), retries=1)
    harness.send(CLIENT, task)
    harness.send(GPU_WORKER, result(task, TaskStatus.failed))
    assert members(harness) == {(): 0, GPU: 1}
    harness.send(GPU_WORKER, result(task, TaskStatus.failed))
    assert members(harness) == {(): 0}


def test_tasks_handed_back_by_a_dead_worker_and_by_balancing() -> None:
    harness = Harness(balance_interval_seconds=0.5, task_retry_limit=1)
    harness.connect_client()
    harness.connect_worker(GPU_WORKER, capacity=10, resources={"gpu": 1})
    tasks = [harness.task(resources=needs(gpu=1)) for _ in range(6)]
    harness.send(CLIENT, *tasks)
    harness.send(GPU_WORKER, WorkerHeartbeat(running=1, flags=_TASK_LOCK))
    harness.send(GPU_WORKER, WorkerDisconnect(reason="killed"))  # the running one fails (limit 1), the rest wait
    assert members(harness) == {(): 0, GPU: 5}
    harness.connect_worker(b"W|test|8|gpu", capacity=10, resources={"gpu": 1})
    harness.connect_worker(b"W|test|9|gpu", capacity=10, resources={"gpu": 1})
    (request,) = of_type(harness.tick(advance=1.0)[b"W|test|8|gpu"], BalanceRequest)
    held = list(harness.core.workers[b"W|test|8|gpu"].assigned)
    harness.send(b"W|test|8|gpu", BalanceResponse(task_ids=held[-request.count :]))
    assert members(harness) == {(): 0, GPU: 5}


def test_graph_nodes_waiting_becoming_ready_and_failing_with_their_dependency() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    harness.connect_worker(GPU_WORKER, resources={"gpu": 1})
    first = harness.task()
    second = harness.task(dependencies=[first.task_id], resources=needs(gpu=1))
    third = harness.task(dependencies=[second.task_id], resources=needs(gpu=1))
    harness.send(CLIENT, first, second, third)
    assert members(harness) == {(): 0, GPU: 2}, "waiting nodes are members"
    harness.send(harness.core.tasks[first.task_id].worker, result(first))
    assert members(harness) == {(): 0, GPU: 2}
    harness.send(GPU_WORKER, result(second, TaskStatus.failed))  # third fails with it, without running
    assert members(harness) == {(): 0}


def test_a_node_naming_an_unknown_dependency_leaves_no_queue() -> None:
    harness = Harness()
    harness.connect_client()
    harness.send(CLIENT, harness.task(dependencies=[b"?" * 16], resources=needs(gpu=1)))
    assert members(harness) == {(): 0}


def test_a_client_disconnecting() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(GPU_WORKER, capacity=1, resources={"gpu": 1})
    tasks = [harness.task(resources=needs(gpu=1)) for _ in range(3)]
    harness.send(CLIENT, *tasks)
    harness.send(CLIENT, ClientDisconnect())
    assert members(harness) == {(): 0, GPU: 1}, "the assigned one is canceling"
    harness.send(GPU_WORKER, result(tasks[0], TaskStatus.canceled))
    assert members(harness) == {(): 0}
