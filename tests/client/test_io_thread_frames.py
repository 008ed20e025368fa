"""How the client's IO thread hands a decoded frame to its handlers: runs of a kind with a batch handler go whole."""

from __future__ import annotations

from typing import Any, List

from scaler.client.io_thread import IOThread
from scaler.protocol import HeartbeatEcho, TaskResult


class _Handlers:
    """What _handle_mixed uses of an IOThread, recording the order of the calls."""

    def __init__(self) -> None:
        self.calls: List[Any] = []
        self._batch_handlers = {TaskResult: lambda messages: self.calls.append(("batch", messages))}

    def _handle(self, message: Any) -> None:
        self.calls.append(("one", message))


def test_a_mixed_frame_hands_each_run_of_results_to_the_batch_handler_in_order() -> None:
    first, second, third = (TaskResult(task_id=bytes([number]) * 16) for number in range(3))
    echo = HeartbeatEcho(sent_at_us=1)
    handlers = _Handlers()
    IOThread._handle_mixed(handlers, [first, second, echo, third])  # type: ignore[arg-type]
    assert handlers.calls == [("batch", [first, second]), ("one", echo), ("batch", [third])]


def test_messages_without_a_batch_handler_go_one_by_one() -> None:
    echoes = [HeartbeatEcho(sent_at_us=number) for number in range(3)]
    handlers = _Handlers()
    IOThread._handle_mixed(handlers, echoes)  # type: ignore[arg-type]
    assert handlers.calls == [("one", echo) for echo in echoes]
