"""A held result served through the data address is sent from its shared memory without a copy, and keeps no
descriptor once sent: a worker serving tens of thousands of results would otherwise keep two descriptors for each."""

from __future__ import annotations

import pytest
import zmq

from scaler.io.data_server import send_held
from scaler.io.shared_bytes import SharedBytes
from scaler.protocol import DataResponse, decode_frame
from scaler.testing.processes import wait_for
from tests.e2e.shared_memory import descriptors_of

pytestmark = pytest.mark.timeout(30)


def test_a_held_result_served_keeps_no_second_descriptor_once_sent() -> None:
    context = zmq.Context()
    server = context.socket(zmq.ROUTER)
    reader = context.socket(zmq.DEALER)
    try:
        port = server.bind_to_random_port("tcp://127.0.0.1")
        reader.connect(f"tcp://127.0.0.1:{port}")
        data = bytes(range(256)) * 4096  # 1 MiB: above what ZeroMQ copies anyway
        held = SharedBytes.create(data)
        assert descriptors_of(held.fd) == 1
        reader.send(b"hello")
        route = server.recv_multipart()[:1]
        for _ in range(3):  # served three times, as to three peers
            assert send_held(server, route, b"id", held, b"", chunk_bytes=len(data) // 2) == len(data)
            parts = [reader.recv_multipart() for _ in range(2)]
            assert [decode_frame(header)[0].chunk_index for header, _ in parts] == [0, 1]
            assert all(type(decode_frame(header)[0]) is DataResponse for header, _ in parts)
            assert b"".join(chunk for _, chunk in parts) == data
            del parts
        # ZeroMQ lets go of what it sent from another thread: the mapping and its descriptor go then
        wait_for(lambda: descriptors_of(held.fd) == 1, 10, "only the held result's own descriptor")
        assert bytes(held.view()) == data, "still held, whole"
    finally:
        reader.close(0)
        server.close(0)
        context.term()
