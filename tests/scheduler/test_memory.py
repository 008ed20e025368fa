"""Workers' memory on the sans-IO scheduler core (docs/guide/memory.md): a worker paused for memory gets no new task
and hands back its queued ones, then takes tasks again once it resumes. The harness validates the core's invariants
after every step."""

from __future__ import annotations

from typing import List

from scaler.protocol import BalanceRequest, BalanceResponse, Task, WorkerHeartbeat, heartbeat_flags
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, WORKER_B, Harness, of_type

RUNNING = heartbeat_flags.PROCESSOR_INITIALIZED | heartbeat_flags.HAS_TASK | heartbeat_flags.TASK_LOCK


def heartbeat(paused: bool, running: int = 1) -> WorkerHeartbeat:
    flags = RUNNING | (heartbeat_flags.MEMORY_PAUSED if paused else 0)
    return WorkerHeartbeat(sent_at_us=1, flags=flags, running=running)


def busy(harness: Harness, count: int) -> List[Task]:
    harness.connect_client()
    reply = harness.connect_worker(WORKER_A, memory_limit=400_000_000)
    assert reply.memory_pause, "the scheduler says it understands the pause flag"
    tasks = [harness.task() for _ in range(count)]
    assert of_type(harness.send(CLIENT, *tasks)[WORKER_A], Task) == tasks
    harness.connect_worker(WORKER_B)
    return tasks


def test_a_paused_worker_hands_back_its_queued_tasks_and_gets_none_until_it_resumes() -> None:
    harness = Harness()
    tasks = busy(harness, 4)
    worker = harness.core.workers[WORKER_A]
    assert worker.row.memory_limit == 400_000_000, "the status shows its limit"
    out = harness.send(WORKER_A, heartbeat(paused=True))
    assert of_type(out[WORKER_A], BalanceRequest) == [BalanceRequest(count=3)], "all but the running one"
    assert worker.memory_paused and worker.row.flags & heartbeat_flags.MEMORY_PAUSED
    out = harness.send(WORKER_A, BalanceResponse(task_ids=[task.task_id for task in tasks[1:]]))
    assert of_type(out[WORKER_B], Task) == tasks[1:], "its queued tasks go elsewhere at once"
    harness.send(WORKER_B, heartbeat(paused=False, running=1))
    late = [harness.task() for _ in range(8)]
    out = harness.send(CLIENT, *late)
    assert not of_type(out.get(WORKER_A, []), Task), "paused: no new task, although it has free slots"
    out = harness.send(WORKER_A, heartbeat(paused=False))
    assert not worker.memory_paused
    more = [harness.task() for _ in range(4)]
    out = harness.send(CLIENT, *more)
    assert of_type(out.get(WORKER_A, []), Task), "resumed: it takes tasks again"


def test_a_paused_worker_is_not_a_balancing_target() -> None:
    harness = Harness(balance_interval_seconds=0.1)
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=10)
    harness.send(WORKER_A, heartbeat(paused=True, running=0))
    harness.connect_worker(WORKER_B, capacity=10)
    tasks = [harness.task() for _ in range(6)]
    assert len(of_type(harness.send(CLIENT, *tasks)[WORKER_B], Task)) == 6
    out = harness.tick(1.0)
    assert not of_type(out.get(WORKER_B, []), BalanceRequest), "an idle but paused worker takes nothing"
