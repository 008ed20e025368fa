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
