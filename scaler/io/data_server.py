"""Internal: a data address, where a worker serves the results it holds, and a client the large objects it keeps, to
the peers that ask.

A ROUTER bound on the interface the peer reaches its scheduler from. A peer connects a DEALER and sends
DataRequest{objectIds}; each held result goes back in chunks, each a two-part message: the DataResponse, then the
chunk's bytes, sent from the held bytes without a copy (a view). What is not held (freed meanwhile) is answered
found = false. Requests are small: a frame over _MAX_REQUEST_BYTES is dropped by ZeroMQ with its connection, and a
frame that does not decode is dropped and counted, so no peer can stall the server's loop through it. Chunks are cut
under the scheduler's frame limit (`chunk_bytes`), which requesters cap their sockets at.

With CurveZMQ, the ROUTER is a CURVE server under the peer's own key pair, and the ZapResponder of its context (made
first by the owner) decides who may connect: the keys the scheduler accepts, as its DataKeys said
(scaler/io/curve.py; docs/deployment/security.md). ZAP is asked at the handshake only, so each request's key is
checked against that set again: a key the scheduler no longer accepts (it restarted with fewer) gets nothing more on a
connection it opened before.
"""

from __future__ import annotations

import logging
import socket
from typing import Any, Callable, List, Optional, Set

import zmq

from scaler.config import DEFAULT_OBJECT_CHUNK_BYTES
from scaler.io.addresses import bare_host, tcp_host_port
from scaler.io.curve import ZapResponder, apply_data_server_keys, sender_key
from scaler.io.curve_keys import CurvePeerKeys
from scaler.io.data_requests import IDS_PER_TURN, data_requests
from scaler.io.shared_bytes import SharedBytes
from scaler.protocol import DataResponse, ProtocolError, decode_frame, encode

logger = logging.getLogger(__name__)

_MAX_REQUEST_BYTES = 1024 * 1024  # a DataRequest of 60,000 ids
_REQUESTS_PER_TURN = 256  # then the server's loop runs once before reading on, so heartbeats keep flowing


def data_host(scheduler_address: str) -> Optional[str]:
    """The IP address this host reaches the scheduler from, to serve data on; None for an ipc:// scheduler (no data
    address: results go through the scheduler) or a host name that does not resolve."""
    parts = tcp_host_port(scheduler_address)
    if parts is None:
        return None
    host, port = bare_host(parts[0]), parts[1]
    try:
        family, _, _, _, target = socket.getaddrinfo(host, int(port), type=socket.SOCK_DGRAM)[0]
    except (OSError, ValueError):
        return None
    if family != socket.AF_INET:
        return None  # IPv6 data addresses: not yet
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(target)  # UDP: no packet is sent, the kernel only picks the route and its source address
        except OSError:
            return None
        return probe.getsockname()[0]


class DataServer:
    def __init__(
        self, context: zmq.Context, host: str, curve: Optional[CurvePeerKeys] = None, zap: Optional[ZapResponder] = None
    ) -> None:
        """`curve`: this peer's keys, with CurveZMQ, and `zap` the ZapResponder bound on `context` before, whose
        authorized keys requests are served to."""
        if (curve is None) != (zap is None):
            raise ValueError("a data address with CurveZMQ needs both this peer's keys and its ZAP handler")
        self._zap = zap
        self._revoked: Set[str] = set()  # keys refused since they were let in: each logged once
        self.sock = context.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # a requester that left: what it asked for is dropped
        self.sock.setsockopt(zmq.MAXMSGSIZE, _MAX_REQUEST_BYTES)
        if curve is not None:
            apply_data_server_keys(self.sock, curve)
        port = self.sock.bind_to_random_port(f"tcp://{host}")
        self.address = f"tcp://{host}:{port}"
        self.malformed = 0
        self.served_bytes = 0
        self.chunk_bytes = DEFAULT_OBJECT_CHUNK_BYTES  # the owner lowers it to its scheduler's (object_chunk_bytes)

    def serve(self, held_payload: Callable[[bytes], Any]) -> None:
        """Answer the requests waiting on the socket (a bounded number per call)."""
        sock = self.sock
        budget = IDS_PER_TURN
        for _ in range(_REQUESTS_PER_TURN):
            if budget <= 0:
                return
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            if self._zap is not None and len(frames) > 1 and not self._still_authorized(self._zap, frames[1]):
                continue
            parts = [frame.bytes for frame in frames]
            try:
                if len(parts) != 2:
                    raise ProtocolError(f"{len(parts) - 1} frames where one was expected")
                requests, asked = data_requests(decode_frame(parts[1]))
            except ProtocolError as error:
                self.malformed += 1
                if self.malformed == 1:
                    logger.warning("data address: dropped a malformed request (further ones counted): %s", error)
                continue
            peer = parts[0]
            budget -= asked
            for request in requests:
                for object_id in request.object_ids:
                    self._send(peer, object_id, held_payload(object_id))

    def _still_authorized(self, zap: ZapResponder, frame: zmq.Frame) -> bool:
        key = sender_key(frame)
        if key.encode() in zap.authorized_keys:
            return True
        if key not in self._revoked:
            self._revoked.add(key)
            logger.warning(
                "data address: refused the requests of public key %s, no longer among the authorized keys", key
            )
        return False

    def _send(self, peer: bytes, object_id: bytes, payload: Any) -> None:
        self.served_bytes += send_held(self.sock, [peer], object_id, payload, b"", self.chunk_bytes)

    def close(self) -> None:
        self.sock.close(linger=0)


def send_held(
    sock: zmq.Socket,
    route: List[Any],
    object_id: bytes,
    payload: Any,
    reply_to: bytes,
    chunk_bytes: int = DEFAULT_OBJECT_CHUNK_BYTES,
    flags: int = 0,
) -> int:
    """Send what is held under `object_id` (bytes, SharedBytes, or None: not held) as DataResponse chunks of up to
    `chunk_bytes`, each a message of `route` (a ROUTER's peer; nothing on a DEALER), the header and the chunk's bytes, a
    view of where they are; `reply_to` echoed (a relay's requester). `flags` of each send (zmq.NOBLOCK: zmq.Again when
    the socket takes nothing). Returns the bytes sent."""
    if payload is None:
        sock.send_multipart([*route, encode(DataResponse(object_id=object_id, found=False, reply_to=reply_to))], flags)
        return 0
    total = len(payload)
    chunk = chunk_bytes
    count = max(1, -(-total // chunk))
    # held in shared memory, or bytes: sent from where it is
    view = payload.sent_view() if type(payload) is SharedBytes else memoryview(payload)
    for index in range(count):
        header = DataResponse(
            object_id=object_id,
            found=True,
            chunk_index=index,
            chunk_count=count,
            total_size=total,
            reply_to=reply_to,
        )
        sock.send_multipart([*route, encode(header), view[index * chunk : (index + 1) * chunk]], flags, copy=False)
    return total
