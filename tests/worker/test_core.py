"""WorkerCore without sockets or processes: each behaviour of the worker, step by step (see core_harness.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import cloudpickle
import pytest

from scaler import config
from scaler.errors import ProcessorDiedError
from scaler.io.shared_bytes import SharedBytes
from scaler.protocol import (
    BalanceRequest,
    BalanceResponse,
    Goodbye,
    HeartbeatEcho,
    HeldResult,
    Hello,
    HelloReply,
    ObjectDelete,
    ObjectKind,
    ObjectPut,
    ObjectRequest,
    ObjectResponse,
    TaskCancel,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    heartbeat_flags,
)
from scaler.worker.core import EXIT_OK, EXIT_REFUSED, EXIT_SCHEDULER_LOST, HOLD_RESULTS_AT_MOST, HOLD_RESULTS_SECONDS
from scaler.worker.instructions import FetchData, HandTasks
from scaler.worker.state import CONNECTING, InvalidTransition, WorkerTask, transitions_table
from tests.worker.core_harness import FUNCTION, Harness, of_type


def connected(**settings) -> Harness:
    harness = Harness(**settings)
    harness.connect()
    harness.serve(FUNCTION)  # the function every test task calls, fetched once
    return harness


def teach_short(harness: Harness) -> None:
    """A function seen to run fast is handed several at a time."""
    task = harness.task()
    harness.send(task)
    harness.run(harness.core.active.number)


def results(messages) -> dict:
    return {message.task_id: message for message in of_type(messages, TaskResult)}


def test_registers_with_hello_and_heartbeats_at_the_schedulers_interval():
    harness = Harness()
    (hello,) = of_type(harness.sent, Hello)
    assert hello.name == "W|test|1" and hello.capacity == config.DEFAULT_WORKER_QUEUE_SIZE and hello.pid == 4242
    assert list(harness.processors) == [1], "a processor is started before any task comes"
    harness.tick(5)
    assert not harness.heartbeats, "no heartbeat before the scheduler accepted us"
    harness.send(HelloReply(protocol_version=1, accepted=True, heartbeat_interval_ms=200, peer_timeout_ms=2000))
    harness.tick(0)
    harness.tick(0.1)
    harness.tick(0.1)
    assert len(harness.heartbeats) == 2
    heartbeat = harness.heartbeats[-1].heartbeat
    assert heartbeat.flags == heartbeat_flags.PROCESSOR_INITIALIZED and harness.heartbeats[-1].active == 1
    harness.send(HeartbeatEcho(sent_at_us=heartbeat.sent_at_us))
    harness.now += 0.003
    harness.send(HeartbeatEcho(sent_at_us=heartbeat.sent_at_us))
    assert harness.core.lag_us == 3000


def test_refused_hello_exits():
    harness = Harness()
    harness.send(HelloReply(protocol_version=1, accepted=False, reason="too old"))
    assert harness.exit.code == EXIT_REFUSED and "too old" in harness.exit.reason


def test_a_refused_handshake_exits_at_once_whether_registered_or_not():
    """A refused CurveZMQ handshake is final (libzmq never connects that socket again): before the HelloReply or after
    it (a scheduler back without this worker's key), the worker leaves, saying why, and sends nothing more."""
    for registered in (False, True):
        harness = Harness()
        if registered:
            harness.connect()
        sent = len(harness.sent)
        harness.core.refused("the scheduler refused this worker's CurveZMQ key", harness.now)
        harness._step()
        assert harness.exit.code == EXIT_REFUSED and "CurveZMQ key" in harness.exit.reason
        assert len(harness.sent) == sent and not harness.exit.disconnect


def test_task_fetches_what_it_misses_once_then_runs():
    harness = Harness()
    harness.connect()
    first, second = harness.task(b"o" * 32), harness.task(b"o" * 32)
    sent = harness.send(first, second)
    (request,) = of_type(sent, ObjectRequest)
    assert sorted(request.object_ids) == sorted([FUNCTION, b"o" * 32])
    assert not harness.hands
    assert not of_type(harness.send(first), TaskResult), "a task received twice is ignored"
    harness.serve(FUNCTION)
    assert not harness.hands, "still waiting for the object"
    harness.serve(b"o" * 32)
    (hand,) = harness.hands
    assert [task.task_id for task in hand.tasks] == [first.task_id], "an unknown function runs alone first"
    assert hand.tasks[0].function_payload is not None
    harness.run(1)
    assert harness.hands[-1].tasks[0].task_id == second.task_id
    assert harness.hands[-1].tasks[0].function_payload is None, "the processor holds the function already"
    assert harness.hands[-1].tasks[0].arguments[1].payload is None, "and the object"
    out = harness.run(1)  # the first result waited for the second, which was seen short
    assert [result.task_id for result in of_type(out, TaskResult)] == [first.task_id, second.task_id]
    assert all(result.status == TaskStatus.success for result in of_type(out, TaskResult))


def test_short_tasks_go_in_batches_and_their_results_leave_in_one_frame():
    harness = connected()
    teach_short(harness)
    count = config.DEFAULT_PREFETCH_TASKS + 36
    tasks = [harness.task() for _ in range(count)]
    harness.hands.clear()
    harness.send(*tasks)
    (hand,) = harness.hands
    assert len(hand.tasks) == config.DEFAULT_PREFETCH_TASKS
    out = harness.run(1, count=100)  # fewer results than the core holds at most
    assert not of_type(out, TaskResult), "held: the processor was handed more short tasks"
    assert len(harness.hands[-1].tasks) == 36
    out = harness.run(1, count=count)
    assert len(of_type(out, TaskResult)) == count, "the two reports' results together, once the pipe is empty"
    assert all(result.status == TaskStatus.success for result in of_type(out, TaskResult))
    assert not harness.core.tasks


def test_a_lone_short_tasks_result_leaves_at_once():
    harness = connected()
    teach_short(harness)
    task = harness.task()
    harness.send(task)
    assert list(results(harness.run(1))) == [task.task_id]


def test_short_results_wait_for_the_pipes_next_results_at_most_the_hold_time():
    harness = connected()
    teach_short(harness)
    tasks = [harness.task() for _ in range(10)]
    harness.send(*tasks)
    assert not of_type(harness.run(1, count=4), TaskResult), "six more short tasks are in the pipe"
    assert harness.core.next_deadline() <= harness.now + HOLD_RESULTS_SECONDS, "the shell wakes to send them"
    assert not of_type(harness.tick(HOLD_RESULTS_SECONDS / 2), TaskResult)
    out = harness.tick(HOLD_RESULTS_SECONDS)
    assert [result.task_id for result in of_type(out, TaskResult)] == [task.task_id for task in tasks[:4]]


def test_held_results_are_at_most_a_few_hundred(monkeypatch):
    step = (
        HOLD_RESULTS_AT_MOST // 4
    )  # a report of this many, the pipe kept full with as many: never the hold time's worth
    monkeypatch.setattr(config, "DEFAULT_PREFETCH_TASKS", step)
    harness = connected()
    teach_short(harness)
    harness.send(*[harness.task() for _ in range(5 * step)])
    sizes = [len(of_type(harness.run(1, count=step), TaskResult)) for _ in range(5)]
    assert sizes == [0, 0, 0, HOLD_RESULTS_AT_MOST, step]


def test_a_result_is_not_held_behind_a_task_that_may_run_long():
    harness = connected()
    teach_short(harness)
    short, unknown = harness.task(), harness.task(function_id=b"g" * 32)
    harness.send(short, unknown)
    harness.serve(b"g" * 32)
    out = harness.run(1)
    assert [hand.tasks[0].task_id for hand in harness.hands[-1:]] == [unknown.task_id], "handed after the short one"
    assert list(results(out)) == [short.task_id]


def test_any_other_message_takes_the_held_results_with_it_after_them():
    harness = connected()
    teach_short(harness)
    tasks = [harness.task() for _ in range(4)]
    harness.send(*tasks)
    assert not of_type(harness.run(1, count=2), TaskResult)
    out = harness.send(TaskCancel(task_ids=[b"u" * 16]))
    assert [(result.task_id, result.status) for result in of_type(out, TaskResult)] == [
        (tasks[0].task_id, TaskStatus.success),
        (tasks[1].task_id, TaskStatus.success),
        (b"u" * 16, TaskStatus.not_found),
    ]


def test_long_tasks_are_handed_one_at_a_time():
    harness = connected()
    harness.send(harness.task())
    harness.run(1, duration_us=2_000_000)
    harness.hands.clear()
    harness.send(harness.task(), harness.task())
    assert [len(hand.tasks) for hand in harness.hands] == [1]


def test_cancel_queued_handed_and_running_tasks():
    harness = connected()
    teach_short(harness)
    running, ahead, queued = harness.task(), harness.task(), harness.task(function_id=b"g" * 32)
    harness.send(running, ahead, queued)
    sim = harness.active
    sim.read_orders()
    sim.start_next()
    out = harness.send(TaskCancel(task_ids=[queued.task_id, ahead.task_id, b"u" * 16]))
    answered = results(out)
    assert answered[queued.task_id].status == TaskStatus.canceled
    assert answered[ahead.task_id].status == TaskStatus.canceled, "handed ahead, not started: answered at once"
    assert answered[b"u" * 16].status == TaskStatus.not_found
    assert not harness.killed
    sim.finish()
    sim.read_orders()
    assert sim.start_next() is None and sim.dropped == [ahead.task_id]
    out = harness.report(1)
    assert list(results(out)) == [running.task_id], "the dropped task is not answered twice"
    # running: its processor is killed and replaced
    slow = harness.task()
    harness.send(slow)
    sim.read_orders()
    sim.start_next()
    out = harness.send(TaskCancel(task_ids=[slow.task_id]))
    assert results(out)[slow.task_id].status == TaskStatus.canceled
    assert harness.killed == [1] and harness.core.active.number == 2


def test_cancel_of_a_finished_task_whose_result_is_unsent_lets_the_result_answer():
    harness = connected()
    task = harness.task()
    harness.send(task)
    sim = harness.active
    sim.read_orders()
    sim.start_next()
    sim.finish()
    assert not of_type(harness.send(TaskCancel(task_ids=[task.task_id])), TaskResult)
    assert results(harness.report(1))[task.task_id].status == TaskStatus.success
    assert not harness.killed


def test_a_canceled_task_that_starts_before_its_drop_arrives_is_killed():
    harness = connected()
    teach_short(harness)
    first, second = harness.task(), harness.task()
    harness.send(first, second)
    sim = harness.active
    sim.read_orders()
    sim.start_next()
    assert results(harness.send(TaskCancel(task_ids=[second.task_id])))[second.task_id].status == TaskStatus.canceled
    sim.finish()
    sim.start_next()  # the drop order is still unread
    assert sim.running.task_id == second.task_id
    harness.tick(0.01)  # the shell observes its progress
    assert harness.killed == [1]
    # the first task's result died with the processor: it runs again on the new one, and is answered once
    harness.run(2)
    answers = [m for m in of_type(harness.sent, TaskResult) if m.task_id in (first.task_id, second.task_id)]
    assert sorted((m.task_id, m.status) for m in answers) == sorted(
        [(first.task_id, TaskStatus.success), (second.task_id, TaskStatus.canceled)]
    )


def test_balance_hands_back_the_newest_queued_tasks_never_the_handed_ones():
    harness = connected()
    tasks = [harness.task() for _ in range(4)]
    harness.send(*tasks)
    (response,) = of_type(harness.send(BalanceRequest(count=10)), BalanceResponse)
    assert response.task_ids == [tasks[3].task_id, tasks[2].task_id, tasks[1].task_id]
    assert list(harness.core.tasks) == [tasks[0].task_id]


def test_parking_takes_back_what_was_handed_ahead_and_feeds_another_processor():
    harness = connected()
    teach_short(harness)
    parent, after = harness.task(), harness.task()
    harness.send(parent, after)
    sim = harness.active
    sim.read_orders()
    sim.start_next()
    harness.hands.clear()
    harness.block(1)
    core = harness.core
    assert core.active.number == 2 and [p.number for p in core.parked] == [1]
    assert [task.task_id for hand in harness.hands for task in hand.tasks] == [after.task_id]
    assert harness.hands[0].number == 2
    child = harness.task(parent=parent.task_id)
    harness.send(child)
    harness.run(2, count=5)
    harness.tick(1)
    heartbeat = harness.heartbeats[-1].heartbeat
    assert heartbeat.running == 1 and not heartbeat.flags & heartbeat_flags.TASK_LOCK, "parked: running, no lock"
    sim.finish()
    out = harness.report(1)
    assert results(out)[parent.task_id].status == TaskStatus.success
    assert [p.number for p in core.spares] == [1]
    # the next parking reuses the spare instead of forking
    nested = harness.task()
    harness.send(nested)
    harness.active.read_orders()
    harness.active.start_next()
    harness.block(2)
    assert core.active.number == 1 and 3 not in harness.processors
    # a spare idle for long goes
    harness.active.read_orders()
    harness.processors[2].finish()
    harness.report(2)
    harness.tick(11)
    assert 2 in harness.killed


def test_processor_death_fails_the_running_task_and_requeues_the_rest():
    harness = connected()
    teach_short(harness)
    done_unsent, crashing, later = harness.task(), harness.task(), harness.task()
    harness.send(done_unsent, crashing, later)
    sim = harness.active
    sim.read_orders()
    sim.start_next()
    sim.finish()
    sim.start_next()
    out = harness.die(1)
    failed = results(out)[crashing.task_id]
    assert failed.status == TaskStatus.failed and "while running task" in failed.error_text
    assert isinstance(cloudpickle.loads(failed.payload), ProcessorDiedError)
    assert harness.core.active.number == 2
    # the finished task's result died with the processor: it runs again, as do the tasks after the crash
    out = harness.run(2, count=5)
    assert set(results(out)) == {done_unsent.task_id, later.task_id}


def test_object_not_found_fails_the_tasks_that_wait_for_it():
    harness = connected()
    task = harness.task(b"m" * 32)
    harness.send(task)
    out = harness.send(ObjectResponse(object_id=b"m" * 32, found=False))
    assert results(out)[task.task_id].status == TaskStatus.failed
    assert not harness.core.tasks


def test_evicted_objects_are_forgotten_at_once_by_an_idle_processor_and_sent_again_when_needed():
    harness = connected(object_retention_seconds=60, garbage_collect_interval_seconds=30)
    task = harness.task(b"o" * 32)
    harness.send(task)
    harness.serve(b"o" * 32)
    harness.run(1)
    harness.send(ObjectDelete(object_ids=[b"o" * 32]))  # the scheduler freed it: its client deleted it or left
    sim = harness.active
    sim.read_orders()
    assert sim.forgotten == [b"o" * 32], "dropped now, not when the next task comes (maybe never)"
    for _ in range(50):  # the function is evicted too: unused for the retention time
        harness.send(HeartbeatEcho(sent_at_us=0))
        harness.tick(2)
    sim.read_orders()
    assert sim.forgotten == [b"o" * 32, FUNCTION]
    again = harness.task(b"o" * 32)
    sent = harness.send(again)
    assert sorted(of_type(sent, ObjectRequest)[0].object_ids) == sorted([FUNCTION, b"o" * 32])
    harness.serve(FUNCTION)
    harness.serve(b"o" * 32)
    handed = harness.hands[-1].tasks[0]
    assert handed.forget_object_ids == []
    assert handed.function_payload is not None and handed.arguments[1].payload is not None


def test_a_large_result_not_held_here_is_forgotten_by_the_processor_that_made_it():
    """A task process keeps its large results as objects for the graph nodes it may run next; one the worker does not
    hold (no data address: it goes to the scheduler) is dropped at once, or it would stay to the process's end."""
    for data_address, forgotten in ((None, True), ("tcp://127.0.0.1:5555", False)):
        harness = connected(data_address=data_address) if data_address else connected()
        task = harness.task()
        harness.send(task)
        sim = harness.active
        harness.run(sim.number, payload=SharedBytes.create(b"x" * 300_000))
        sim.read_orders()
        assert (task.task_id in sim.forgotten) is forgotten
        assert (harness.core.cache.held_payload(task.task_id) is None) is forgotten


def test_an_object_the_scheduler_deletes_while_a_task_uses_it_is_dropped_once_that_task_is_done():
    harness = connected()
    first, second = harness.task(b"o" * 32), harness.task(b"p" * 32)
    harness.send(first)
    harness.serve(b"o" * 32)
    sim = harness.active
    sim.read_orders()
    sim.start_next()  # running: it needs the object
    harness.send(ObjectDelete(object_ids=[b"o" * 32]))
    assert b"o" * 32 in harness.core.cache
    harness.send(second)
    harness.serve(b"p" * 32)
    sim.read_orders()
    assert sim.forgotten == []
    sim.finish()
    harness.report(1)
    assert b"o" * 32 not in harness.core.cache, "not kept for the retention time once nothing needs it"
    sim.read_orders()
    assert sim.forgotten == [b"o" * 32] or harness.hands[-1].tasks[0].forget_object_ids == [b"o" * 32]


def test_a_large_result_travels_as_an_object_before_its_task_result():
    harness = connected()
    task = harness.task()
    harness.send(task)
    big = b"x" * (config.DEFAULT_INLINE_LIMIT_BYTES + 1)
    sim = harness.active
    sim.read_orders()
    sim.start_next()
    sim.finish(payload=big)
    out = harness.report(1)
    assert [type(message) for message in out] == [ObjectPut, TaskResult]
    assert out[0].payload == big and out[1].in_object and out[1].payload == b""


def run_large(harness, size: int = config.DEFAULT_INLINE_LIMIT_BYTES + 1):
    task = harness.task()
    harness.send(task)
    sim = harness.active
    sim.read_orders()
    sim.start_next()
    sim.finish(payload=b"x" * size)
    return task, harness.report(sim.number)


def test_a_worker_with_a_data_address_holds_a_large_result_and_sends_only_its_size():
    harness = connected(
        data_address="tcp://10.0.0.1:5000", object_retention_seconds=60, garbage_collect_interval_seconds=30
    )
    task, out = run_large(harness)
    (told,) = out
    assert type(told) is TaskResult and told.in_object and told.held_bytes == config.DEFAULT_INLINE_LIMIT_BYTES + 1
    assert harness.core.held_payload(task.task_id) == b"x" * (config.DEFAULT_INLINE_LIMIT_BYTES + 1)
    for _ in range(100):  # held for the cluster: never evicted for want of use, unlike fetched objects
        harness.send(HeartbeatEcho(sent_at_us=0))
        harness.tick(2)
    assert harness.core.held_payload(task.task_id) is not None
    (put,) = harness.send(ObjectRequest(object_ids=[task.task_id, b"gone" * 4], via_scheduler=True))[:1]
    assert type(put) is ObjectPut and put.object_id == task.task_id and put.kind == ObjectKind.result
    assert harness.sent[-1] == ObjectResponse(object_id=b"gone" * 4, found=False), "what it does not hold, it says"
    harness.send(ObjectDelete(object_ids=[task.task_id]))
    assert harness.core.held_payload(task.task_id) is None


def test_without_a_data_address_or_an_older_scheduler_a_large_result_is_put():
    for harness in (connected(), Harness(data_address="tcp://10.0.0.1:5000")):
        if not harness.core.registrations:
            harness.connect(holds_on_workers=False)  # an older scheduler
            harness.serve(FUNCTION)
        _, out = run_large(harness)
        assert [type(message) for message in out] == [ObjectPut, TaskResult] and not out[1].held_bytes


def test_held_results_outlive_a_lost_scheduler_and_are_listed_for_the_next_one():
    harness = connected(data_address="tcp://10.0.0.1:5000")
    task, _ = run_large(harness)
    harness.core.connection_dropped(harness.now)
    harness._step()
    assert harness.core.held_payload(task.task_id) is not None, "kept, and still served, while it registers again"
    hello = of_type(harness.sent, Hello)[-1]
    assert hello.previous_registrations == 1
    assert hello.held_results == [HeldResult(object_id=task.task_id, size=config.DEFAULT_INLINE_LIMIT_BYTES + 1)]
    harness.send(
        HelloReply(protocol_version=1, accepted=True, holds_on_workers=True, adopts_held_results=True),
        ObjectDelete(object_ids=[task.task_id]),  # the scheduler knew it already, or nobody claimed it in time
    )
    assert harness.core.held_payload(task.task_id) is None


def test_held_results_are_dropped_when_the_next_scheduler_does_not_adopt_them():
    harness = connected(data_address="tcp://10.0.0.1:5000")
    task, _ = run_large(harness)
    harness.core.connection_dropped(harness.now)
    harness._step()
    harness.send(HelloReply(protocol_version=1, accepted=True, holds_on_workers=True))  # an older scheduler
    assert harness.core.held_payload(task.task_id) is None, "nobody would ever free it"


def test_goodbye_and_signals_exit():
    harness = connected()
    harness.send(Goodbye(reason="stopping"))
    assert harness.exit.code == EXIT_OK and "stopping" in harness.exit.reason
    harness = connected()
    harness.core.stop(EXIT_OK, "received SIGTERM", disconnect=True)
    assert harness._step() and of_type(harness.sent, WorkerDisconnect) and harness.exit.disconnect


def test_a_worker_stopped_before_its_hello_is_answered_still_says_goodbye():
    """The scheduler may have registered it already: without a WorkerDisconnect it would wait for its heartbeats."""
    harness = Harness()
    assert of_type(harness.sent, Hello), "said Hello, no answer yet"
    harness.core.stop(EXIT_OK, "received SIGINT", disconnect=True)
    harness._step()
    assert of_type(harness.sent, WorkerDisconnect) and harness.exit.disconnect


def test_the_death_timeout_exits_with_what_was_heard():
    harness = Harness(death_timeout_seconds=10)
    harness.tick(10)
    assert harness.exit.code == EXIT_SCHEDULER_LOST and "no answer from" in harness.exit.reason
    harness = connected(death_timeout_seconds=3)
    harness.tick(3)
    assert harness.exit.code == EXIT_SCHEDULER_LOST and "nothing heard from the scheduler for 3s" in harness.exit.reason


def test_a_long_step_of_the_worker_is_not_the_schedulers_silence():
    """One turn of the agent's loop took 6 s (a task message of a gigabyte encoded): it read nothing and sent no
    heartbeat meanwhile, so the scheduler's peer timeout (5 s) has not run out; before, the worker dropped its tasks and
    registered again, and its graph ran again elsewhere."""
    harness = connected()
    harness.tick(0.5)
    harness.now += 6.0
    harness.core.stalled(6.0, harness.now)
    harness.tick(0.0)
    assert harness.connections == 1 and harness.exit is None, "still the same connection"
    harness.now += 5.0
    harness.core.stalled(0.9, harness.now)  # an ordinary turn: nothing forgiven
    harness.tick(0.0)
    assert harness.connections == 2, "then silent for its peer timeout: lost, and registering again"


def _waiting_lines(caplog) -> list:
    lines = [record.getMessage() for record in caplog.records]
    return [line for line in lines if "still waiting for the scheduler" in line]


def test_a_worker_waiting_for_its_scheduler_says_so_less_and_less_often(caplog):
    """After 5 s, 15 s, 45 s, 135 s: then every WAITING_LOG_MAX_SECONDS at most; each time when `tick` is due."""
    harness = Harness(address="tcp://10.1.2.3:2345", death_timeout_seconds=1000)
    start = harness.now
    seen = []
    with caplog.at_level(logging.WARNING, logger="scaler.worker.core"):
        while harness.now - start < 900:
            harness.now = harness.core.next_deadline()  # as the agent waits: until the core has something to do
            harness.tick()
            lines = _waiting_lines(caplog)
            if len(lines) > len(seen):
                seen.append((round(harness.now - start), lines[-1]))
    assert [at for at, _ in seen] == [5, 15, 45, 135, 405, 705]
    assert seen[1][1] == (
        "Worker[test]: still waiting for the scheduler at tcp://10.1.2.3:2345 after 15s"
        " (exiting in 985s if none answers)"
    )
    assert harness.exit is None


def test_a_worker_that_lost_its_scheduler_says_it_is_waiting_again_and_not_once_registered(caplog):
    harness = connected(death_timeout_seconds=60)
    with caplog.at_level(logging.WARNING, logger="scaler.worker.core"):
        harness.tick(20)  # no echo for 20 s: not connected any more
        lost_at = harness.now
        assert harness.core.connection == CONNECTING and not _waiting_lines(caplog)
        harness.now = harness.core.next_deadline()
        while not _waiting_lines(caplog):
            harness.tick(0.5)
        assert harness.now - lost_at == pytest.approx(5, abs=0.5)
        assert "after 5s (exiting in 35s if none answers)" in _waiting_lines(caplog)[0]
        harness.connect()
        harness.tick(100)
    assert len(_waiting_lines(caplog)) == 1, "registered: no more waiting lines"


def test_a_lost_scheduler_is_a_state_the_worker_registers_again_as_a_new_worker():
    harness = connected(death_timeout_seconds=60)
    teach_short(harness)
    busy, queued = harness.task(), harness.task(function_id=b"g" * 32)
    harness.send(busy, queued)
    harness.active.read_orders()
    harness.active.start_next()
    for _ in range(4):
        harness.tick(1)
    assert harness.connections == 1 and harness.core.tasks
    harness.tick(1)  # 5 s of silence, the scheduler's peer timeout: it dropped us, or died
    assert harness.connections == 2 and harness.exit is None
    assert not harness.core.tasks and harness.killed == [1], "the busy processor goes, its result is useless"
    hello = of_type(harness.sent, Hello)[-1]
    assert hello.name == "W|test|2", "a new identity"
    heartbeats = len(harness.heartbeats)
    harness.tick(1)
    assert harness.connections == 3, "no answer: Hello again, on a new connection"
    harness.tick(1)
    assert harness.connections == 3, "backing off"
    assert len(harness.heartbeats) == heartbeats, "no heartbeat while not registered"
    harness.connect()
    assert harness.core.registrations == 2
    task = harness.task()
    harness.send(task)
    harness.serve(FUNCTION)
    out = harness.run(harness.core.active.number)
    assert results(out)[task.task_id].status == TaskStatus.success


def test_an_impossible_transition_raises_with_the_tasks_story():
    harness = connected()
    task = harness.task()
    harness.send(task)
    harness.active.read_orders()
    state = harness.core.tasks[task.task_id]
    with pytest.raises(InvalidTransition, match="handed.*dispatch"):
        state.move("object arrived", 1)
    assert isinstance(state, WorkerTask) and isinstance(harness.hands[-1], HandTasks)


def test_a_closed_connection_means_registering_again_at_once():
    harness = connected()
    harness.send(harness.task(b"z" * 32))  # queued, waiting for its object: its processor has nothing to drop
    harness.core.connection_dropped(harness.now)
    harness._step()
    assert harness.connections == 2 and not harness.core.tasks and harness.killed == [], "an idle processor stays"
    harness.core.connection_dropped(harness.now)  # before the new scheduler answered: our Hello may be lost
    harness._step()
    assert harness.connections == 3
    harness.connect()
    assert harness.core.registrations == 2 and harness.exit is None


def test_the_protocol_docs_show_the_transitions_the_core_checks():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
    assert transitions_table() in docs, "docs/protocol.md: paste `python -m scaler.worker.state` under 'On the worker'"


def test_a_goodbye_asking_to_register_again_is_a_lost_scheduler_not_an_exit():
    harness = connected()
    harness.send(harness.task(b"z" * 32))
    harness.send(Goodbye(reason="not registered: send Hello first", reconnect=True))
    assert harness.exit is None and harness.connections == 2 and not harness.core.tasks
    hello = of_type(harness.sent, Hello)[-1]
    assert hello.previous_registrations == 1, "the scheduler is told this worker survived a lost scheduler"
    harness.send(Goodbye(reason="received SIGTERM", reconnect=True))  # before the answer: nothing more to drop
    assert harness.exit is None
    harness.connect()
    assert harness.core.registrations == 2
    harness.send(Goodbye(reason="a client shut the cluster down"))
    assert harness.exit.code == EXIT_OK


def test_the_results_of_one_report_leave_in_the_order_their_tasks_ran_whatever_their_kind():
    harness = connected()
    teach_short(harness)
    names = ["short", "failed", "short again", "large", "last"]
    tasks = {name: harness.task() for name in names}
    harness.send(*tasks.values())
    sim = harness.processors[1]
    large = b"L" * (config.DEFAULT_INLINE_LIMIT_BYTES + 1)
    for name in names:
        sim.read_orders()
        sim.start_next()
        sim.finish(succeeded=name != "failed", payload=large if name == "large" else None)
    out = harness.report(1)
    ids = {task.task_id: name for name, task in tasks.items()}
    order = [
        (type(message).__name__, ids[message.object_id if type(message) is ObjectPut else message.task_id])
        for message in out
    ]
    assert order == [
        ("TaskResult", "short"),
        ("TaskResult", "failed"),
        ("TaskResult", "short again"),
        ("ObjectPut", "large"),
        ("TaskResult", "large"),
        ("TaskResult", "last"),
    ]
    statuses = {ids[result.task_id]: (result.status, result.in_object) for result in of_type(out, TaskResult)}
    assert statuses["failed"] == (TaskStatus.failed, False) and statuses["large"] == (TaskStatus.success, True)
    assert not harness.core.tasks


def test_a_held_input_is_fetched_from_its_holder_or_relayed_when_it_does_not_answer():
    harness = connected(data_address="tcp://10.0.0.1:5000")
    assert of_type(harness.sent, Hello)[0].fetches_from_holders
    first, second = harness.task(b"h" * 16), harness.task(b"i" * 16)
    harness.send(first, second)
    found = dict(found=True, kind=ObjectKind.result, chunk_count=0, total_size=9)
    harness.send(ObjectResponse(object_id=b"h" * 16, holder_address="tcp://10.0.0.2:5000", **found))
    assert harness.fetches == [FetchData("tcp://10.0.0.2:5000", b"h" * 16)]
    harness.core.data_fetched(b"h" * 16, memoryview(b"held data"), harness.now)
    harness._step()
    assert harness.hands[-1].tasks[0].task_id == first.task_id, "its input is here: it runs"
    harness.send(ObjectResponse(object_id=b"i" * 16, holder_address="tcp://10.0.0.3:5000", **found))
    harness.core.data_fetched(b"i" * 16, None, harness.now)  # its holder did not answer in time
    assert harness._step() == [ObjectRequest(object_ids=[b"i" * 16], via_scheduler=True)]


def test_a_worker_takes_the_results_a_retiring_worker_hands_over_and_holds_them():
    harness = connected(
        data_address="tcp://10.0.0.1:5000", object_retention_seconds=1, garbage_collect_interval_seconds=1
    )
    assert of_type(harness.sent, Hello)[0].takes_handoffs, "it says it may hold what a retiring worker held"
    kept, lost = b"k" * 16, b"l" * 16
    assert harness.send(ObjectRequest(object_ids=[kept, lost], take_from="tcp://10.0.0.2:5000")) == []
    assert harness.fetches == [FetchData("tcp://10.0.0.2:5000", kept), FetchData("tcp://10.0.0.2:5000", lost)]
    harness.core.data_fetched(kept, memoryview(b"the result"), harness.now)
    assert harness._step() == [
        ObjectResponse(object_id=kept, found=True, kind=ObjectKind.result, chunk_count=0, total_size=10)
    ], "it says it holds it now"
    harness.core.data_fetched(lost, None, harness.now)  # the retiring worker did not answer in time
    assert harness._step() == [ObjectResponse(object_id=lost, found=False)]
    for _ in range(5):  # held for the cluster, as its own results are: never evicted for want of use
        harness.send(HeartbeatEcho(sent_at_us=0))
        harness.tick(2)
    assert bytes(harness.core.held_payload(kept)) == b"the result" and harness.core.held_payload(lost) is None
    (put,) = harness.send(ObjectRequest(object_ids=[kept], via_scheduler=True))
    assert type(put) is ObjectPut and put.payload == b"the result", "served like its own"
    harness.send(ObjectDelete(object_ids=[kept]))
    assert harness.core.held_payload(kept) is None


def test_a_result_to_take_that_was_made_again_here_meanwhile_is_said_held():
    """Asked to take a retiring worker's result, this worker also made it again (the retiring one left first, the
    scheduler made it again here): the take fails, but the worker says it holds the result, or the scheduler would
    take its copy for lost, make it again elsewhere, and leave this one held here for nobody."""
    harness = connected(data_address="tcp://10.0.0.1:5000")
    again = harness.task()
    harness.send(ObjectRequest(object_ids=[again.task_id], take_from="tcp://10.0.0.2:5000"))
    harness.send(again)
    harness.run(harness.active.number, payload=SharedBytes.create(b"m" * 300_000))
    assert harness.core.held_payload(again.task_id) is not None
    harness.core.data_fetched(again.task_id, None, harness.now)  # the retiring worker is gone
    assert harness._step() == [
        ObjectResponse(object_id=again.task_id, found=True, kind=ObjectKind.result, chunk_count=0, total_size=300_000)
    ]


def test_a_worker_that_holds_nothing_for_the_cluster_takes_no_handed_over_result():
    harness = connected()  # no data address
    object_id = b"k" * 16
    assert harness.send(ObjectRequest(object_ids=[object_id], take_from="tcp://10.0.0.2:5000")) == [
        ObjectResponse(object_id=object_id, found=False)
    ]
    assert not harness.fetches


def test_a_taken_result_that_a_task_here_waits_for_serves_both():
    harness = connected(data_address="tcp://10.0.0.1:5000")
    object_id = b"h" * 16
    task = harness.task(object_id)
    harness.send(task)
    harness.send(ObjectRequest(object_ids=[object_id], take_from="tcp://10.0.0.2:5000"))
    where = ObjectResponse(object_id=object_id, found=True, chunk_count=0, holder_address="tcp://10.0.0.2:5000")
    out = harness.send(where)
    assert out == [] and len(harness.fetches) == 2
    harness.core.data_fetched(object_id, memoryview(b"held"), harness.now)
    (taken,) = harness._step()
    assert taken.found and taken.total_size == 4
    assert harness.hands[-1].tasks[0].task_id == task.task_id, "its input is here: it runs"
