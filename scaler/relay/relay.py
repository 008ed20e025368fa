"""Internal: the data relay's loop.

One ROUTER, bound on the scheduler's host (its port announced in HelloReply.relayPort). Every peer that serves data
(a worker's held results, a client's kept objects) connects a DEALER to it and says RelayHello{dataAddress}: requests
for that address may come that way, over a connection the peer opened, whatever firewall or NAT is in front of it. A
peer that cannot reach a holder directly (its fetch heard nothing for a while, scaler/io/data_fetch.py) sends the
relay DataRequest{objectIds, holderAddress}; the relay passes it on to that holder with replyTo set to the asker,
and passes each DataResponse chunk that comes back to replyTo, frames as they are: nothing is kept, nothing copied.
A holder the relay does not know is answered found = false at once (the asker then asks the scheduler).

Counters (requests passed on, bytes passed back) go to a shared memory file the scheduler reads for its status.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from typing import Container, Dict, List, Optional, Tuple

import zmq

from scaler.io.curve import ZapResponder, apply_server_keys, sender_key
from scaler.io.curve_keys import CurveServerKeys
from scaler.protocol import DataRequest, DataResponse, ProtocolError, RelayHello, decode_frame, encode

logger = logging.getLogger(__name__)

# The shared counters: the port once bound, requests passed on, bytes passed back (little-endian u64 each).
COUNTERS = struct.Struct("<QQQ")
_MAX_REQUEST_BYTES = 1024 * 1024
_SEND_HWM = 256  # chunks queued per peer before the relay drops more (the asker's fetch then times out)
_CHECK_PARENT_SECONDS = 1.0
_MAX_ASKED = 65536  # requests passed on and not answered in full yet


class Relay:
    def __init__(
        self,
        context: zmq.Context,
        host: str,
        max_frame_bytes: int,
        counters: Optional[mmap.mmap],
        curve: Optional[CurveServerKeys] = None,
        avoid_ports: Tuple[int, ...] = (),
    ) -> None:
        """`curve`: the scheduler's keys, with CurveZMQ: the relay serves under its key pair and lets in the keys it
        accepts (a ZapResponder on `context`, bound before the socket, or libzmq would let any key in).
        `avoid_ports`: the scheduler's own, which it binds only after the relay started."""
        self.zap = ZapResponder(context, curve.authorized_keys) if curve is not None else None
        self.sock = context.socket(zmq.ROUTER)
        if curve is not None:
            apply_server_keys(self.sock, curve)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, _SEND_HWM)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # a peer that left: what was for it is dropped
        self.sock.setsockopt(zmq.MAXMSGSIZE, max(max_frame_bytes, _MAX_REQUEST_BYTES))
        self.port = bind_avoiding(self.sock, f"tcp://{host}", avoid_ports)
        # with CurveZMQ, its ZAP requests are answered in the same wait as the requests (made once, not per turn)
        self._poller: Optional[zmq.Poller] = None
        if self.zap is not None:
            self._poller = zmq.Poller()
            self._poller.register(self.sock, zmq.POLLIN)
            self._poller.register(self.zap.socket, zmq.POLLIN)
        # data address -> the routing id of its connection here, and with CurveZMQ the key it connected with
        self._holders: Dict[str, Tuple[bytes, str]] = {}
        # (requester, object id) -> the holder it was asked of: only that one's answers go back to it
        self._asked: Dict[Tuple[bytes, bytes], bytes] = {}
        self._counters = counters
        self.requests = 0
        self.relayed_bytes = 0
        self.malformed = 0
        self._publish()

    def serve_once(self, timeout_ms: int) -> None:
        zap, poller = self.zap, self._poller
        if zap is not None and poller is not None:
            ready = dict(poller.poll(timeout_ms))
            if zap.socket in ready:
                zap.answer_pending()
            if self.sock not in ready:
                return
        elif not self.sock.poll(timeout_ms, zmq.POLLIN):
            return
        for _ in range(1024):  # then back to the caller, which checks that its parent lives
            try:
                parts = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            self._handle(parts)
        self._publish()

    def _handle(self, parts: list) -> None:
        sender = parts[0].bytes
        try:
            if len(parts) < 2:
                raise ProtocolError("an empty message")
            (message,) = decode_frame(parts[1].bytes)
        except (ProtocolError, ValueError) as error:
            self._refuse(f"a malformed message: {error}")
            return
        kind = type(message)
        if kind is DataResponse:
            asked = (message.reply_to, message.object_id)
            if self._asked.get(asked) != sender:
                self._refuse("an answer from a peer that was not asked for it")
                return
            if not message.found or message.chunk_index + 1 >= message.chunk_count:
                del self._asked[asked]
            self.relayed_bytes += sum(len(part) for part in parts[2:])
            self.sock.send_multipart([message.reply_to, *parts[1:]], copy=False)
        elif kind is DataRequest:
            holder = self._holders.get(message.holder_address)
            if holder is None:
                for object_id in message.object_ids:
                    self.sock.send_multipart([sender, encode(DataResponse(object_id=object_id, found=False))])
                return
            self.requests += 1
            for object_id in message.object_ids:
                self._ask(sender, object_id, holder[0])
            forwarded = DataRequest(object_ids=message.object_ids, reply_to=sender)
            self.sock.send_multipart([holder[0], encode(forwarded)])
        elif kind is RelayHello:
            key = sender_key(parts[1])
            known = self._holders.get(message.data_address)
            if known is not None and known[1] != key:
                # with CurveZMQ, an address is served by the key that said so first: another peer the scheduler lets
                # in cannot take its requests over and answer them
                self._refuse(f"{message.data_address} claimed under another key than the one serving it")
                return
            if known is None or known[0] != sender:
                logger.info("relay: %s serves through here", message.data_address)
            self._holders[message.data_address] = (sender, key)

    def _ask(self, requester: bytes, object_id: bytes, holder: bytes) -> None:
        asked = self._asked
        if len(asked) >= _MAX_ASKED:  # requesters that left mid-answer: their oldest entries go
            del asked[next(iter(asked))]
        asked[requester, object_id] = holder

    def _refuse(self, what: str) -> None:
        self.malformed += 1
        if self.malformed == 1:
            logger.warning("relay: dropped %s (further ones counted)", what)

    def _publish(self) -> None:
        if self._counters is not None:
            COUNTERS.pack_into(self._counters, 0, self.port, self.requests, self.relayed_bytes)

    def close(self) -> None:
        self.sock.close(linger=0)
        if self.zap is not None:
            self.zap.close()


def bind_avoiding(sock: zmq.Socket, endpoint: str, avoid_ports: Container[int]) -> int:
    """Bind `sock` to a port the kernel picks, never one of `avoid_ports`: a port the scheduler was told to use may be
    free now (a caller that picked it by binding port 0 released it) and the kernel may hand it out again. The ports to
    avoid are held while binding again, so the kernel cannot pick them twice."""
    held: List[str] = []
    port = sock.bind_to_random_port(endpoint)
    while port in avoid_ports:
        held.append(sock.getsockopt_string(zmq.LAST_ENDPOINT))
        port = sock.bind_to_random_port(endpoint)
    for taken in held:
        sock.unbind(taken)
    return port


def run_relay(
    host: str,
    max_frame_bytes: int,
    counters: Optional[mmap.mmap],
    parent_pid: Optional[int],
    curve: Optional[CurveServerKeys] = None,
    avoid_ports: Tuple[int, ...] = (),
) -> None:
    """Serve until the parent (the scheduler) is gone or a SIGTERM comes (raising KeyboardInterrupt)."""
    context = zmq.Context(io_threads=1)
    relay = Relay(context, host, max_frame_bytes, counters, curve, avoid_ports)
    logger.info("relay: listening on tcp://%s:%d", host, relay.port)
    try:
        while parent_pid is None or os.getppid() == parent_pid:
            relay.serve_once(int(_CHECK_PARENT_SECONDS * 1000))
    except KeyboardInterrupt:
        pass
    finally:
        relay.close()
        context.term()
