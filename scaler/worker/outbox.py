"""What a worker sends the scheduler, batched: every message of one loop turn leaves in one ZeroMQ frame; and the
encoding of the message it sends most, a short task's TaskResult."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import zmq

from scaler import config
from scaler.protocol import Encoded, TaskResult, TaskStatus, Template, encode, encode_many, make_template

_SUCCESS = TaskStatus.success
_RESULT_SHAPES = 256  # (task id, payload) lengths remembered; past that the cache starts over
_NOT_MADE = object()

_ZERO_COPY_SEND_BYTES = 64 * 1024  # pyzmq copies smaller frames anyway


class Outbox:
    def __init__(self, dealer: zmq.Socket) -> None:
        self._dealer = dealer
        self._messages: List[object] = []
        self._payload_bytes = 0

    def add(self, message: object, payload_bytes: int = 0) -> None:
        # Frames stay under one chunk (plus headers), so none comes near the scheduler's maximum frame size.
        if self._messages and self._payload_bytes + payload_bytes > config.DEFAULT_OBJECT_CHUNK_BYTES:
            self.flush()
        self._messages.append(message)
        self._payload_bytes += payload_bytes

    def flush(self) -> None:
        if not self._messages:
            return
        messages = self._messages
        frame = encode(messages[0]) if len(messages) == 1 else encode_many(messages)
        self._messages = []
        self._payload_bytes = 0
        self._dealer.send(frame, copy=len(frame) < _ZERO_COPY_SEND_BYTES)

    def clear(self) -> None:
        self._messages = []
        self._payload_bytes = 0


class SuccessResults:
    """TaskResult{success, payload} of a task, encoded by template (scaler/fastpath/templates.py): one join per
    result instead of a message object and its encoding, for the message a worker sends once per task."""

    def __init__(self) -> None:
        self._templates: Dict[tuple, Optional[Template]] = {}

    def encode(self, task_id: bytes, payload: bytes) -> Encoded:
        key = (len(task_id), len(payload))
        template = self._templates.get(key, _NOT_MADE)
        if template is _NOT_MADE:
            if len(self._templates) >= _RESULT_SHAPES:
                self._templates = {}
            template = self._templates[key] = make_template(_success, key)
        if template is None:
            return Encoded(encode(TaskResult(task_id=task_id, status=_SUCCESS, payload=payload)))
        return Encoded(template.encode((task_id, payload)))


def _success(values: Sequence[bytes]) -> TaskResult:
    return TaskResult(task_id=values[0], status=_SUCCESS, payload=values[1])
