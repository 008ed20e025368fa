"""Internal: held results read by a peer on the same host without a copy, from the holder's shared memory.

A worker with a data address (scaler/io/data_server.py) also listens on a Unix socket of the abstract namespace
named after it (`local_name`). Abstract names belong to a network namespace: a peer on another host, or in another
network namespace, finds nothing there (its connect fails at once) and fetches through the data address. A peer that
connects sends the same DataRequest; each result comes back as one DataResponse (chunkCount 1) carrying the descriptor
of the shared memory file that holds it (SCM_RIGHTS), which the peer maps: no byte of the result crosses a socket,
and killing the holder's task processes, or the holder freeing the result, leaves the peer's mapping intact.

Abstract names have no file permissions: any process of the host (of its network namespace) may connect, or bind a
name first. With CurveZMQ (`same_user_only`), both ends therefore check the other's user (SO_PEERCRED): the holder
closes a reader running as another user, and a reader drops a holder running as another user, and both then go
through the data address, where CurveZMQ authenticates them. A host's own user is trusted as its processes are.

SOCK_SEQPACKET keeps each request and answer one message. Neither end ever blocks: the holder queues answers a full
socket does not take and sends them when it polls writable; a request over _MAX_REQUEST_BYTES or one that does not
decode closes that peer's connection.
"""

from __future__ import annotations

import array
import logging
import os
import socket
import struct
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import zmq

from scaler.io.data_requests import IDS_PER_TURN, MAX_IDS_PER_FRAME, data_requests
from scaler.io.shared_bytes import SharedBytes
from scaler.protocol import DataRequest, DataResponse, ProtocolError, decode_frame, encode

logger = logging.getLogger(__name__)

_MAX_REQUEST_BYTES = 1024 * 1024
_MAX_RESPONSE_BYTES = 4096  # a DataResponse without its payload
_ANCILLARY_BYTES = socket.CMSG_SPACE(array.array("i").itemsize)
_REQUESTS_PER_TURN = 256  # then the holder's loop runs once before reading on
# answers a reader takes per turn at most, then its loop runs once (the poll says readable again): each is a
# descriptor until the reader's cache keeps it or copies it (scaler/worker/objects.py)
_ANSWERS_PER_TURN = 64
# a reader this far behind in reading its answers is not reading them: it is closed rather than answered on
_MAX_QUEUED_ANSWERS = 4 * MAX_IDS_PER_FRAME


def local_name(data_address: str) -> bytes:
    """The abstract Unix socket name of the worker serving `data_address`."""
    return b"\0scaler-data:" + data_address.encode()


def _seqpacket() -> socket.socket:
    return socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)


class _Peer:
    __slots__ = ("sock", "fd", "answers")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()  # kept: a closed socket's fileno() is -1
        # what the socket did not take yet: a header, and what is held (None: not found; else bytes or SharedBytes)
        self.answers: Deque[Tuple[bytes, Any]] = deque()


def same_user(sock: socket.socket) -> bool:
    """Whether the process at the other end of a connected Unix socket runs as this process's user."""
    try:
        credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return False
    return struct.unpack("3i", credentials)[1] == os.getuid()


class LocalDataServer:
    """The holder's end, polled by the worker agent's loop (its descriptors are in `poller`)."""

    def __init__(self, data_address: str, poller: zmq.Poller, same_user_only: bool = False) -> None:
        """`same_user_only`: with CurveZMQ, serve only readers running as this process's user."""
        self._poller = poller
        self._same_user_only = same_user_only
        self.refused = 0
        self._listener = _seqpacket()
        try:
            self._listener.bind(local_name(data_address))
            self._listener.listen(128)
        except OSError:
            self._listener.close()
            raise
        poller.register(self._listener.fileno(), zmq.POLLIN)
        self._peers: Dict[int, _Peer] = {}
        self.malformed = 0
        self.served = 0

    def on_events(self, events: Dict[Any, int], held_payload: Callable[[bytes], Any]) -> None:
        if self._listener.fileno() in events:
            self._accept()
        for fd, peer in list(self._peers.items()):
            flags = events.get(fd, 0)
            if flags & zmq.POLLIN:
                self._read(peer, held_payload)
                if fd not in self._peers:
                    continue  # it left, or was closed: what was queued for it goes with it
            if flags & zmq.POLLOUT or (flags & zmq.POLLIN and peer.answers):
                self._write(peer)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # out of descriptors: the peer's connect sees it closed and fetches by TCP
                logger.warning("data address: cannot accept a local reader: %s", error)
                return
            if self._same_user_only and not same_user(sock):
                self.refused += 1
                if self.refused == 1:
                    logger.warning("data address: refused a local reader of another user (further ones counted)")
                sock.close()
                continue
            sock.setblocking(False)
            self._peers[sock.fileno()] = _Peer(sock)
            self._poller.register(sock.fileno(), zmq.POLLIN)

    def _read(self, peer: _Peer, held_payload: Callable[[bytes], Any]) -> None:
        budget = IDS_PER_TURN
        for _ in range(_REQUESTS_PER_TURN):
            if budget <= 0:
                return
            try:
                data = peer.sock.recv(_MAX_REQUEST_BYTES + 1, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:  # the reader left
                self._close(peer)
                return
            try:
                if len(data) > _MAX_REQUEST_BYTES:
                    raise ProtocolError(f"a request of {len(data)} bytes or more")
                requests, asked = data_requests(decode_frame(data))
                if len(peer.answers) > _MAX_QUEUED_ANSWERS:
                    raise ProtocolError(f"{len(peer.answers)} answers not read yet, and still asking")
            except ProtocolError as error:
                self.malformed += 1
                if self.malformed == 1:
                    logger.warning("data address: closed a local reader that sent a malformed request: %s", error)
                self._close(peer)
                return
            budget -= asked
            for request in requests:
                for object_id in request.object_ids:
                    peer.answers.append(_answer(object_id, held_payload(object_id)))

    def _write(self, peer: _Peer) -> None:
        answers = peer.answers
        while answers:
            header, payload = answers[0]
            if payload is not None and type(payload) is not SharedBytes:
                # held as bytes (scaler/worker/objects.py): copied into a shared memory file of its own as it is sent,
                # not as it is asked for, so that a long queue keeps no descriptors
                payload = SharedBytes.create(payload)
                answers[0] = (header, payload)
            try:
                if payload is None:
                    peer.sock.send(header, socket.MSG_DONTWAIT)
                else:
                    _send_read_only(peer.sock, header, payload.fd)
                    self.served += payload.size
            except (BlockingIOError, InterruptedError):
                self._poller.register(peer.sock.fileno(), zmq.POLLIN | zmq.POLLOUT)
                return
            except OSError:  # the reader left
                self._close(peer)
                return
            answers.popleft()
        self._poller.register(peer.sock.fileno(), zmq.POLLIN)

    def _close(self, peer: _Peer) -> None:
        if self._peers.pop(peer.fd, None) is None:
            return  # closed already
        self._poller.unregister(peer.fd)
        peer.answers.clear()  # the descriptors of what it asked for are not held for it any more
        peer.sock.close()

    def close(self) -> None:
        for peer in list(self._peers.values()):
            self._close(peer)
        self._poller.unregister(self._listener.fileno())
        self._listener.close()


def _answer(object_id: bytes, payload: Any) -> Tuple[bytes, Any]:
    if payload is None:
        return encode(DataResponse(object_id=object_id, found=False)), None
    if type(payload) is SharedBytes:
        payload.lent = True  # a reader outside the worker will map it: never written again
    return encode(DataResponse(object_id=object_id, found=True, total_size=len(payload))), payload


class LocalDataReader:
    """The reader's end: one connection per holder on this host, made on the first fetch from it."""

    def __init__(self, poller: zmq.Poller, same_user_only: bool = False) -> None:
        """`same_user_only`: with CurveZMQ, read only from holders running as this process's user."""
        self._poller = poller
        self._same_user_only = same_user_only
        self._by_address: Dict[str, Optional[socket.socket]] = {}  # None: not on this host
        self._addresses: Dict[int, str] = {}  # by descriptor

    def request(self, address: str, object_id: bytes) -> bool:
        """Asks the holder at `address` for `object_id`, if it is on this host; False: fetch it through the network."""
        if address in self._by_address:
            sock = self._by_address[address]
        else:
            sock = self._by_address[address] = self._connect(address)
        if sock is None:
            return False
        try:
            sock.send(encode(DataRequest(object_ids=[object_id])), socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False  # its queue is full: this one goes through the network
        except OSError:
            self._drop(sock)
            return False
        return True

    def _connect(self, address: str) -> Optional[socket.socket]:
        sock = _seqpacket()
        try:
            sock.connect(local_name(address))
        except OSError:  # not on this host (or not serving locally): through the network from now on
            sock.close()
            return None
        if self._same_user_only and not same_user(sock):  # not a holder we trust: through the network
            sock.close()
            return None
        self._addresses[sock.fileno()] = address
        self._poller.register(sock.fileno(), zmq.POLLIN)
        return sock

    def descriptors(self) -> List[int]:
        return list(self._addresses)

    def forget_remote(self) -> None:
        """Forget which addresses were found not on this host (or dropped): the next fetch from one tries again."""
        by_address = self._by_address
        for address in [address for address, sock in by_address.items() if sock is None]:
            del by_address[address]

    def connected(self) -> bool:
        return bool(self._addresses)

    def watches(self, key: Any) -> bool:
        """Whether `key`, from the poller, is the descriptor of one of these connections."""
        return key in self._addresses

    def receive(self, fd: int) -> Tuple[List[Tuple[bytes, Optional[SharedBytes]]], Optional[str]]:
        """(object id, its shared bytes or None if the holder does not have it) for each answer waiting on `fd`, and
        the address of the holder if the connection closed (it is gone: what was asked of it is not coming)."""
        address = self._addresses[fd]
        sock = self._by_address[address]
        assert sock is not None
        done: List[Tuple[bytes, Optional[SharedBytes]]] = []
        while len(done) < _ANSWERS_PER_TURN:
            try:
                data, ancillary, _, _ = sock.recvmsg(_MAX_RESPONSE_BYTES, _ANCILLARY_BYTES, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return done, None
            except OSError:
                data, ancillary = b"", []
            received = [
                descriptor
                for level, kind, raw in ancillary
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
                for descriptor in array.array("i", raw[: len(raw) - len(raw) % 4])
            ]
            if not data:
                for extra in received:
                    _close_fd(extra)
                self._drop(sock)
                return done, address
            try:
                (response,) = decode_frame(data)
            except (ProtocolError, ValueError):
                response = None
            if (
                type(response) is not DataResponse
                or response.found != bool(received)
                or len(received) > 1
                or (received and _file_size(received[0]) < response.total_size)  # mapped, its end would kill us
            ):
                for extra in received:
                    _close_fd(extra)
                self._drop(sock)  # not a holder we understand: through the network from now on
                return done, address
            done.append((response.object_id, SharedBytes(received[0], response.total_size) if received else None))
        return done, None

    def _drop(self, sock: socket.socket) -> None:
        address = self._addresses.pop(sock.fileno())
        self._by_address[address] = None
        self._poller.unregister(sock.fileno())
        sock.close()

    def close(self) -> None:
        for sock in list(self._by_address.values()):
            if sock is not None:
                self._drop(sock)


def _file_size(fd: int) -> int:
    try:
        return os.fstat(fd).st_size
    except OSError:
        return -1


def _close_fd(fd: int) -> None:
    try:
        socket.close(fd)
    except OSError:
        pass


def _send_read_only(sock: socket.socket, header: bytes, fd: int) -> None:
    """Send the file `fd` holds as a descriptor that only reads: the one the holder keeps can write, and a reader of
    another user (without CurveZMQ nothing stops one connecting) would otherwise change what every later reader gets.
    Opened anew through /proc for each answer (a new open file, read-only); where /proc is missing, `fd` itself."""
    try:
        read_only = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        read_only = -1
    try:
        fds = array.array("i", [fd if read_only < 0 else read_only]).tobytes()
        sock.sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)], socket.MSG_DONTWAIT)
    finally:
        if read_only >= 0:
            os.close(read_only)
