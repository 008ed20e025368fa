"""Graceful retirement on the sans-IO scheduler core (docs/protocol.md, "Retiring a worker"), message by message:
queued tasks move, the running one finishes, a passed deadline reruns it elsewhere (its late result is ignored), a
worker dying or leaving mid-retirement, a scheduler that no longer knows the worker. The harness validates the core's
invariants after every step."""

from __future__ import annotations

from typing import List

from scaler.protocol import (
    BalanceRequest,
    BalanceResponse,
    Goodbye,
    Task,
    TaskCancel,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerHeartbeat,
    WorkerRetire,
)
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, WORKER_B, Harness, of_type, result


def busy_worker(harness: Harness, count: int) -> List[Task]:
    """WORKER_A holds `count` tasks (the first one running); WORKER_B connects after, with nothing."""
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=10)
    tasks = [harness.task() for _ in range(count)]
    assert of_type(harness.send(CLIENT, *tasks)[WORKER_A], Task) == tasks
    harness.connect_worker(WORKER_B, capacity=10)
    return tasks


def retire(harness: Harness, deadline_ms: int = 30_000, peer: bytes = WORKER_A) -> dict:
    return harness.send(peer, WorkerRetire(reason="SIGTERM", deadline_ms=deadline_ms))


def goodbyes(out: dict, peer: bytes = WORKER_A) -> List[Goodbye]:
    return of_type(out.get(peer, []), Goodbye)


def test_queued_tasks_move_to_other_workers_and_the_running_one_finishes_where_it_runs() -> None:
    harness = Harness()
    tasks = busy_worker(harness, 4)
    out = retire(harness)
    assert of_type(out[WORKER_A], BalanceRequest) == [BalanceRequest(count=4)]
    assert harness.core.workers[WORKER_A].retire_deadline is not None
    # it hands back the three it has not started; they go to B at once
    out = harness.send(WORKER_A, BalanceResponse(task_ids=[t.task_id for t in tasks[1:]]))
    assert of_type(out[WORKER_B], Task) == tasks[1:]
    assert WORKER_A not in out
    # a new task goes to B, never to the retiring worker, even though A has free slots
    late = harness.task()
    assert of_type(harness.send(CLIENT, late).get(WORKER_B, []), Task) == [late]
    # the running task finishes: its result reaches the client once, then A is told to go
    out = harness.send(WORKER_A, result(tasks[0]))
    assert [r.task_id for r in of_type(out[CLIENT], TaskResult)] == [tasks[0].task_id]
    (goodbye,) = goodbyes(out)
    assert goodbye.retired and not goodbye.reconnect
    assert WORKER_A not in harness.core.workers and not harness.core.retiring
    assert harness.core.finished_counts[TaskStatus.success] == 1


def test_an_idle_worker_is_let_go_at_once() -> None:
    harness = Harness()
    harness.connect_worker(WORKER_A)
    out = retire(harness)
    assert [g.retired for g in goodbyes(out)] == [True]
    assert not of_type(out[WORKER_A], BalanceRequest)
    assert not harness.core.workers


def test_past_the_deadline_the_running_task_reruns_elsewhere_without_a_retry_and_its_late_result_is_ignored() -> None:
    harness = Harness(worker_timeout_seconds=60.0)
    (task,) = busy_worker(harness, 1)
    retire(harness, deadline_ms=5000)
    harness.send(WORKER_A, BalanceResponse(task_ids=[]))  # nothing queued: it is running
    out = harness.tick(advance=4.9)
    assert not goodbyes(out) and harness.core.tasks[task.task_id].worker == WORKER_A
    out = harness.tick(advance=0.2)
    (goodbye,) = goodbyes(out)
    assert goodbye.retired and "deadline" in goodbye.reason
    assert of_type(out[WORKER_B], Task) == [task]
    assert harness.core.tasks[task.task_id].retries == 0  # retiring did not kill anything: no retry counted
    # the late result of the first run is not the task's result: the second run's is, once
    out = harness.send(WORKER_A, result(task, payload=b"late"))
    assert CLIENT not in out
    out = harness.send(WORKER_B, result(task, payload=b"rerun"))
    assert [(r.task_id, r.payload) for r in of_type(out[CLIENT], TaskResult)] == [(task.task_id, b"rerun")]
    assert not harness.core.tasks


def test_with_no_other_worker_the_handed_back_tasks_wait_for_one() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=10)
    tasks = [harness.task() for _ in range(3)]
    harness.send(CLIENT, *tasks)
    retire(harness)
    out = harness.send(WORKER_A, BalanceResponse(task_ids=[t.task_id for t in tasks[1:]]))
    assert not of_type(out.get(WORKER_A, []), Task)  # back in the ready queue, not to the retiring worker
    assert harness.core.state_counts[1] == 2  # READY
    out = harness.send(WORKER_A, result(tasks[0]))
    assert [g.retired for g in goodbyes(out)] == [True]
    harness.connect_worker(WORKER_B, capacity=10)
    assert harness.core.state_counts[2] == 2  # ASSIGNED to B


def test_a_worker_that_dies_while_retiring_is_handled_as_any_dead_worker() -> None:
    harness = Harness(worker_timeout_seconds=2.0)
    tasks = busy_worker(harness, 2)
    retire(harness, deadline_ms=60_000)
    harness.send(WORKER_B, WorkerHeartbeat())
    out = harness.tick(advance=1.5)
    harness.send(WORKER_B, WorkerHeartbeat())
    out = harness.tick(advance=1.0)  # A silent past its timeout: dead, not retired
    assert WORKER_A not in harness.core.workers and not harness.core.retiring
    assert not goodbyes(out)
    assert sorted(t.task_id for t in of_type(out[WORKER_B], Task)) == sorted(t.task_id for t in tasks)
    assert harness.core.tasks[tasks[0].task_id].retries == 1  # it died while likely running it


def test_a_worker_that_leaves_before_its_retirement_ends_blames_no_task() -> None:
    """A second SIGTERM, or the worker's own deadline: it says WorkerDisconnect; its tasks run elsewhere."""
    harness = Harness()
    tasks = busy_worker(harness, 2)
    retire(harness)
    out = harness.send(WORKER_A, WorkerDisconnect(reason="received SIGTERM again"))
    assert sorted(t.task_id for t in of_type(out[WORKER_B], Task)) == sorted(t.task_id for t in tasks)
    assert all(harness.core.tasks[t.task_id].retries == 0 for t in tasks)
    assert not harness.core.retiring


def test_a_canceled_task_on_a_retiring_worker_settles_once() -> None:
    harness = Harness()
    (task,) = busy_worker(harness, 1)
    retire(harness, deadline_ms=1000)
    cancel = TaskCancel(task_ids=[task.task_id])
    assert harness.send(CLIENT, cancel) == {WORKER_A: [cancel]}
    out = harness.tick(advance=1.1)  # deadline: the cancel is settled here, A told to go
    assert [(r.task_id, r.status) for r in of_type(out[CLIENT], TaskResult)] == [(task.task_id, TaskStatus.canceled)]
    assert [g.retired for g in goodbyes(out)] == [True]
    assert CLIENT not in harness.send(WORKER_A, result(task, TaskStatus.canceled, payload=b""))


def test_asking_again_keeps_the_first_deadline() -> None:
    harness = Harness()
    busy_worker(harness, 1)
    retire(harness, deadline_ms=1000)
    first = harness.core.workers[WORKER_A].retire_deadline
    harness.tick(advance=0.5)
    retire(harness, deadline_ms=60_000)
    assert harness.core.workers[WORKER_A].retire_deadline == first
    assert harness.core.retire(b"W|nobody", 1.0, harness.now, "test") is False


def test_a_retiring_worker_is_not_a_balancing_target() -> None:
    harness = Harness(balance_interval_seconds=0.5)
    busy_worker(harness, 4)  # B idle, A busy
    retire(harness, peer=WORKER_B)  # B holds nothing: let go at once
    harness.connect_worker(b"W|test|9|c", capacity=10)
    retire(harness, peer=b"W|test|9|c", deadline_ms=60_000)
    assert b"W|test|9|c" not in harness.core.workers  # idle too
    out = harness.tick(advance=1.0)
    assert not of_type(out.get(WORKER_A, []), BalanceRequest)  # nobody idle to balance to


def test_a_scheduler_that_does_not_know_the_worker_tells_it_to_register_again() -> None:
    """After a scheduler restart, a worker's WorkerRetire reaches a core that never heard of it: it is answered
    Goodbye(reconnect), which a retiring worker takes as the end of its retirement (tests/worker)."""
    harness = Harness()
    out = retire(harness)
    (goodbye,) = goodbyes(out)
    assert goodbye.reconnect and not goodbye.retired
