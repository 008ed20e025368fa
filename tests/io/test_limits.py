"""The open-files budget's door, on real sockets: once shut, no connection completes, not even one whose handshake was
under way, and once open again the waiting peers get in."""

from __future__ import annotations

import errno
import os
import select
import socket
import struct
import time

import pytest

from scaler.io.limits import SynGate

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not SynGate.available(), reason="the door (a socket filter) is Linux's"),
]

BACKLOG = 8


def accept_queue(listener: socket.socket) -> int:
    """The connections a listening socket queued unaccepted: tcp_info's tcpi_unacked, for a listener (Linux)."""
    return struct.unpack_from("I", listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104), 24)[0]


def wait_for_queue(listener: socket.socket, wanted: int, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    while accept_queue(listener) != wanted and time.monotonic() < deadline:
        time.sleep(0.01)
    return accept_queue(listener)


def test_a_shut_door_completes_no_connection_not_even_a_handshake_under_way_and_opened_lets_them_in() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    # the server holds each handshake until the peer sends data: handshakes under way, as a burst leaves them (their
    # final ACK dropped while the queue was full, or answered with a SYN cookie)
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 30)
    listener.listen(BACKLOG)
    gate = SynGate(os.dup(listener.fileno()))
    under_way = [socket.create_connection(listener.getsockname(), timeout=5) for _ in range(3)]
    new = socket.socket()
    try:
        assert accept_queue(listener) == 0
        gate.close()
        for client in under_way:
            client.send(b"x")  # completes the handshake, through an open door
        new.setblocking(False)
        assert new.connect_ex(listener.getsockname()) == errno.EINPROGRESS
        # on loopback what passes the door completes at once (the handshakes on their data, the new connection on its
        # SYN-ACK): a second shows nothing did
        assert wait_for_queue(listener, 3, 1.0) == 0
        assert not select.select([], [new], [], 0)[1]
        gate.open()  # the peers' own retries bring them in: data retransmitted, the SYN sent again after a second
        assert wait_for_queue(listener, 3, 10.0) == 3
        assert select.select([], [new], [], 10.0)[1] and new.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
    finally:
        gate.release()
        for client in [*under_way, new]:
            client.close()
        listener.close()
