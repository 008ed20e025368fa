"""Internal: a data-serving peer's connection to the data relay (scaler/relay/): a DEALER it opens to the scheduler's
host, so that peers that cannot reach its data address get what it holds through the relay. It says RelayHello with
its data address when it opens (and again on each registration with a scheduler, whose relay may be new), then
answers the DataRequests that come this way as its data address would, each chunk carrying the requester's replyTo.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Optional

import zmq

from scaler.config import object_chunk_bytes
from scaler.io.addresses import tcp_host_port
from scaler.io.curve import apply_peer_keys
from scaler.io.curve_keys import CurvePeerKeys
from scaler.io.data_requests import IDS_PER_TURN, data_requests
from scaler.io.data_server import send_held
from scaler.protocol import ProtocolError, RelayHello, decode_frame, encode

logger = logging.getLogger(__name__)

_REQUESTS_PER_TURN = 256


def relay_address(scheduler_address: str, port: int) -> Optional[str]:
    """The relay's address: the scheduler's host, as this peer reaches it, and the relay's port."""
    parts = tcp_host_port(scheduler_address)
    return f"tcp://{parts[0]}:{port}" if parts is not None else None  # none beside an ipc:// scheduler


class RelayLink:
    def __init__(
        self,
        context: zmq.Context,
        address: str,
        data_address: str,
        max_frame_bytes: int,
        curve: Optional[CurvePeerKeys] = None,
    ) -> None:
        """`curve`: this peer's keys, with CurveZMQ: the relay serves under the scheduler's key pair."""
        self.address = address
        self._data_address = data_address
        self.sock = context.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.ROUTING_ID, os.urandom(8))
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
        if curve is not None:
            apply_peer_keys(self.sock, curve)
        self.sock.connect(address)
        self.served_bytes = 0
        self.malformed = 0
        self.chunk_bytes = object_chunk_bytes(max_frame_bytes)  # the relay and the requester cap frames at its limit
        self.hello()

    def hello(self) -> None:
        self.sock.send(encode(RelayHello(data_address=self._data_address)), zmq.NOBLOCK)

    def serve(self, held_payload: Callable[[bytes], Any]) -> None:
        """Answer the requests the relay passed on (a bounded number per call)."""
        sock = self.sock
        budget = IDS_PER_TURN
        for _ in range(_REQUESTS_PER_TURN):
            if budget <= 0:
                return
            try:
                frame = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                requests, asked = data_requests(decode_frame(frame))
            except ProtocolError as error:
                self.malformed += 1
                if self.malformed == 1:
                    logger.warning("relay link: dropped a malformed message: %s", error)
                continue
            budget -= asked
            for request in requests:
                if request.reply_to:
                    for object_id in request.object_ids:
                        payload = held_payload(object_id)
                        try:
                            self.served_bytes += send_held(
                                sock, [], object_id, payload, request.reply_to, self.chunk_bytes, zmq.NOBLOCK
                            )
                        except zmq.Again:  # the relay refused this link's key: the next registration makes a new one
                            return

    def close(self) -> None:
        self.sock.close(linger=0)


def follow_relay(
    link: Optional[RelayLink],
    address: Optional[str],
    context: zmq.Context,
    poller: zmq.Poller,
    data_address: Optional[str],
    max_frame_bytes: int,
    curve: Optional[CurvePeerKeys],
) -> Optional[RelayLink]:
    """A data-serving peer registered (again) with a scheduler whose relay is at `address` (None: no relay): the link
    to keep, made, replaced or closed as needed (polled in `poller`); one kept says RelayHello again, since a
    restarted scheduler's relay is new and knows nobody. No link without a data address to serve."""
    if link is not None and link.address != address:
        poller.unregister(link.sock)
        link.close()
        link = None
    if address is None or not data_address:
        return link
    if link is not None:
        try:
            link.hello()
            return link
        except zmq.Again:  # its handshake was refused: ZeroMQ never connects it again, and takes nothing on it now
            poller.unregister(link.sock)
            link.close()
    link = RelayLink(context, address, data_address, max_frame_bytes, curve)
    poller.register(link.sock, zmq.POLLIN)
    return link
