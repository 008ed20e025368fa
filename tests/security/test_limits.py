"""Limits on untrusted input, hit on a real scheduler: each gives a clear error or log line, and serving goes on."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest
import zmq

from scaler import Client
from scaler.errors import TaskRefusedError
from scaler.protocol import PROTOCOL_VERSION, Goodbye, Hello, HelloReply, Role, decode_frame, encode
from scaler.testing.processes import ScalerProcess, free_tcp_address, wait_for
from tests.e2e.monitor import wait_for_status


@pytest.fixture
def start_scheduler(tmp_path: Path) -> Iterator:
    started: List[ScalerProcess] = []

    def start(*options: str) -> Tuple[str, str, ScalerProcess]:
        address, monitor = free_tcp_address(), f"ipc://{tmp_path}/monitor{len(started)}"
        process = ScalerProcess(
            "scaler.scheduler", [address, "-ma", monitor, *options], str(tmp_path / f"s{len(started)}.log")
        )
        started.append(process)
        process.wait_for_output("Scheduler: listening on")
        return address, monitor, process

    yield start
    for process in started:
        process.stop()


def _raw_peer(address: str) -> zmq.Socket:
    """A DEALER that speaks the protocol by hand, as a hostile or broken peer would."""
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.ROUTING_ID, b"X|raw|" + os.urandom(4).hex().encode())
    socket.connect(address)
    return socket


def _receive(socket: zmq.Socket, timeout_ms: int = 10_000) -> list:
    assert socket.poll(timeout_ms), "no answer from the scheduler"
    return decode_frame(socket.recv())


def test_tasks_beyond_max_tasks_waiting_are_refused_with_the_reason(start_scheduler) -> None:
    address, _, _ = start_scheduler("--max-tasks-waiting", "3")
    with Client(address, timeout_seconds=20) as client:  # no workers: every task waits
        futures = [client.submit(abs, -n) for n in range(5)]
        for future in futures[3:]:
            with pytest.raises(TaskRefusedError, match="too many tasks waiting"):
                future.result(timeout=20)
        assert not any(f.done() for f in futures[:3])


def test_a_peer_over_the_malformed_budget_is_dropped_and_others_are_served(start_scheduler) -> None:
    address, monitor, scheduler = start_scheduler("--max-malformed-per-peer", "3")
    peer = _raw_peer(address)
    try:
        peer.send(encode(Hello(protocol_version=PROTOCOL_VERSION, role=Role.client, name="noisy")))
        (reply,) = _receive(peer)
        assert isinstance(reply, HelloReply) and reply.accepted
        for garbage in (b"\x00" * 3, b"\xff" * 64, os.urandom(40)):
            peer.send(garbage)
        (goodbye,) = _receive(peer)
        assert isinstance(goodbye, Goodbye) and "malformed" in goodbye.reason
        assert wait_for_status(monitor, lambda s: s.malformed >= 3).clients == 0
    finally:
        peer.close()
    log = scheduler.output()
    assert log.count("dropped a malformed frame from noisy") == 1  # logged once, then counted
    with Client(address, timeout_seconds=20):  # the handshake succeeds: the scheduler goes on serving
        pass
    wait_for(lambda: "client C|" in scheduler.output(), 10, "the next client to be served")


def test_a_frame_over_max_frame_bytes_never_reaches_the_scheduler(start_scheduler) -> None:
    address, monitor, scheduler = start_scheduler("--max-frame-bytes", "1048576")  # the smallest limit allowed
    peer = _raw_peer(address)
    try:
        peer.send(encode(Hello(protocol_version=PROTOCOL_VERSION, role=Role.client, name="big")))
        assert isinstance(_receive(peer)[0], HelloReply)
        peer.send(b"\x00" * 2_000_000)
        # ZeroMQ closed the connection before reading the frame: the scheduler never saw it, and goes on serving
        with Client(address, timeout_seconds=20) as client:
            assert client.send_object(b"y" * 10) is not None
        assert wait_for_status(monitor, lambda s: True).malformed == 0
        wait_for(lambda: "closed without a goodbye" in scheduler.output(), 10, "the dropped connection in the log")
        # ZeroMQ reports this close as it would a peer that died: the log must not guess a cause
        (warning,) = [line for line in scheduler.output().splitlines() if "closed without a goodbye" in line]
        assert "max-frame-bytes" not in warning and "died" not in warning, warning
    finally:
        peer.close()
    assert scheduler.popen.poll() is None


def test_objects_beyond_the_per_client_limit_are_dropped_with_a_warning(start_scheduler) -> None:
    address, _, scheduler = start_scheduler("--max-objects-per-client", "2")
    with Client(address, timeout_seconds=20) as client:
        for n in range(4):
            client.send_object(f"object {n}")
        wait_for(lambda: "objects, the limit: object dropped" in scheduler.output(), 10, "the limit's warning")
