"""The scheduler's ZAP handler: answers libzmq's CurveZMQ authentication requests inside the scheduler's event loop."""

from __future__ import annotations

import asyncio
import logging
from typing import Dict, FrozenSet

import zmq
from zmq.utils.monitor import recv_monitor_message

from scaler.io.curve import ZAP_ENDPOINT, answer_zap_request

logger = logging.getLogger(__name__)

_HANDSHAKE_FAILURES = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "the handshake failed",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "the peer does not speak CurveZMQ with this scheduler's key",
}  # a refused key (EVENT_HANDSHAKE_FAILED_AUTH) is logged by the ZAP handler, with the key


class ZapHandler:
    """A REP socket at ZeroMQ's fixed ZAP endpoint. Requests come only when a peer connects, so handling them in the
    event loop costs the routing of tasks nothing."""

    def __init__(self, context: zmq.Context, authorized_keys: FrozenSet[bytes]) -> None:
        self._authorized_keys = authorized_keys
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
            socket.send_multipart(answer_zap_request(frames, self._authorized_keys, self._refusals))


class HandshakeWatch:
    """Logs CurveZMQ handshakes that fail on a socket before the ZAP handler hears of them (the peer does not even
    speak CURVE, or not with this scheduler's key): the first of each kind, then every hundredth, so a peer retrying
    forever cannot flood the log."""

    def __init__(self, socket: zmq.Socket, what: str) -> None:
        self._what = what
        self._events = socket.get_monitor_socket(sum(_HANDSHAKE_FAILURES))
        self.failures: Dict[int, int] = {}

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_reader(self._events.getsockopt(zmq.FD), self.read_events)
        self.read_events()

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.remove_reader(self._events.getsockopt(zmq.FD))
        self._events.close(linger=0)

    def read_events(self) -> None:
        events = self._events
        while events.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            event = recv_monitor_message(events, zmq.NOBLOCK)["event"]
            count = self.failures.get(event, 0) + 1
            self.failures[event] = count
            if count == 1 or count % 100 == 0:
                logger.warning(
                    "refused a connection to the %s: %s (%d refusal(s) of this kind so far)",
                    self._what,
                    _HANDSHAKE_FAILURES.get(event, f"handshake event {event}"),
                    count,
                )
