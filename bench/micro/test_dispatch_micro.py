"""How a core finds the handler of a decoded message: a list indexed by the message's kind (`WHICH`, the scheduler's
way) against a dict keyed by its class (the worker's and the client's before). A frame of 1,024 messages of mixed
kinds, each handed to a handler that counts it; per message, divide the median by 1,024.

    .venv/bin/python -m pytest bench/micro/test_dispatch_micro.py
    .venv-pypy/bin/python -m pytest bench/micro/test_dispatch_micro.py
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import pytest

from scaler.protocol import (
    MESSAGE_TYPES,
    HeartbeatEcho,
    ObjectResponse,
    Task,
    TaskCancel,
    TaskResult,
    decode_frame,
    encode_many,
)

FRAME = 1024


@pytest.fixture(scope="module")
def messages() -> List[Any]:
    kinds = [Task(task_id=b"t" * 16), TaskResult(task_id=b"r" * 16), TaskCancel(), ObjectResponse(), HeartbeatEcho()]
    return decode_frame(encode_many([kinds[index % 5 if index % 7 == 0 else 0] for index in range(FRAME)]))


def _counter() -> tuple:
    counts = [0]

    def handle(message: Any) -> None:
        counts[0] += 1

    return counts, handle


def by_class(messages: List[Any], handlers: Dict[type, Callable[[Any], None]]) -> None:
    for message in messages:
        handler = handlers.get(type(message))
        if handler is not None:
            handler(message)


def by_kind(messages: List[Any], handlers: List[Optional[Callable[[Any], None]]]) -> None:
    for message in messages:
        handler = handlers[message.WHICH]
        if handler is not None:
            handler(message)


def test_dispatch_by_class(benchmark, messages: List[Any]) -> None:
    counts, handle = _counter()
    handlers = {cls: handle for cls in (Task, TaskResult, TaskCancel, ObjectResponse, HeartbeatEcho)}
    benchmark(by_class, messages, handlers)
    assert counts[0] % FRAME == 0 and counts[0]


def test_dispatch_by_kind(benchmark, messages: List[Any]) -> None:
    counts, handle = _counter()
    handlers: List[Optional[Callable[[Any], None]]] = [None] * len(MESSAGE_TYPES)
    for cls in (Task, TaskResult, TaskCancel, ObjectResponse, HeartbeatEcho):
        handlers[cls.WHICH] = handle
    benchmark(by_kind, messages, handlers)
    assert counts[0] % FRAME == 0 and counts[0]
