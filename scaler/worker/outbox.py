"""Internal: what a worker sends the scheduler, batched: every message of one loop turn leaves in one ZeroMQ frame. The
agent's (a shell's); the encoding of the message it sends most, a short task's TaskResult, is success_results.py's."""

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
        # Frames hold at most one object chunk's worth of payload (plus headers), so that none is over the scheduler's
        # frame limit: the agent sets it from what the scheduler announced (WorkerCore.max_frame_bytes).
        self.frame_limit = config.DEFAULT_MAX_FRAME_BYTES
        self.payload_budget = config.object_chunk_bytes(self.frame_limit)
        self.largest = 0  # the largest frame sent, for WorkerCore.connection_dropped

    def add(self, message: object, payload_bytes: int = 0) -> None:
        if self._messages and self._payload_bytes + payload_bytes > self.payload_budget:
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
        try:
            self._dealer.send(frame, zmq.NOBLOCK, copy=len(frame) < _ZERO_COPY_SEND_BYTES)
        except zmq.Again:
            # The connection failed its handshake (a refused key): ZeroMQ will never connect it again, and a blocking
            # send would wait forever. Its DISCONNECTED event is already queued, and makes the agent connect anew.
            return
        if len(frame) > self.largest:
            self.largest = len(frame)

    def clear(self) -> None:
        self._messages = []
        self._payload_bytes = 0
