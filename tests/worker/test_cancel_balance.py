"""TaskCancel (queued, running, unknown) and BalanceRequest."""

from __future__ import annotations

import os
import sys
import time

import cloudpickle

from scaler import config
from scaler.protocol import BalanceRequest, BalanceResponse, TaskCancel, TaskResult, TaskStatus
from scaler.testing.processes import wait_for
from tests.worker.helpers import processor_pids, wait_heartbeat

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def sleep_then_return(seconds, value):
    time.sleep(seconds)
    return value


def test_cancel_queued_task(peer, worker):
    running = peer.task(sleep_then_return, 30, "running")
    queued = peer.task(sleep_then_return, 0, "queued")
    peer.send(worker.identity, running, queued)
    wait_heartbeat(peer, lambda hb: hb.running == 1 and hb.queued == 1)
    pid = processor_pids(worker.process)
    peer.send(worker.identity, TaskCancel(task_ids=[queued.task_id]))
    assert peer.result_of(queued).status == TaskStatus.canceled
    assert processor_pids(worker.process) == pid, "canceling a queued task leaves the processor alone"
    peer.send(worker.identity, TaskCancel(task_ids=[running.task_id]))
    assert peer.result_of(running).status == TaskStatus.canceled


def test_cancel_running_task_replaces_the_processor(peer, worker):
    running = peer.task(sleep_then_return, 30, "never")
    peer.send(worker.identity, running)
    wait_heartbeat(peer, lambda hb: hb.running == 1)
    (old_pid,) = processor_pids(worker.process)
    peer.send(worker.identity, TaskCancel(task_ids=[running.task_id]))
    # well before the task's 30 s sleep ends: the worker killed it rather than waiting for it
    assert peer.result_of(running, timeout_seconds=15).status == TaskStatus.canceled
    wait_for(lambda: processor_pids(worker.process) not in ([], [old_pid]), 10, "a fresh processor")
    next_task = peer.task(sleep_then_return, 0, "after")
    result = peer.run(worker.identity, next_task)
    assert result.status == TaskStatus.success and cloudpickle.loads(result.payload) == "after"
    assert "canceled running task" in worker.process.output()


def test_cancel_unknown_task_is_not_found(peer, worker):
    peer.send(worker.identity, TaskCancel(task_ids=[b"u" * 16]))
    assert peer.expect(TaskResult, task_id=b"u" * 16).status == TaskStatus.not_found


def test_balance_hands_back_only_queued_tasks(peer, worker):
    running = peer.task(sleep_then_return, 30, "running")
    queued = [peer.task(sleep_then_return, 0, index) for index in range(3)]
    peer.send(worker.identity, running, *queued)
    wait_heartbeat(peer, lambda hb: hb.running == 1 and hb.queued == 3)
    peer.send(worker.identity, BalanceRequest(count=2))
    response = peer.expect(BalanceResponse)
    queued_ids = [task.task_id for task in queued]
    assert len(response.task_ids) == 2 and set(response.task_ids) <= set(queued_ids)
    assert response.task_ids == [queued_ids[2], queued_ids[1]], "the newest go first"

    peer.send(worker.identity, BalanceRequest(count=10))
    assert peer.expect(BalanceResponse).task_ids == [queued_ids[0]], "never the running task"
    wait_heartbeat(peer, lambda hb: hb.queued == 0 and hb.running == 1)

    peer.send(worker.identity, TaskCancel(task_ids=[running.task_id]))
    assert peer.result_of(running).status == TaskStatus.canceled
    peer.send(worker.identity, TaskCancel(task_ids=queued_ids))
    for task_id in queued_ids:  # balanced away: this worker no longer knows them
        assert peer.expect(TaskResult, task_id=task_id).status == TaskStatus.not_found


def test_balance_with_nothing_queued_answers_empty(peer, worker):
    peer.send(worker.identity, BalanceRequest(count=5))
    assert peer.expect(BalanceResponse).task_ids == []
    assert os.path.exists(worker.process.log_path)


def teach_worker_that_it_is_short(peer, worker):
    """A function seen to run fast is handed to the processor several at a time (see WorkerAgent._dispatch)."""
    for _ in range(3):
        assert peer.run(worker.identity, peer.task(sleep_then_return, 0, "warm-up")).status == TaskStatus.success


def test_cancel_task_handed_ahead_to_the_processor_drops_it_without_a_restart(peer, worker):
    teach_worker_that_it_is_short(peer, worker)
    running = peer.task(sleep_then_return, 30, "running")
    ahead = peer.task(sleep_then_return, 0, "ahead")
    peer.send(worker.identity, running, ahead)
    wait_heartbeat(peer, lambda hb: hb.running == 1 and hb.queued == 1)
    pid = processor_pids(worker.process)
    peer.send(worker.identity, TaskCancel(task_ids=[ahead.task_id]))
    assert peer.result_of(ahead).status == TaskStatus.canceled
    assert processor_pids(worker.process) == pid
    peer.send(worker.identity, TaskCancel(task_ids=[running.task_id]))
    assert peer.result_of(running).status == TaskStatus.canceled


def test_balance_never_moves_tasks_handed_to_the_processor(peer, worker):
    teach_worker_that_it_is_short(peer, worker)
    running = peer.task(sleep_then_return, 30, "running")
    count = config.DEFAULT_PREFETCH_TASKS + 16  # more than the processor's pipe takes
    others = [peer.task(sleep_then_return, 0, index) for index in range(count)]
    peer.send(worker.identity, running, *others)
    wait_heartbeat(peer, lambda hb: hb.running == 1 and hb.queued == count)
    peer.send(worker.identity, BalanceRequest(count=count + 20))
    balanced = peer.expect(BalanceResponse).task_ids
    assert 0 < len(balanced) < count, "some wait in the processor's pipe, and those stay"
    assert running.task_id not in balanced
    # Canceling the running task replaces the processor; what waited in its pipe runs on the next one, once.
    peer.send(worker.identity, TaskCancel(task_ids=[running.task_id]))
    assert peer.result_of(running).status == TaskStatus.canceled
    kept = [task for task in others if task.task_id not in balanced]
    for task in kept:
        result = peer.result_of(task)
        assert result.status == TaskStatus.success, result.error_text
    peer.pump_for(0.2)
    assert not [message for _, message in peer.inbox if type(message) is TaskResult]
