"""Internal: fetches of held results and kept objects from the peers that hold them (their data addresses): by
clients (on their IO thread) and by workers (their agent's loop), for their results and for the tasks they run.

The scheduler says where something is (ObjectResponse.holderAddress); the peer asks that holder directly (DataRequest
on a DEALER of its own per holder) and gets the bytes in chunks, each the payload part of a two-part DataResponse
message, so they never pass through the scheduler. A holder on this host is asked through its local socket instead
(scaler/io/local_data.py), and answers with the descriptor of the shared memory holding the data: the fetch ends with
a SharedBytes, mapped, not copied.

A fetch that hears nothing for FETCH_TIMEOUT_SECONDS (a holder this peer cannot reach: another network, a firewall,
NAT) is asked again through the data relay (scaler/relay/), which passes it on over the connection the holder opened
to it, and so are later fetches from that address, for UNREACHABLE_SECONDS. Without a relay (an older scheduler, or
CurveZMQ on), or when the relay cannot help either, the fetch is given up and the caller asks the scheduler to relay.
A DEALER unused for IDLE_SOCKET_SECONDS with no fetch under way is closed.

With CurveZMQ, each DEALER to a holder is a CURVE client of the holder's public key (ObjectResponse.holderPublicKey)
under this peer's own key pair; a holder whose key the scheduler did not say cannot be reached (`reachable` is False)
and the scheduler relays its bytes. Every DEALER reads frames of up to the scheduler's limit (`max_frame_bytes`), as
holders cut their chunks under it: a larger one closes the connection (ZeroMQ), and the fetch times out.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, List, Optional, Set, Tuple

import zmq

from scaler.config import DEFAULT_MAX_FRAME_BYTES
from scaler.io.curve import apply_data_client_keys, apply_peer_keys
from scaler.io.curve_keys import CurvePeerKeys
from scaler.io.local_data import LocalDataReader
from scaler.protocol import DataRequest, DataResponse, ProtocolError, decode_frame, encode

logger = logging.getLogger(__name__)

FETCH_TIMEOUT_SECONDS = 5.0
UNREACHABLE_SECONDS = 60.0
# A DEALER to a holder unused this long, with no fetch under way, is closed (looked for as fetches start): holders come
# and go (autoscaling), and each would keep a socket, a descriptor and ZeroMQ's reconnecting to a gone address.
IDLE_SOCKET_SECONDS = 30.0
_RECONNECT_IVL_MAX_MS = 5000  # a holder gone: ZeroMQ tries again less and less often, not every 100 ms


class _Fetch:
    __slots__ = ("address", "local", "relayed", "deadline", "chunks", "chunk_count", "total_size", "sock")

    def __init__(
        self, address: str, local: bool, deadline: float, relayed: bool = False, sock: Optional[zmq.Socket] = None
    ) -> None:
        self.address = address
        self.sock = sock  # where it was asked (None: the local socket): answers from elsewhere are not its
        self.local = local  # asked through the holder's local socket
        self.relayed = relayed  # asked through the data relay
        self.deadline = deadline  # pushed back by each chunk: a large result may take a while, as long as it flows
        self.chunks: Dict[int, Any] = {}  # views of ZeroMQ's messages
        self.chunk_count = 0
        self.total_size = 0


class DataFetcher:
    def __init__(self, context: zmq.Context, poller: zmq.Poller, curve: Optional[CurvePeerKeys] = None) -> None:
        self._context = context
        self._poller = poller
        self._curve = curve
        self.max_frame_bytes = DEFAULT_MAX_FRAME_BYTES  # the scheduler's, set by the owner from its HelloReply
        self._sockets: Dict[Tuple[str, bytes], zmq.Socket] = {}  # by data address and holder key
        self._watched: Set[zmq.Socket] = set()  # the same sockets
        self._used: Dict[Tuple[str, bytes], float] = {}  # when each was last asked something
        self._next_sweep = 0.0
        self._fetches: Dict[bytes, _Fetch] = {}  # by object id
        self._unreachable: Dict[str, float] = {}  # address -> until when it is not tried
        self._local = LocalDataReader(poller, same_user_only=curve is not None)
        # The data relay's address (HelloReply.relayPort), set by the owner: holders out of reach are asked through it
        self.relay: Optional[str] = None

    def reachable(self, address: str, now: float, holder_key: bytes = b"") -> bool:
        """Whether a fetch from `address` may be tried here: through the relay, if the holder is out of reach; with
        CurveZMQ, not without the holder's public key."""
        if self._curve is not None and not holder_key:
            return False
        return self.relay is not None or not self._out_of_reach(address, now)

    def fetch(self, address: str, object_id: bytes, now: float, holder_key: bytes = b"") -> None:
        """`holder_key`: with CurveZMQ, the holder's public key (ObjectResponse.holderPublicKey)."""
        if self._local.request(address, object_id):
            self._fetches[object_id] = _Fetch(address, True, now + FETCH_TIMEOUT_SECONDS)
            return
        if now >= self._next_sweep:
            self._close_idle(now)
        if self.relay is not None and self._out_of_reach(address, now):
            self._via_relay(address, object_id, now)
            return
        sock = self._ask(address, encode(DataRequest(object_ids=[object_id])), now, holder_key)
        self._fetches[object_id] = _Fetch(address, False, now + FETCH_TIMEOUT_SECONDS, sock=sock)

    def _via_relay(self, address: str, object_id: bytes, now: float) -> None:
        assert self.relay is not None  # callers check
        request = encode(DataRequest(object_ids=[object_id], holder_address=address))
        sock = self._ask(self.relay, request, now, relay=True)
        self._fetches[object_id] = _Fetch(address, False, now + FETCH_TIMEOUT_SECONDS, relayed=True, sock=sock)

    def _ask(
        self, address: str, request: bytes, now: float, holder_key: bytes = b"", relay: bool = False
    ) -> zmq.Socket:
        """Send `request` on the DEALER to `address`, or on a new one if that one's handshake was refused (a holder
        that did not accept this peer's key yet, a frame over our limit): ZeroMQ never connects such a socket again,
        and once it took its route down, takes nothing on it. (The fetch under way when it was refused, and any asked
        while it went down, hear nothing and time out.) A new socket keeps the request until it connects."""
        sock = self._socket(address, now, holder_key, relay)
        try:
            sock.send(request, zmq.NOBLOCK)
        except zmq.Again:
            self._close((address, holder_key))
            sock = self._socket(address, now, holder_key, relay)
            sock.send(request, zmq.NOBLOCK)
        return sock

    def holders(self) -> List[str]:
        """The addresses this fetcher has a socket to (holders, and the data relay)."""
        return [address for address, _ in self._sockets]

    def _close_idle(self, now: float) -> None:
        """Close the sockets unused for IDLE_SOCKET_SECONDS that no fetch under way waits on; forget what was learnt
        of addresses (out of reach, not on this host) that may be gone or taken by another holder since."""
        self._next_sweep = now + IDLE_SOCKET_SECONDS / 2
        unreachable = self._unreachable
        for address in [address for address, until in unreachable.items() if until <= now]:
            del unreachable[address]
        self._local.forget_remote()
        busy = {self.relay if fetch.relayed else fetch.address for fetch in self._fetches.values() if not fetch.local}
        for key, used in list(self._used.items()):
            if used + IDLE_SOCKET_SECONDS <= now and key[0] not in busy:
                self._close(key)

    def _close(self, key: Tuple[str, bytes]) -> None:
        sock = self._sockets.pop(key)
        self._used.pop(key, None)
        self._watched.discard(sock)
        self._poller.unregister(sock)
        sock.close(linger=0)

    def _out_of_reach(self, address: str, now: float) -> bool:
        until = self._unreachable.get(address)
        if until is None:
            return False
        if now < until:
            return True
        del self._unreachable[address]
        return False

    def _socket(self, address: str, now: float, holder_key: bytes = b"", relay: bool = False) -> zmq.Socket:
        """A DEALER to a holder (with CurveZMQ, a CURVE client of its key) or, `relay`, to the data relay (a CURVE
        client of the scheduler's key, which the relay serves under)."""
        self._used[address, holder_key] = now
        sock = self._sockets.get((address, holder_key))
        if sock is None:
            sock = self._context.socket(zmq.DEALER)
            sock.setsockopt(zmq.ROUTING_ID, os.urandom(8))
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, _RECONNECT_IVL_MAX_MS)
            sock.setsockopt(zmq.RCVHWM, 0)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, self.max_frame_bytes)
            if self._curve is not None and relay:
                apply_peer_keys(sock, self._curve)
            elif self._curve is not None and holder_key:
                apply_data_client_keys(sock, self._curve, holder_key)
            sock.connect(address)
            self._poller.register(sock, zmq.POLLIN)
            self._sockets[address, holder_key] = sock
            self._watched.add(sock)
        return sock

    def next_deadline(self) -> Optional[float]:
        return min((fetch.deadline for fetch in self._fetches.values()), default=None)

    def polled(self, events: Dict[Any, int]) -> bool:
        """Whether the poller saw one of this fetcher's sockets: then `ready` must read it even with no fetch under way
        (a late answer, a holder on this host gone), or the poller reports it again at once, on every turn."""
        watched = self._watched
        local = self._local
        if not watched and not local.connected():
            return False  # nothing of its own to be polled: the common case, a worker that never fetched
        return any(key in watched or local.watches(key) for key in events)

    def ready(self, events: Dict[Any, int], now: float) -> List[Tuple[bytes, Any, bool]]:
        """(object id, its bytes, whether it timed out) for each fetch that ended, given what the poller said: the
        bytes are a SharedBytes from a holder on this host, bytes-like from another, None if the holder did not
        have it, is gone, or said nothing for FETCH_TIMEOUT_SECONDS."""
        done: List[Tuple[bytes, Any, bool]] = []
        for sock in self._sockets.values():
            if sock in events:
                done.extend((object_id, payload, False) for object_id, payload in self._receive(sock, now))
        for fd in self._local.descriptors():
            if fd in events:
                answers, gone = self._local.receive(fd)
                for object_id, shared in answers:
                    if self._fetches.pop(object_id, None) is not None:
                        done.append((object_id, shared, False))
                if gone is not None:  # the holder closed the connection: what it was asked is not coming
                    lost = [key for key, fetch in self._fetches.items() if fetch.local and fetch.address == gone]
                    for object_id in lost:
                        del self._fetches[object_id]
                        done.append((object_id, None, False))
        done.extend((object_id, None, True) for object_id in self._expired(now))
        return done

    def _receive(self, sock: zmq.Socket, now: float) -> List[Tuple[bytes, Any]]:
        """(object id, its bytes, or None if the holder does not have it) for each fetch that ended."""
        done: List[Tuple[bytes, Any]] = []
        while True:
            try:
                parts = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return done
            try:
                (response,) = decode_frame(parts[0].bytes)
            except (ProtocolError, ValueError):
                continue  # not ours to understand: dropped, the fetch times out if it was its answer
            if type(response) is not DataResponse:
                continue
            fetch = self._fetches.get(response.object_id)
            if fetch is None or fetch.sock is not sock:
                continue  # given up already, or not from where it was asked
            if not response.found or len(parts) != 2 or not _chunk_fits(fetch, response):
                # not there; or an answer that breaks the protocol, from a holder that cannot be trusted with this
                # result: the fetch fails, as for a holder without it, rather than the fetcher
                del self._fetches[response.object_id]
                done.append((response.object_id, None))
                continue
            fetch.chunks[response.chunk_index] = parts[1].buffer  # a view of ZeroMQ's message: no copy
            fetch.chunk_count = response.chunk_count
            fetch.total_size = response.total_size
            fetch.deadline = now + FETCH_TIMEOUT_SECONDS
            if len(fetch.chunks) < fetch.chunk_count:
                continue
            del self._fetches[response.object_id]
            chunks = fetch.chunks
            if sum(len(chunk) for chunk in chunks.values()) != fetch.total_size:
                done.append((response.object_id, None))  # chunks short of (or past) the size the holder said
                continue
            # joined into a bytearray: writable, so that arrays read from it out of band need no copy of their own
            payload = chunks[0] if fetch.chunk_count == 1 else bytearray().join(chunks[i] for i in range(len(chunks)))
            done.append((response.object_id, payload))  # bytes-like: a memoryview when it came in one chunk

    def _expired(self, now: float) -> List[bytes]:
        """The fetches that heard nothing for FETCH_TIMEOUT_SECONDS, given up; their addresses are not tried for a
        while."""
        late = [object_id for object_id, fetch in self._fetches.items() if fetch.deadline <= now]
        given_up = []
        for object_id in late:
            fetch = self._fetches.pop(object_id)
            if fetch.address not in self._unreachable:
                self._unreachable[fetch.address] = now + UNREACHABLE_SECONDS
                if self.relay is not None and not fetch.relayed:
                    logger.warning(
                        "no answer from the data address %s for %.0f s: fetching what it holds through the relay at"
                        " %s for the next %.0f s",
                        fetch.address,
                        FETCH_TIMEOUT_SECONDS,
                        self.relay,
                        UNREACHABLE_SECONDS,
                    )
            if self.relay is not None and not fetch.relayed:
                self._via_relay(fetch.address, object_id, now)
            else:
                given_up.append(object_id)
        return given_up

    def forget(self) -> List[bytes]:
        """Every fetch under way, given up (the scheduler was lost: what it said about holders may be stale)."""
        pending = list(self._fetches)
        self._fetches.clear()
        return pending

    def close(self) -> None:
        self._local.close()
        for sock in self._sockets.values():
            self._poller.unregister(sock)
            sock.close(linger=0)
        self._sockets.clear()
        self._watched.clear()
        self._used.clear()


def _chunk_fits(fetch: _Fetch, response: DataResponse) -> bool:
    """Whether a chunk is one of the result the earlier chunks describe: its index within the count, the same count
    and total size as theirs."""
    count = response.chunk_count
    if not 0 <= response.chunk_index < count:
        return False
    return not fetch.chunks or (count == fetch.chunk_count and response.total_size == fetch.total_size)
