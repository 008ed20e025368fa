"""The races of docs/protocol.md's task state machine, each played out message by message on the sans-IO core:
cancel against balancing, worker death and result arrival; nested tasks; freeing; the retry cap."""

from __future__ import annotations

from typing import Dict, List

from scaler.protocol import (
    BalanceRequest,
    BalanceResponse,
    ClientDisconnect,
    Goodbye,
    ObjectDelete,
    ObjectKind,
    ObjectPut,
    Task,
    TaskCancel,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerHeartbeat,
)
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, WORKER_B, Harness, of_type, result

CLIENT_B = b"C|test|4|other"
WORKER_C = b"W|test|5|c"
_TASK_LOCK = 4  # WorkerHeartbeat.flags bit: the worker's processor is busy


def results_for(out: Dict[bytes, List[object]], peer: bytes = CLIENT) -> List[TaskResult]:
    return of_type(out.get(peer, []), TaskResult)


def assert_empty(harness: Harness) -> None:
    core = harness.core
    assert not core.tasks and not core.ready_in_order()
    assert core.state_counts == [0, 0, 0, 0]
    assert all(not worker.assigned for worker in core.workers.values())


def two_workers_one_busy(harness: Harness, queued: int = 3) -> List[Task]:
    """WORKER_A holds `queued` + 1 tasks, WORKER_B (capacity 1 at first contact) none."""
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=10)
    tasks = [harness.task() for _ in range(queued + 1)]
    harness.send(CLIENT, *tasks)
    harness.connect_worker(WORKER_B, capacity=10)
    return tasks


# ---- cancel against balancing ----------------------------------------------------------------------------------------


def test_cancel_then_balance_response_listing_the_task_finishes_it_canceled_once() -> None:
    harness = Harness(balance_interval_seconds=0.5)
    tasks = two_workers_one_busy(harness)
    assert of_type(harness.tick(advance=1.0)[WORKER_A], BalanceRequest)
    victim = tasks[-1]
    cancel = TaskCancel(task_ids=[victim.task_id])
    assert harness.send(CLIENT, cancel) == {WORKER_A: [cancel]}
    # the worker had already handed it back before the cancel reached it
    out = harness.send(WORKER_A, BalanceResponse(task_ids=[victim.task_id]))
    assert [(r.task_id, r.status) for r in results_for(out)] == [(victim.task_id, TaskStatus.canceled)]
    assert victim.task_id not in [t.task_id for t in of_type(out.get(WORKER_B, []), Task)]
    # ...so it answers the cancel with notFound, which must not reach the client a second time
    assert harness.send(WORKER_A, result(victim, TaskStatus.not_found, payload=b"")) == {}
    assert victim.task_id not in harness.core.tasks


def test_cancel_reaching_the_worker_before_the_balance_request_leaves_nothing_to_move() -> None:
    harness = Harness()
    tasks = two_workers_one_busy(harness)
    harness.tick(advance=1.0)  # BalanceRequest on its way
    victim = tasks[-1]
    harness.send(CLIENT, TaskCancel(task_ids=[victim.task_id]))
    (answer,) = results_for(harness.send(WORKER_A, result(victim, TaskStatus.canceled, payload=b"")))
    assert answer.status == TaskStatus.canceled
    out = harness.send(WORKER_A, BalanceResponse(task_ids=[tasks[-2].task_id]))
    assert of_type(out[WORKER_B], Task) == [tasks[-2]] and not results_for(out)


def test_balance_never_moves_a_task_twice_nor_to_two_workers() -> None:
    harness = Harness()
    tasks = two_workers_one_busy(harness)
    harness.tick(advance=1.0)
    moved = [tasks[-1].task_id, tasks[-2].task_id]
    out = harness.send(WORKER_A, BalanceResponse(task_ids=moved + moved))  # a buggy worker lists them twice
    assert sorted(t.task_id for t in of_type(out[WORKER_B], Task)) == sorted(moved)
    assert set(harness.core.workers[WORKER_B].assigned) == set(moved)
    assert not set(harness.core.workers[WORKER_A].assigned) & set(moved)


def test_a_balance_response_for_a_task_finished_meanwhile_is_ignored() -> None:
    harness = Harness()
    tasks = two_workers_one_busy(harness)
    harness.tick(advance=1.0)
    harness.send(WORKER_A, result(tasks[-1]))  # it finished: the worker could not hand it back
    out = harness.send(WORKER_A, BalanceResponse(task_ids=[tasks[-1].task_id]))
    assert out == {} and tasks[-1].task_id not in harness.core.tasks


# ---- worker death against everything ---------------------------------------------------------------------------------


def test_balance_response_from_a_worker_declared_dead_is_refused_and_tasks_run_once() -> None:
    harness = Harness(worker_timeout_seconds=5.0)
    tasks = two_workers_one_busy(harness)
    harness.tick(advance=1.0)  # BalanceRequest to A
    harness.send(WORKER_B, WorkerHeartbeat())
    harness.tick(advance=4.5)
    harness.send(WORKER_B, WorkerHeartbeat())
    out = harness.tick(advance=0.6)  # A silent for 6.1 s: dead, its tasks go to B
    assert WORKER_A not in harness.core.workers
    assert len(harness.core.workers[WORKER_B].assigned) == len(tasks)
    late = harness.send(WORKER_A, BalanceResponse(task_ids=[tasks[-1].task_id]))
    assert of_type(late[WORKER_A], Goodbye) and WORKER_B not in late
    late = harness.send(WORKER_A, result(tasks[0]))
    assert not results_for(late), "a result from a worker declared dead is never delivered"
    del out


def test_result_then_death_delivers_once_and_reassigns_only_the_rest() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    tasks = [harness.task() for _ in range(3)]
    harness.send(CLIENT, *tasks)
    harness.connect_worker(WORKER_B)
    out = harness.send(WORKER_A, result(tasks[0]), WorkerDisconnect(reason="stopping"))
    assert [r.task_id for r in results_for(out)] == [tasks[0].task_id]
    assert [t.task_id for t in of_type(out[WORKER_B], Task)] == [tasks[1].task_id, tasks[2].task_id]


def test_canceled_then_worker_dies_answers_canceled_not_a_retry() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    harness.connect_worker(WORKER_B)
    task = harness.task()
    harness.send(CLIENT, task)
    holder = next(peer for peer, w in harness.core.workers.items() if w.assigned)
    harness.send(CLIENT, TaskCancel(task_ids=[task.task_id]))
    out = harness.send(holder, WorkerDisconnect(reason="bye"))
    assert [(r.task_id, r.status) for r in results_for(out)] == [(task.task_id, TaskStatus.canceled)]
    assert not any(of_type(messages, Task) for messages in out.values())
    assert_empty(harness)


def test_retry_limit_defaults_to_three_workers() -> None:
    harness = Harness()
    harness.connect_client()
    task = harness.task()
    harness.send(CLIENT, task)
    for number, worker in enumerate((WORKER_A, WORKER_B, WORKER_C), start=1):
        harness.connect_worker(worker)
        assert task.task_id in harness.core.workers[worker].assigned
        out = harness.send(worker, WorkerDisconnect(reason="killed by its task"))
        if number < 3:
            assert not results_for(out) and harness.core.tasks[task.task_id].retries == number
    (answer,) = results_for(out)
    assert answer.status == TaskStatus.worker_died
    assert "3 workers that died" in answer.error_text and "killed by its task" in answer.error_text
    assert_empty(harness)


# ---- nested tasks ----------------------------------------------------------------------------------------------------


def test_parked_parents_lend_their_slots_so_children_are_assigned() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=1)
    parent = harness.task()
    harness.send(CLIENT, parent)
    child = harness.task(parent_task_id=parent.task_id)
    assert harness.send(CLIENT, child) == {}, "one slot, taken by the parent"
    # the parent waits on its child: the worker parks it and reports it running, its processor free
    out = harness.send(WORKER_A, WorkerHeartbeat(running=1, flags=0))
    child.priority = 1  # raised by the scheduler to its parent's + 1, so its worker runs it first
    assert of_type(out[WORKER_A], Task) == [child]
    # once the child runs on the active processor, the worker is full again
    harness.send(WORKER_A, WorkerHeartbeat(running=2, flags=_TASK_LOCK))
    grandchild = harness.task(parent_task_id=child.task_id)
    assert WORKER_A not in harness.send(CLIENT, grandchild)


def test_parked_tasks_are_not_load_to_balance() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=10)
    parents = [harness.task() for _ in range(3)]
    harness.send(CLIENT, *parents)
    harness.connect_worker(WORKER_B, capacity=10)
    harness.send(WORKER_A, WorkerHeartbeat(running=3, flags=0))  # all three parked
    out = harness.tick(advance=1.0)
    assert not of_type(out.get(WORKER_A, []), BalanceRequest)


def test_children_of_a_parent_whose_worker_died_are_canceled() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=1)
    parent = harness.task()
    harness.send(CLIENT, parent)
    nested_client = CLIENT_B  # the parent's Client, connected from its processor
    harness.connect_client(nested_client)
    harness.connect_worker(WORKER_B, capacity=1)
    child = harness.task(parent_task_id=parent.task_id)
    out = harness.send(nested_client, child)
    child.priority = 1  # raised by the scheduler to its parent's + 1, so its worker runs it first
    assert of_type(out[WORKER_B], Task) == [child]
    out = harness.send(WORKER_A, WorkerDisconnect(reason="SIGKILL"))
    assert out[WORKER_B] == [TaskCancel(task_ids=[child.task_id])]
    assert parent.task_id in harness.core.tasks and not results_for(out)
    out = harness.send(WORKER_B, result(child, TaskStatus.canceled, payload=b""))
    (answer,) = results_for(out, nested_client)
    assert answer.status == TaskStatus.canceled
    assert of_type(out[WORKER_B], Task) == [parent], "the parent runs again where its child's slot came free"


def test_a_failed_parent_cancels_its_queued_and_running_children() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=2)
    parent = harness.task()
    harness.send(CLIENT, parent)
    running_child = harness.task(parent_task_id=parent.task_id)
    queued_child = harness.task(parent_task_id=parent.task_id)
    harness.send(CLIENT, running_child, queued_child)
    out = harness.send(WORKER_A, result(parent, TaskStatus.failed, payload=b"boom"))
    assert out[WORKER_A] == [TaskCancel(task_ids=[running_child.task_id])]
    statuses = {r.task_id: r.status for r in results_for(out)}
    assert statuses == {parent.task_id: TaskStatus.failed, queued_child.task_id: TaskStatus.canceled}


# ---- freeing ---------------------------------------------------------------------------------------------------------


def test_graph_result_crossing_the_cancel_of_its_dependents_is_freed() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    source = harness.task(report_result=False)
    sink = harness.task(dependencies=[source.task_id])
    harness.send(CLIENT, source, sink)
    harness.send(CLIENT, ClientDisconnect(shutdown_cluster=False))  # source canceling, sink canceled at once
    harness.send(WORKER_A, result(source))  # finished before the cancel arrived
    assert not harness.core.objects, "no unfinished consumer: nothing may keep the result"
    assert_empty(harness)


def test_graph_result_is_freed_when_its_last_consumer_finishes_and_the_client_fetched_nothing() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    source = harness.task(report_result=False)
    left = harness.task(dependencies=[source.task_id])
    right = harness.task(dependencies=[source.task_id])
    harness.send(CLIENT, source, left, right)
    harness.send(WORKER_A, result(source, payload=b"x" * 40_000))  # two copies would exceed the inline limit
    assert source.task_id in harness.core.objects
    harness.send(WORKER_A, result(left))
    assert source.task_id in harness.core.objects
    harness.send(WORKER_A, result(right))
    assert not harness.core.objects and not harness.core.clients[CLIENT].objects


def test_large_result_is_kept_only_until_the_client_deletes_it() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    task = harness.task()
    harness.send(CLIENT, task)
    put = ObjectPut(object_id=task.task_id, kind=ObjectKind.result, payload=b"x" * 100, total_size=100)
    (answer,) = results_for(harness.send(WORKER_A, put, result(task, payload=b"", in_object=True)))
    assert answer.in_object and task.task_id in harness.core.objects
    harness.send(CLIENT, ObjectDelete(object_ids=[task.task_id]))
    assert not harness.core.objects and not harness.core.tasks


def test_vanished_client_cancels_running_tasks_and_frees_everything_even_a_late_result() -> None:
    harness = Harness(client_timeout_seconds=10.0)
    harness.connect_client()
    harness.connect_worker()
    put = ObjectPut(object_id=b"o" * 16, kind=ObjectKind.object, payload=b"data", total_size=4)
    tasks = [harness.task() for _ in range(3)]
    harness.send(CLIENT, put, *tasks)
    for _ in range(10):  # the worker heartbeats, the client is silent
        harness.send(WORKER_A, WorkerHeartbeat())
        out = harness.tick(advance=1.0)
    out.update(harness.tick(advance=0.5))
    assert CLIENT not in harness.core.clients and not harness.core.objects
    assert out[WORKER_A] == [TaskCancel(task_ids=[t.task_id]) for t in tasks]
    big = ObjectPut(object_id=tasks[0].task_id, kind=ObjectKind.result, payload=b"x", total_size=1)
    out = harness.send(WORKER_A, big, result(tasks[0], payload=b"", in_object=True), result(tasks[1]))
    out.update(harness.send(WORKER_A, result(tasks[2], TaskStatus.canceled, payload=b"")))
    assert CLIENT not in out and not harness.core.objects
    assert_empty(harness)


def test_only_the_task_a_dead_worker_was_likely_running_counts_a_retry() -> None:
    harness = Harness(task_retry_limit=1)
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    running, *queued = [harness.task() for _ in range(4)]
    harness.send(CLIENT, running, *queued)
    harness.connect_worker(WORKER_B)
    out = harness.send(WORKER_A, WorkerDisconnect(reason="killed"))
    (answer,) = results_for(out)
    assert answer.task_id == running.task_id and answer.status == TaskStatus.worker_died
    assert [t.task_id for t in of_type(out[WORKER_B], Task)] == [t.task_id for t in queued]
    assert all(harness.core.tasks[t.task_id].retries == 0 for t in queued)


def test_a_dead_worker_also_blames_the_oldest_task_of_its_highest_priority() -> None:
    # The worker runs its queue highest priority first: the urgent task may be the one that was running.
    harness = Harness(task_retry_limit=1)
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    oldest, other = harness.task(), harness.task()
    urgent, later_urgent = harness.task(priority=5), harness.task(priority=5)
    harness.send(CLIENT, oldest, other)
    harness.send(CLIENT, urgent, later_urgent)  # arrive at the worker after the others: it may run them first
    assert list(harness.core.workers[WORKER_A].assigned) == [t.task_id for t in (oldest, other, urgent, later_urgent)]
    harness.connect_worker(WORKER_B)
    out = harness.send(WORKER_A, WorkerDisconnect(reason="killed"))
    died = {answer.task_id for answer in results_for(out) if answer.status == TaskStatus.worker_died}
    assert died == {oldest.task_id, urgent.task_id}
    assert {t.task_id for t in of_type(out[WORKER_B], Task)} == {other.task_id, later_urgent.task_id}


def test_a_dead_worker_blames_its_oldest_task_one_per_parked_task_and_its_newest_nested_task() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_B, capacity=1)
    parent = harness.task()
    harness.send(CLIENT, parent)  # runs on B
    harness.connect_worker(WORKER_A)
    oldest, second, third = harness.task(), harness.task(), harness.task()
    older_child = harness.task(parent_task_id=parent.task_id)
    newest_child = harness.task(parent_task_id=parent.task_id)
    harness.send(CLIENT, oldest, second, third)
    harness.send(CLIENT, older_child, newest_child)  # a later frame: nested tasks go first within a frame
    assert len(harness.core.workers[WORKER_A].assigned) == 5
    harness.send(WORKER_A, WorkerHeartbeat(running=2, flags=_TASK_LOCK))  # one task parked there, one running
    harness.send(WORKER_A, WorkerDisconnect(reason="killed"))
    retries = {t.task_id: harness.core.tasks[t.task_id].retries for t in (oldest, second, third, older_child)}
    retries[newest_child.task_id] = harness.core.tasks[newest_child.task_id].retries
    assert retries == {
        oldest.task_id: 1,
        second.task_id: 1,
        third.task_id: 0,
        older_child.task_id: 0,
        newest_child.task_id: 1,
    }


def test_a_scheduler_stall_is_not_peer_silence() -> None:
    harness = Harness(worker_timeout_seconds=5.0)
    harness.connect_client()
    harness.connect_worker()
    harness.tick(advance=0.5)
    # The loop blocks 8 s on a huge frame, then ticks before it read the heartbeats queued meanwhile.
    harness.now += 8.0
    harness.core.tick(harness.now)
    assert WORKER_A in harness.core.workers and CLIENT in harness.core.clients
    harness.tick(advance=4.5)
    assert WORKER_A in harness.core.workers
    harness.tick(advance=1.0)  # silent for real now, past the timeout
    assert WORKER_A not in harness.core.workers
