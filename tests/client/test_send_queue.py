"""The client's send queue decides when the IO thread must be woken: once per burst of calls, at once after a lull."""

from __future__ import annotations

from scaler.client.send_queue import SendQueue


def test_the_first_message_wakes_and_the_rest_of_the_burst_does_not() -> None:
    queue = SendQueue()
    assert queue.add_one("a") is True
    assert queue.add_one("b") is False
    assert queue.add(["c", "d"]) is False
    assert queue.take() == ["a", "b", "c", "d"]
    # the IO thread took messages, so it looks again on its own soon: more of the burst wakes nobody
    assert queue.add_one("e") is False
    assert queue.add(["f"]) is False
    assert queue.take() == ["e", "f"]


def test_a_take_that_finds_nothing_ends_the_burst() -> None:
    queue = SendQueue()
    queue.add_one("a")
    assert queue.take() == ["a"]
    assert queue.take() == []  # the IO thread looked again and found nothing: it sleeps long now
    assert queue.add(["b"]) is True
    assert queue.take() == ["b"]
    assert queue.take() == []
    assert queue.add_one("c") is True


def test_adding_nothing_never_wakes() -> None:
    queue = SendQueue()
    assert queue.add([]) is False
    assert queue.items == []
    assert queue.add_one("a") is True


def test_replace_keeps_the_given_items_in_order() -> None:
    queue = SendQueue()
    queue.add(["a", "b"])
    queue.replace(["put", "task"])
    assert queue.take() == ["put", "task"]


def test_submitted_tasks_queue_as_runs_in_order_with_other_messages() -> None:
    queue = SendQueue()
    assert queue.add_task(b"t1") is True  # the first of a burst wakes, as add_one does
    assert queue.add_task(b"t2") is False
    assert queue.add_one("cancel") is False
    assert queue.add_task(b"t3") is False
    assert queue.take() == [[b"t1", b"t2"], "cancel", [b"t3"]]
    assert queue.add_task(b"t4") is False  # within the look again
    assert queue.add(["put"]) is False
    assert queue.add_task(b"t5") is False
    assert queue.take() == [[b"t4"], "put", [b"t5"]]
    assert queue.take() == []
    assert queue.add_task(b"t6") is True  # a take found nothing: the IO thread sleeps, so the next task wakes it


def test_replace_drops_the_submitted_tasks_not_taken() -> None:
    queue = SendQueue()
    queue.add_task(b"t1")
    queue.replace(["put", "task"])  # a resubmission sends every unanswered task again itself
    assert queue.add_task(b"t2") is False
    assert queue.take() == ["put", "task", [b"t2"]]
