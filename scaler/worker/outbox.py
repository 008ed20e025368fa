"""What a worker sends the scheduler, batched: every message of one loop turn leaves in one ZeroMQ frame."""

from __future__ import annotations

from typing import List

import zmq

from scaler import config
from scaler.protocol import encode, encode_many

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
