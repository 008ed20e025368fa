"""The worker's task queue: arrival order, except nested tasks first and newest first (depth first)."""

from __future__ import annotations

from typing import List

from scaler.protocol import Task
from scaler.worker.state import WorkerTask
from scaler.worker.task_queue import TaskQueue


def queued(name: str, parent: bytes = b"", missing: tuple = (), priority: int = 0) -> WorkerTask:
    task = Task(task_id=name.encode(), function_id=b"f", parent_task_id=parent, priority=priority)
    return WorkerTask(task, (b"f", *missing), set(missing))


def drain(queue: TaskQueue) -> List[str]:
    order = []
    while queue.first_ready() is not None:
        first = queue.first_ready()
        assert queue.pop_ready() is first
        order.append(first.task_id.decode())
    return order


def test_plain_tasks_run_in_arrival_order_nested_ones_first_newest_first() -> None:
    queue = TaskQueue()
    for item in [queued("a"), queued("b"), queued("c1", b"p"), queued("d"), queued("c2", b"p")]:
        queue.add(item)
    assert len(queue) == 5 and [task.task_id for task in queue] == [b"c2", b"c1", b"a", b"b", b"d"]
    assert drain(queue) == ["c2", "c1", "a", "b", "d"]


def test_put_back_returns_tasks_to_the_head_in_their_order() -> None:
    queue = TaskQueue()
    for item in [queued("a"), queued("b"), queued("n1", b"p"), queued("n2", b"p")]:
        queue.add(item)
    taken = [queue.pop_ready() for _ in range(4)]  # n2, n1, a, b handed to a processor that parked
    queue.add(queued("later"))
    queue.put_back(taken)
    assert drain(queue) == ["n2", "n1", "a", "b", "later"]


def test_a_nested_task_waiting_for_an_object_joins_the_nested_line_when_it_arrives() -> None:
    queue = TaskQueue()
    queue.add(queued("a"))
    queue.add(queued("n", b"p", missing=(b"obj",)))
    assert queue.first_ready().task_id == b"a"
    queue.object_arrived(b"obj")
    assert drain(queue) == ["n", "a"]


def test_balancing_takes_the_tasks_that_would_wait_longest_here() -> None:
    queue = TaskQueue()
    for item in [queued("a"), queued("b"), queued("n1", b"p"), queued("n2", b"p")]:
        queue.add(item)
    assert [t.task_id for t in queue.take_newest(3)] == [b"b", b"a", b"n1"]
    assert drain(queue) == ["n2"]


def test_plain_tasks_of_priority_zero_queue_between_the_other_priorities_whenever_they_arrive() -> None:
    # Plain priority-0 tasks take a shorter way into the queue than the others: the order must not show it.
    queue = TaskQueue()
    for item in [queued("high1", priority=2), queued("a"), queued("low", priority=-1), queued("b")]:
        queue.add(item)
    assert queue.first_ready().task_id == b"high1" and queue.pop_ready().task_id == b"high1"
    for item in [queued("c"), queued("nested", b"p"), queued("high2", priority=2), queued("d")]:
        queue.add(item)
    expected = ["high2", "nested", "a", "b", "c", "d", "low"]
    assert len(queue) == 7 and [task.task_id.decode() for task in queue] == expected
    assert drain(queue) == expected and len(queue) == 0


def test_plain_tasks_removed_or_waiting_for_objects_keep_their_places_right() -> None:
    queue = TaskQueue()
    tasks = {name: queued(name) for name in ("a", "b", "c")}
    waiting = queued("w", missing=(b"obj",))
    for item in [tasks["a"], waiting, tasks["b"], tasks["c"]]:
        queue.add(item)
    assert len(queue) == 4 and queue.remove(tasks["b"]) and not queue.remove(tasks["b"])
    assert len(queue) == 3 and not tasks["b"].queued
    assert [task.task_id for task in queue.object_arrived(b"obj")] == [b"w"]
    queue.add(queued("d"))
    assert drain(queue) == ["a", "c", "w", "d"] and len(queue) == 0
