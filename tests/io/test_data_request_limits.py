"""A holder answers a bounded number of ids per frame and per turn of its loop, on its data address and on its local
socket: a flood of requests (made-up ids, each answered "not found") once stalled a worker's loop until it was taken
for dead and killed. Real sockets."""

from __future__ import annotations

import socket
import time
from typing import List, Tuple

import pytest
import zmq

from scaler.io.data_requests import IDS_PER_TURN, MAX_IDS_PER_FRAME
from scaler.io.data_server import DataServer
from scaler.io.local_data import LocalDataServer, local_name
from scaler.protocol import DataRequest, decode_frame, encode

pytestmark = pytest.mark.timeout(60)


def _ids(count: int, start: int = 0) -> List[bytes]:
    return [index.to_bytes(16, "big") for index in range(start, start + count)]


def _answers(requester: zmq.Socket, wait_seconds: float = 0.5) -> int:
    """How many answers reach the requester until none comes for `wait_seconds`."""
    count = 0
    while requester.poll(int(wait_seconds * 1000)):
        count += len(decode_frame(requester.recv_multipart()[0]))
        while requester.poll(0):
            count += len(decode_frame(requester.recv_multipart()[0]))
    return count


def _server_on_inproc(context: zmq.Context) -> Tuple[DataServer, zmq.Socket]:
    """A DataServer whose socket is bound in-process, and a requester connected to it: what the requester sends is
    waiting in the server's socket as soon as send returns (over TCP it would trickle in), so one call of serve
    meets every frame sent before it."""
    server = DataServer(context, "127.0.0.1")
    server.sock.close(linger=0)
    server.sock = context.socket(zmq.ROUTER)
    server.sock.setsockopt(zmq.SNDHWM, 0)  # as DataServer's own
    server.sock.bind("inproc://holder")
    requester = context.socket(zmq.DEALER)
    requester.setsockopt(zmq.RCVHWM, 0)
    requester.connect("inproc://holder")
    return server, requester


def test_a_frame_asking_too_many_ids_is_dropped_as_malformed_and_others_are_served() -> None:
    context = zmq.Context()
    server, requester = _server_on_inproc(context)
    try:
        requester.send(encode(DataRequest(object_ids=_ids(MAX_IDS_PER_FRAME + 1))))
        requester.send(encode(DataRequest(object_ids=_ids(10))))
        server.serve(lambda object_id: None)
        assert server.malformed == 1
        assert _answers(requester) == 10
    finally:
        requester.close(linger=0)
        server.close()
        context.term()


def test_one_turn_answers_at_most_its_share_of_ids_and_the_next_turn_the_rest() -> None:
    context = zmq.Context()
    server, requester = _server_on_inproc(context)
    try:
        frames = IDS_PER_TURN // MAX_IDS_PER_FRAME + 1
        for frame in range(frames):
            requester.send(encode(DataRequest(object_ids=_ids(MAX_IDS_PER_FRAME, frame * MAX_IDS_PER_FRAME))))
        server.serve(lambda object_id: None)
        assert _answers(requester) == IDS_PER_TURN
        server.serve(lambda object_id: None)
        assert _answers(requester) == frames * MAX_IDS_PER_FRAME - IDS_PER_TURN
        assert server.malformed == 0
    finally:
        requester.close(linger=0)
        server.close()
        context.term()


def _closed_by(server: LocalDataServer, poller: zmq.Poller, rogue: socket.socket, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    rogue.setblocking(False)
    while time.monotonic() < deadline:
        server.on_events(dict(poller.poll(50)), lambda object_id: None)
        try:
            rogue.send(b"")  # a zero-length message: nothing, unless the peer closed
        except (BrokenPipeError, ConnectionResetError):
            return True
        except BlockingIOError:
            pass
    return False


def test_a_local_reader_asking_too_many_ids_in_a_request_is_closed() -> None:
    poller = zmq.Poller()
    server = LocalDataServer("tcp://127.0.0.1:9", poller)
    rogue = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        rogue.connect(local_name("tcp://127.0.0.1:9"))
        rogue.send(encode(DataRequest(object_ids=_ids(MAX_IDS_PER_FRAME + 1))))
        assert _closed_by(server, poller, rogue)
        assert server.malformed == 1
    finally:
        rogue.close()
        server.close()


def test_a_local_reader_that_asks_and_never_reads_is_closed() -> None:
    poller = zmq.Poller()
    server = LocalDataServer("tcp://127.0.0.1:9", poller)
    rogue = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        rogue.connect(local_name("tcp://127.0.0.1:9"))
        rogue.setblocking(False)
        sent, closed = 0, False
        for frame in range(64):  # 65,536 answers asked for, none read
            try:
                rogue.send(encode(DataRequest(object_ids=_ids(MAX_IDS_PER_FRAME, frame * MAX_IDS_PER_FRAME))))
                sent += 1
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            server.on_events(dict(poller.poll(10)), lambda object_id: None)
        assert sent > IDS_PER_TURN // MAX_IDS_PER_FRAME, "more asked than its queue may hold"
        assert closed or _closed_by(server, poller, rogue)
        assert server.malformed == 1
    finally:
        rogue.close()
        server.close()
