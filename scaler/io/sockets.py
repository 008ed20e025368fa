"""ZeroMQ socket set-up shared by the scheduler, clients, workers and monitors."""

from __future__ import annotations

import os
import socket
import uuid

import zmq

from scaler.config import DEFAULT_MAX_FRAME_BYTES


def make_identity(kind: str) -> bytes:
    """A unique ZeroMQ routing id that also reads well in logs and scaler_top: `W|host|pid|hex`."""
    return f"{kind}|{socket.gethostname()}|{os.getpid()}|{uuid.uuid4().hex[:12]}".encode()


def validate_address(address: str) -> str:
    if not isinstance(address, str):
        raise TypeError(f"address must be a str like 'tcp://127.0.0.1:2345', got {type(address).__name__}")
    if not (address.startswith("tcp://") or address.startswith("ipc://")):
        raise ValueError(f"address must start with tcp:// or ipc://, got {address!r}")
    if address.startswith("tcp://") and ":" not in address[len("tcp://") :]:
        raise ValueError(f"tcp address needs a port, like tcp://127.0.0.1:2345, got {address!r}")
    return address


def create_dealer(context: zmq.Context, address: str, identity: bytes) -> zmq.Socket:
    """A DEALER connected to the scheduler. Unlimited high-water marks: a full queue must block nobody's results."""
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.ROUTING_ID, identity)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.connect(address)
    return sock


def create_router(context: zmq.Context, address: str, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> zmq.Socket:
    sock = context.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # a peer that vanished must not make a send raise mid-batch
    sock.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
    sock.bind(address)
    return sock
