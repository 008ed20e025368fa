"""How the client's core takes a decoded frame (runs of results go to the batch handler whole), and how the IO thread
joins what is queued into frames under the scheduler's limit."""

from __future__ import annotations

from typing import Any, List, Tuple

from scaler.client.core import ClientCore
from scaler.client.io_thread import IOThread
from scaler.config import DEFAULT_MAX_FRAME_BYTES, DEFAULT_TASKS_PER_FRAME
from scaler.drop_streak import DropStreak
from scaler.errors import FrameTooLargeError
from scaler.protocol import Argument, Encoded, HeartbeatEcho, Task, TaskResult, encode


class _Handlers(ClientCore):
    """A core recording the order in which its handlers are called."""

    def __init__(self) -> None:
        super().__init__(b"C" * 16, "tcp://127.0.0.1:1", "here", 1, b"p" * 8, 0.0, lambda: None)
        self.calls: List[Any] = []
        self._handlers[HeartbeatEcho.WHICH] = lambda message: self.calls.append(("one", message))

    def _on_task_results(self, results: List[TaskResult]) -> None:
        self.calls.append(("batch", results))


def test_a_mixed_frame_hands_each_run_of_results_to_the_batch_handler_in_order() -> None:
    first, second, third = (TaskResult(task_id=bytes([number]) * 16) for number in range(3))
    echo = HeartbeatEcho(sent_at_us=1)
    handlers = _Handlers()
    handlers.receive([first, second, echo, third], 0.0)
    assert handlers.calls == [("batch", [first, second]), ("one", echo), ("batch", [third])]


def test_a_frame_of_results_only_goes_to_the_batch_handler_whole() -> None:
    results = [TaskResult(task_id=bytes([number]) * 16) for number in range(3)]
    handlers = _Handlers()
    handlers.receive(results, 0.0)
    assert len(handlers.calls) == 1 and handlers.calls[0][0] == "batch"
    assert handlers.calls[0][1] is results, "the common frame is handed on as decoded, not copied"


def test_messages_without_a_batch_handler_go_one_by_one() -> None:
    echoes = [HeartbeatEcho(sent_at_us=number) for number in range(3)]
    handlers = _Handlers()
    handlers.receive(echoes, 0.0)
    assert handlers.calls == [("one", echo) for echo in echoes]


class _Sender:
    """What _flush uses of an IOThread: the queue it takes, its frame limit, and a socket recording the frames sent."""

    def __init__(self, items: List[Any], max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.frames: List[bytes] = []
        self.refused: List[Tuple[Any, Exception]] = []
        self._items = items
        self._socket = self
        self._owner = self
        self.max_frame_bytes = max_frame_bytes
        self.drops = DropStreak()
        self._gone = False

    def take_outgoing(self) -> List[Any]:
        items, self._items = self._items, []
        return items

    def send(self, frame: bytes, flags: int = 0, copy: bool = True) -> None:
        self.frames.append(bytes(frame))

    def not_sent(self, message: Any, error: Exception) -> None:
        self.refused.append((message, error))

    _send_batch = IOThread._send_batch
    _send_joined = IOThread._send_joined
    _send_frame = IOThread._send_frame
    _send = IOThread._send
    _encode_batch = IOThread._encode_batch


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


def test_a_run_over_the_frame_limit_is_split_and_a_message_over_it_is_refused_not_sent() -> None:
    tasks = [encode(Task(task_id=bytes([index]) * 16, function_id=b"f" * 16)) for index in range(8)]
    limit = len(b"".join(tasks[:3]))  # the run of 8 must go in frames of at most 3 tasks
    huge = encode(Task(task_id=b"h" * 16, function_id=b"f" * 16, args=[Argument(data=b"x" * limit)]))
    sender = _Sender([tasks, huge], max_frame_bytes=limit)
    assert IOThread._flush(sender) is True  # type: ignore[arg-type]
    assert b"".join(sender.frames) == b"".join(tasks), "every task sent once, in order, and the huge one not"
    assert all(len(frame) <= limit for frame in sender.frames)
    ((message, error),) = sender.refused
    assert message.task_id == b"h" * 16 and isinstance(error, FrameTooLargeError)
    assert f"frame limit of {limit} bytes" in str(error) and "--max-frame-bytes" in str(error)
