"""Internal: the scheduler's ZAP handler: answers libzmq's CurveZMQ authentication requests inside the scheduler's event
loop."""

from __future__ import annotations

import asyncio
import time
from typing import Dict, FrozenSet

import zmq

from scaler.io.curve import ZAP_ENDPOINT, answer_zap_request
from scaler.rate_limit import LimitedLog


class ZapHandler:
    """A REP socket at ZeroMQ's fixed ZAP endpoint. Requests come only when a peer connects, so handling them in the
    event loop costs the routing of tasks nothing."""

    def __init__(self, context: zmq.Context, authorized_keys: FrozenSet[bytes], warnings: LimitedLog) -> None:
        """`warnings`: the scheduler's peer warnings, which rate limit the refusals logged."""
        self._authorized_keys = authorized_keys
        self._warnings = warnings
        self._refusals: Dict[bytes, int] = {}
        self._socket = context.socket(zmq.REP)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind(ZAP_ENDPOINT)

    @property
    def refusals(self) -> int:
        return sum(self._refusals.values())

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_reader(self._socket.getsockopt(zmq.FD), self.answer_pending)
        self.answer_pending()

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.remove_reader(self._socket.getsockopt(zmq.FD))
        self._socket.close()

    def answer_pending(self) -> None:
        # ZeroMQ's descriptor is edge triggered: drain until nothing is left, then look at the events once more
        socket = self._socket
        while socket.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            frames = socket.recv_multipart(zmq.NOBLOCK)
            reply = answer_zap_request(frames, self._authorized_keys, self._refusals, self._warnings, time.monotonic())
            socket.send_multipart(reply)
