"""Task policies in the worker core (sans-IO, see core_harness.py, validate() after every step): the queue runs in
priority order, and a task's timeout runs from when it starts, parked time included, and stops it like a cancel."""

from __future__ import annotations

from typing import Tuple

from scaler.protocol import Hello, Task, TaskCancel, TaskResult, TaskStatus
from scaler.worker.task_queue import TaskQueue
from tests.worker.core_harness import Harness, of_type
from tests.worker.test_core import connected, results, teach_short
from tests.worker.test_task_queue import drain, queued

# ---- the queue -------------------------------------------------------------------------------------------------------


def test_the_queue_runs_the_highest_priority_first_and_keeps_arrival_order_within_one() -> None:
    queue = TaskQueue()
    for name, priority in [("a0", 0), ("b5", 5), ("c-1", -1), ("d0", 0), ("e5", 5), ("f3", 3), ("g-1", -1)]:
        queue.add(queued(name, priority=priority))
    expected = ["b5", "e5", "f3", "a0", "d0", "c-1", "g-1"]
    assert [task.task_id.decode() for task in queue] == expected
    assert drain(queue) == expected
    assert len(queue) == 0 and not queue._levels and not queue._lines, "emptied lines are dropped"


def test_nested_tasks_go_first_newest_first_within_their_priority() -> None:
    queue = TaskQueue()
    for name, parent, priority in [("p0", b"", 0), ("n1", b"p", 1), ("m1", b"", 1), ("n2", b"p", 1), ("q0", b"p", 0)]:
        queue.add(queued(name, parent, priority=priority))
    assert drain(queue) == ["n2", "n1", "m1", "q0", "p0"]


def test_a_task_of_a_higher_priority_arriving_later_overtakes_and_put_back_keeps_each_line() -> None:
    queue = TaskQueue()
    for item in [queued("a"), queued("b"), queued("c")]:
        queue.add(item)
    first = queue.first_ready()
    assert first.task_id == b"a" and queue.pop_ready() is first
    queue.add(queued("urgent", priority=7))
    assert queue.first_ready().task_id == b"urgent"
    taken = [queue.pop_ready()]
    queue.put_back([first, *taken])  # handed to a processor that parked before starting them
    assert drain(queue) == ["urgent", "a", "b", "c"]


def test_removed_tasks_are_skipped_and_balancing_takes_the_lowest_priorities_first() -> None:
    queue = TaskQueue()
    levels = [("a", 0), ("h", 2), ("l", -3), ("b", 0), ("i", 2)]
    tasks = {name: queued(name, priority=priority) for name, priority in levels}
    for task in tasks.values():
        queue.add(task)
    assert queue.remove(tasks["h"]) and not queue.remove(tasks["h"])
    assert [task.task_id for task in queue.take_newest(3)] == [b"l", b"b", b"a"]
    assert drain(queue) == ["i"]


def test_priorities_all_zero_make_no_line_and_no_heap_entry() -> None:
    queue = TaskQueue()
    for index in range(100):
        queue.add(queued(f"t{index}"))
    assert not queue._levels and not queue._lines
    assert drain(queue) == [f"t{index}" for index in range(100)]


# ---- the core: priority order and the Hello --------------------------------------------------------------------------


def test_the_worker_says_it_honours_task_policies() -> None:
    (hello,) = of_type(Harness().sent, Hello)
    assert hello.task_policies is True


def test_the_core_hands_queued_tasks_in_priority_order() -> None:
    harness = connected()
    blocker = harness.task()
    harness.send(blocker)  # handed at once, the processor is busy with it
    low = [harness.task(priority=0) for _ in range(2)]
    high = harness.task(priority=3)
    negative = harness.task(priority=-2)
    harness.send(low[0], negative, high, low[1])
    sim = harness.active
    for _ in range(5):
        harness.run(sim.number, duration_us=2_000_000)  # long: handed one at a time
    assert sim.ran == [blocker.task_id, high.task_id, low[0].task_id, low[1].task_id, negative.task_id]


# ---- the core: timeouts ----------------------------------------------------------------------------------------------


def start(harness: Harness) -> None:
    sim = harness.active
    sim.read_orders()
    assert sim.start_next() is not None


def running(timeout_ms: int) -> Tuple[Harness, Task]:
    """A connected worker running one task with that timeout, started now."""
    harness = connected()
    task = harness.task(timeout_ms=timeout_ms)
    harness.send(task)
    start(harness)
    return harness, task


def test_a_timeout_fires_at_its_deadline_and_replaces_the_processor() -> None:
    harness, task = running(1500)
    started_at = harness.now
    assert harness.core.timed[task.task_id].deadline == started_at + 1.5
    assert not of_type(harness.tick(1.2), TaskResult) and not harness.killed  # a heartbeat is due meanwhile
    assert harness.core.next_deadline() == started_at + 1.5, "the shell wakes up for it"
    assert not of_type(harness.tick(0.299), TaskResult) and not harness.killed
    (result,) = of_type(harness.tick(0.002), TaskResult)
    assert result.task_id == task.task_id and result.status == TaskStatus.timed_out
    assert "ran longer than its timeout of 1.5 s" in result.error_text
    assert harness.killed == [1] and harness.core.active.number == 2, "stopped like a cancel: a new processor"
    assert not harness.core.timed and harness.core.next_deadline() > harness.now + 0.5
    after = harness.task()
    harness.send(after)
    assert results(harness.run(2))[after.task_id].status == TaskStatus.success, "the worker keeps working"


def test_the_clock_of_a_queued_task_starts_only_when_it_runs() -> None:
    harness = connected()
    long_task = harness.task()
    timed = harness.task(timeout_ms=500)
    harness.send(long_task, timed)
    start(harness)
    assert not of_type(harness.tick(3.0), TaskResult), "queued for 3 s behind a long task: not timed out"
    harness.active.finish(duration_us=3_000_000)
    harness.report(1)  # the timed task is handed now, its clock starts
    start(harness)
    assert not of_type(harness.tick(0.4), TaskResult)
    (result,) = of_type(harness.tick(0.11), TaskResult)
    assert result.task_id == timed.task_id and result.status == TaskStatus.timed_out


def test_a_task_handed_ahead_starts_its_clock_when_its_predecessor_finishes() -> None:
    harness = connected()
    teach_short(harness)  # short tasks are handed several at a time
    first, timed = harness.task(), harness.task(timeout_ms=1000)
    harness.send(first, timed)
    sim = harness.active
    assert len(sim.inbox[-1].tasks) == 2, "both in the pipe"
    assert not harness.core.timed[timed.task_id].deadline, "behind another task: its clock has not started"
    sim.read_orders()
    sim.start_next()
    harness.tick(2.0)  # the first task runs long this time
    sim.finish(duration_us=2_000_000)
    finished_at = harness.now
    harness.report(sim.number)
    assert harness.core.timed[timed.task_id].deadline == finished_at + 1.0
    sim.start_next()
    assert timed.task_id not in results(harness.tick(0.99))
    assert results(harness.tick(0.02))[timed.task_id].status == TaskStatus.timed_out


def test_a_parked_task_times_out_its_parked_time_included() -> None:
    harness, parent = running(1000)
    harness.tick(0.6)
    harness.block(1)  # waits on a future: processor 1 parks, processor 2 becomes the active one
    assert harness.core.active.number == 2
    child = harness.task(parent=parent.task_id)
    harness.send(child)
    assert not of_type(harness.tick(0.39), TaskResult)
    (result,) = of_type(harness.tick(0.02), TaskResult)
    assert result.task_id == parent.task_id and result.status == TaskStatus.timed_out
    assert harness.killed == [1] and harness.core.active.number == 2, "the parked processor goes, the active stays"
    assert results(harness.run(2))[child.task_id].status == TaskStatus.success


def test_a_result_crossing_the_timeout_wins() -> None:
    harness, task = running(1000)
    harness.tick(0.9)
    harness.active.finish()  # finished in time; its report has not been read yet when the deadline passes
    assert not of_type(harness.tick(0.2), TaskResult) and not harness.killed
    assert results(harness.report(1))[task.task_id].status == TaskStatus.success


def test_a_timeout_before_the_result_is_read_answers_once() -> None:
    harness, task = running(1000)
    assert results(harness.tick(1.01))[task.task_id].status == TaskStatus.timed_out
    sim = harness.processors[1]
    sim.finish()  # the killed processor's last words
    harness.core.processor_report(1, sim.report(), harness.now)
    assert not of_type(harness._step(), TaskResult), "a killed processor's result does not answer again"


def test_a_canceled_timed_task_is_answered_canceled_and_its_clock_stops() -> None:
    harness = connected()
    running, queued_task = harness.task(timeout_ms=1000), harness.task(timeout_ms=1000)
    harness.send(running, queued_task)
    start(harness)
    answered = results(harness.send(TaskCancel(task_ids=[running.task_id, queued_task.task_id])))
    assert {answer.status for answer in answered.values()} == {TaskStatus.canceled}
    assert harness.killed == [1] and not harness.core.timed
    assert not of_type(harness.tick(2.0), TaskResult), "no timeout after the cancel"


def test_a_task_not_started_at_its_deadline_gets_its_clock_when_it_starts() -> None:
    harness = connected()
    task = harness.task(timeout_ms=500)
    harness.send(task)  # handed to an idle processor: the clock starts, the processor is slow to start it
    assert not of_type(harness.tick(0.6), TaskResult) and not harness.killed
    assert not harness.core.timed[task.task_id].deadline
    start(harness)
    harness.tick(0.01)  # the shell observes that it started
    assert harness.core.timed[task.task_id].deadline == harness.now + 0.5
    assert not of_type(harness.tick(0.45), TaskResult)
    assert results(harness.tick(0.1))[task.task_id].status == TaskStatus.timed_out
