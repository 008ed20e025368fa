"""Workers' memory on the sans-IO scheduler core (docs/guide/memory.md): a worker paused for memory gets no new task
and hands back its queued ones, then takes tasks again once it resumes. The harness validates the core's invariants
after every step."""

from __future__ import annotations

from typing import List

import cloudpickle

from scaler.errors import MemoryLimitError
from scaler.protocol import (
    BalanceRequest,
    BalanceResponse,
    FunctionPeak,
    ObjectKind,
    ObjectPut,
    Task,
    TaskResult,
    TaskStatus,
    WorkerHeartbeat,
    heartbeat_flags,
)
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, WORKER_B, Harness, of_type, result

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


# ---- placement that learns (scheduler/memory.py) ---------------------------------------------------------------------

WORKER_C = b"W|test|4|c"
CLIENT_2 = b"C|test|5|client"
MB = 1_000_000
FUNCTION_BYTES = b"the same function, serialized"


def over_limit(task: Task, limit: int, peak: int) -> TaskResult:
    return result(task, TaskStatus.failed, cloudpickle.dumps(MemoryLimitError(limit, peak)), memory_limit=limit,
                  peak_memory=peak)  # fmt: skip


def put_function(harness: Harness, client: bytes, function_id: bytes) -> None:
    """The function's object, as a client sends it: the same bytes under an id salted per connection."""
    put = ObjectPut(object_id=function_id, kind=ObjectKind.function, payload=FUNCTION_BYTES, chunk_count=1,
                    total_size=len(FUNCTION_BYTES))  # fmt: skip
    harness.send(client, put)


def test_a_task_past_a_limit_runs_again_only_on_a_larger_worker_then_fails_saying_none_is_larger() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, memory_limit=400 * MB)
    task = harness.task(retries=0)
    assert of_type(harness.send(CLIENT, task)[WORKER_A], Task) == [task]
    harness.connect_worker(WORKER_B, memory_limit=300 * MB)  # smaller: never a target
    harness.connect_worker(WORKER_C, memory_limit=1000 * MB)
    out = harness.send(WORKER_A, over_limit(task, 400 * MB, 390 * MB))
    assert of_type(out.get(WORKER_C, []), Task) == [task], "again, on the only larger worker"
    assert not of_type(out.get(CLIENT, []), TaskResult) and not of_type(out.get(WORKER_B, []), Task)
    out = harness.send(WORKER_C, over_limit(task, 1000 * MB, 990 * MB))
    (answer,) = of_type(out[CLIENT], TaskResult)
    error = cloudpickle.loads(answer.payload)
    assert isinstance(error, MemoryLimitError) and error.limit_bytes == 1000 * MB and error.peak_bytes == 990 * MB
    assert "no connected worker has a larger limit" in str(error) and answer.attempts == 2


def test_a_worker_without_a_limit_is_larger_than_any() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, memory_limit=400 * MB)
    task = harness.task()
    harness.send(CLIENT, task)
    harness.connect_worker(WORKER_B)
    out = harness.send(WORKER_A, over_limit(task, 400 * MB, 390 * MB))
    assert of_type(out[WORKER_B], Task) == [task]
    out = harness.send(WORKER_B, result(task))
    (answer,) = of_type(out[CLIENT], TaskResult)
    assert answer.status == TaskStatus.success and answer.attempts == 2


def learned(harness: Harness, b_capacity: int) -> None:
    """Client 1's task of FUNCTION_BYTES went past A's 400 MB and succeeded on B (1 GB); then B holds one plain task
    and A none: A is the least loaded worker. Client 2 connects, with its own id for the same function."""
    harness.connect_client()
    put_function(harness, CLIENT, b"f1" * 8)
    harness.connect_worker(WORKER_A, memory_limit=400 * MB)
    first = harness.task(function_id=b"f1" * 8)
    harness.send(CLIENT, first)
    harness.connect_worker(WORKER_B, capacity=b_capacity, memory_limit=1000 * MB)
    harness.send(WORKER_A, over_limit(first, 400 * MB, 390 * MB))
    harness.send(WORKER_B, result(first))
    assert len(harness.core.memory_peaks) == 1
    out = harness.send(CLIENT, *[harness.task() for _ in range(3)])
    assert len(of_type(out[WORKER_B], Task)) == 1
    harness.send(WORKER_A, *[result(task) for task in of_type(out[WORKER_A], Task)])
    a, b = harness.core.workers[WORKER_A], harness.core.workers[WORKER_B]
    assert len(a.assigned) == 0 and len(b.assigned) == 1
    harness.connect_client(CLIENT_2)
    put_function(harness, CLIENT_2, b"f2" * 8)


def test_tasks_of_a_function_that_went_past_a_limit_go_to_larger_workers_for_every_client() -> None:
    harness = Harness()
    learned(harness, b_capacity=4)
    task = harness.task(function_id=b"f2" * 8)
    out = harness.send(CLIENT_2, task)
    assert of_type(out[WORKER_B], Task) == [task], "client 2's own id for the same function: to B, not idle A"
    plain = harness.task()
    assert of_type(harness.send(CLIENT_2, plain)[WORKER_A], Task) == [plain], "other functions: least loaded first"


def test_a_hint_never_keeps_a_task_from_running_when_larger_workers_are_full() -> None:
    harness = Harness()
    learned(harness, b_capacity=1)
    task = harness.task(function_id=b"f2" * 8)
    out = harness.send(CLIENT_2, task)
    assert of_type(out[WORKER_A], Task) == [task], "B is full: it runs on A rather than wait"


def test_peaks_in_heartbeats_teach_placement_only_when_they_do_not_fit_every_worker() -> None:
    harness = Harness()
    harness.connect_client()
    put_function(harness, CLIENT, b"f1" * 8)
    harness.connect_worker(WORKER_B, memory_limit=1000 * MB)
    harness.send(CLIENT, harness.task())  # B holds a task: A, connecting now, is the least loaded
    harness.connect_worker(WORKER_A, memory_limit=400 * MB)
    beat = heartbeat(paused=False)
    beat.function_peaks = [FunctionPeak(function_id=b"f1" * 8, peak_bytes=300 * MB)]
    harness.send(WORKER_B, beat)
    task = harness.task(function_id=b"f1" * 8)
    assert of_type(harness.send(CLIENT, task)[WORKER_A], Task) == [task], "300 MB fits both: least loaded first"
    harness.send(WORKER_A, result(task))
    beat.function_peaks = [FunctionPeak(function_id=b"f1" * 8, peak_bytes=700 * MB)]
    harness.send(WORKER_B, beat)
    task = harness.task(function_id=b"f1" * 8)
    assert of_type(harness.send(CLIENT, task)[WORKER_B], Task) == [task], "700 MB fits only B"
