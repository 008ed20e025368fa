"""How the client's IO thread hands a decoded frame to its handlers: runs of a kind with a batch handler go whole."""

from __future__ import annotations

from typing import Any, List

from scaler.client.io_thread import IOThread
from scaler.config import DEFAULT_TASKS_PER_FRAME
from scaler.protocol import Encoded, HeartbeatEcho, TaskResult


class _Handlers:
    """What _dispatch uses of an IOThread, recording the order of the calls."""

    def __init__(self) -> None:
        self.calls: List[Any] = []
        self._batch_handlers = {TaskResult: lambda messages: self.calls.append(("batch", messages))}

    def _handle(self, message: Any) -> None:
        self.calls.append(("one", message))


def test_a_mixed_frame_hands_each_run_of_results_to_the_batch_handler_in_order() -> None:
    first, second, third = (TaskResult(task_id=bytes([number]) * 16) for number in range(3))
    echo = HeartbeatEcho(sent_at_us=1)
    handlers = _Handlers()
    IOThread._dispatch(handlers, [first, second, echo, third])  # type: ignore[arg-type]
    assert handlers.calls == [("batch", [first, second]), ("one", echo), ("batch", [third])]


def test_a_frame_of_results_only_goes_to_the_batch_handler_whole() -> None:
    results = [TaskResult(task_id=bytes([number]) * 16) for number in range(3)]
    handlers = _Handlers()
    IOThread._dispatch(handlers, results)  # type: ignore[arg-type]
    assert len(handlers.calls) == 1 and handlers.calls[0][0] == "batch"
    assert handlers.calls[0][1] is results, "the common frame is handed on as decoded, not copied"


def test_messages_without_a_batch_handler_go_one_by_one() -> None:
    echoes = [HeartbeatEcho(sent_at_us=number) for number in range(3)]
    handlers = _Handlers()
    IOThread._dispatch(handlers, echoes)  # type: ignore[arg-type]
    assert handlers.calls == [("one", echo) for echo in echoes]


class _Sender:
    """What _flush uses of an IOThread: the queue it takes, and a socket recording the frames sent."""

    def __init__(self, items: List[Any]) -> None:
        self.frames: List[bytes] = []
        self._items = items
        self._socket = self

    def _take_outgoing(self) -> List[Any]:
        items, self._items = self._items, []
        return items

    def send(self, frame: bytes, copy: bool = True) -> None:
        self.frames.append(bytes(frame))

    def _frame(self, batch: List[Any], messages: int) -> bytes:
        return IOThread._frame(self, batch, messages)  # type: ignore[arg-type]


def test_a_run_of_submitted_tasks_leaves_in_frames_of_at_most_tasks_per_frame_in_queue_order() -> None:
    run = [bytes([number % 251]) for number in range(DEFAULT_TASKS_PER_FRAME + 3)]
    sender = _Sender([Encoded(b"before"), run, b"own frame", Encoded(b"after")])
    assert IOThread._flush(sender) is True  # type: ignore[arg-type]
    assert sender.frames == [
        b"before",
        b"".join(run[:DEFAULT_TASKS_PER_FRAME]),
        b"".join(run[DEFAULT_TASKS_PER_FRAME:]),
        b"own frame",
        b"after",
    ]
