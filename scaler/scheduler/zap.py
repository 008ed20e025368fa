"""Internal: the scheduler's ZAP handler: answers libzmq's CurveZMQ authentication requests inside the scheduler's event
loop."""

from __future__ import annotations

import asyncio
import time
from typing import FrozenSet

import zmq

from scaler.io.curve import ZapResponder
from scaler.rate_limit import LimitedLog


class ZapHandler(ZapResponder):
    """The ZAP socket, read by the scheduler's event loop. Requests come only when a peer connects, so handling them in
    the event loop costs the routing of tasks nothing."""

    def __init__(self, context: zmq.Context, authorized_keys: FrozenSet[bytes], warnings: LimitedLog) -> None:
        """`warnings`: the scheduler's peer warnings, which rate limit the refusals logged."""
        super().__init__(context, authorized_keys, warnings)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_reader(self.socket.getsockopt(zmq.FD), self.answer_pending)
        self.answer_pending()

    def close(self, loop: asyncio.AbstractEventLoop) -> None:  # type: ignore[override]  # also leaves the loop
        loop.remove_reader(self.socket.getsockopt(zmq.FD))
        super().close()

    def answer_pending(self, now: float = 0.0) -> None:
        super().answer_pending(time.monotonic())
