"""Ready tasks across resource requirements: a worker that may run the tasks of several requirements is handed the
highest priority ready task among all of them, and among equal priorities the one that became ready first, as if
they were one queue; never one requirement's tasks drained before the next one's."""

from __future__ import annotations

from typing import List

from scaler.protocol import Resource, Task, WorkerDisconnect
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, Harness, of_type, result

GPU_WORKER = b"W|test|7|gpu"
BIG_WORKER = b"W|test|8|big"


def needs(**amounts: float) -> List[Resource]:
    return [Resource(name=name, amount=amount) for name, amount in amounts.items()]


def run_one_by_one(harness: Harness, worker: bytes, running: Task, count: int) -> List[bytes]:
    """`worker` (capacity 1) finishes its task `count` times: the ids it is handed, in order."""
    order = []
    for _ in range(count):
        (task,) = of_type(harness.send(worker, result(running))[worker], Task)
        order.append(task.task_id)
        running = task
    return order


def test_equal_priorities_go_in_the_order_they_became_ready_across_requirements() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(GPU_WORKER, capacity=1, resources={"gpu": 1, "mem": 8})
    blocker = harness.task()
    harness.send(CLIENT, blocker)
    submitted = []
    for kind in ("gpu", "gpu", "plain", "mem", "plain", "gpu", "mem"):
        harness.now += 0.01
        resources = {"gpu": needs(gpu=1), "mem": needs(mem=4), "plain": []}[kind]
        task = harness.task(resources=resources)
        harness.send(CLIENT, task)
        submitted.append(task.task_id)
    assert run_one_by_one(harness, GPU_WORKER, blocker, len(submitted)) == submitted


def test_the_highest_priority_first_then_the_oldest_across_requirements() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(GPU_WORKER, capacity=1, resources={"gpu": 1})
    blocker = harness.task()
    harness.send(CLIENT, blocker)
    specs = [("gpu", 0), ("plain", 1), ("gpu", 1), ("plain", 0), ("gpu", 2), ("plain", 1), ("gpu", 0)]
    tasks = []
    for kind, priority in specs:
        harness.now += 0.01
        tasks.append(harness.task(resources=needs(gpu=1) if kind == "gpu" else [], priority=priority))
        harness.send(CLIENT, tasks[-1])
    expected = [tasks[i].task_id for i in sorted(range(len(specs)), key=lambda i: -specs[i][1])]  # stable: oldest
    assert run_one_by_one(harness, GPU_WORKER, blocker, len(tasks)) == expected


def test_a_burst_over_several_workers_follows_the_merged_order() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=1)  # plain tasks only
    harness.connect_worker(GPU_WORKER, capacity=2, resources={"gpu": 1})
    blockers = [harness.task() for _ in range(3)]
    harness.send(CLIENT, *blockers)
    plain, gpu = harness.task(), harness.task(resources=needs(gpu=1))
    harness.now += 0.01
    harness.send(CLIENT, plain)
    harness.now += 0.01
    harness.send(CLIENT, gpu)
    holder = {task_id: peer for peer, worker in harness.core.workers.items() for task_id in worker.assigned}
    out = harness.send(GPU_WORKER, result(next(b for b in blockers if holder[b.task_id] == GPU_WORKER)))
    assert [t.task_id for t in of_type(out[GPU_WORKER], Task)] == [plain.task_id], "the older task, though plain"


def test_tasks_handed_back_keep_their_place_across_requirements() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(BIG_WORKER, capacity=10, resources={"gpu": 1})
    early = [harness.task(resources=needs(gpu=1)), harness.task()]
    for task in early:
        harness.send(CLIENT, task)
        harness.now += 0.01
    harness.send(BIG_WORKER, WorkerDisconnect(reason="leaving"))  # both back, ready since they were submitted
    later = harness.task()
    harness.now += 0.01
    harness.send(CLIENT, later)
    harness.connect_worker(GPU_WORKER, capacity=1, resources={"gpu": 1})
    assert list(harness.core.workers[GPU_WORKER].assigned) == [early[0].task_id]
    assert run_one_by_one(harness, GPU_WORKER, early[0], 2) == [early[1].task_id, later.task_id]


def test_ready_in_order_lists_the_merged_order() -> None:
    harness = Harness()
    harness.connect_client()
    tasks = []
    for resources, priority in ((needs(gpu=1), 0), ([], 0), (needs(gpu=1), 0), ([], 1), (needs(mem=1), 0)):
        harness.now += 0.01
        tasks.append(harness.task(resources=resources, priority=priority))
        harness.send(CLIENT, tasks[-1])
    expected = [tasks[3], tasks[0], tasks[1], tasks[2], tasks[4]]
    assert [task.task_id for task in harness.core.ready_in_order()] == [task.task_id for task in expected]
