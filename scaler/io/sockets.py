"""ZeroMQ socket set-up shared by the scheduler, clients, workers and monitors."""

from __future__ import annotations

import os
import socket
import uuid
from typing import Optional

import zmq

from scaler.config import DEFAULT_MAX_FRAME_BYTES
from scaler.io.curve import CurvePeerKeys, CurveServerKeys, apply_peer_keys, apply_server_keys
from scaler.io.limits import LISTEN_BACKLOG


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


def create_dealer(
    context: zmq.Context, address: str, identity: bytes, curve: Optional[CurvePeerKeys] = None
) -> zmq.Socket:
    """A DEALER connected to the scheduler. Unlimited high-water marks: a full queue must block nobody's results."""
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.ROUTING_ID, identity)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    if curve is not None:
        apply_peer_keys(sock, curve)
    sock.connect(address)
    return sock


def create_router(
    context: zmq.Context,
    address: str,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    curve: Optional[CurveServerKeys] = None,
    backlog: int = LISTEN_BACKLOG,
) -> zmq.Socket:
    sock = context.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # a peer that vanished must not make a send raise mid-batch
    sock.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
    sock.setsockopt(zmq.BACKLOG, backlog)  # a thousand workers starting at once must not lose their SYNs
    if curve is not None:
        apply_server_keys(sock, curve)
    sock.bind(address)
    return sock


def create_publisher(context: zmq.Context, address: str, curve: Optional[CurveServerKeys] = None) -> zmq.Socket:
    """The scheduler's monitor socket. Status is dropped, never queued, for a subscriber that does not keep up."""
    sock = context.socket(zmq.PUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 16)
    if curve is not None:
        apply_server_keys(sock, curve)
    sock.bind(address)
    return sock


def create_subscriber(
    context: zmq.Context, address: str, curve: Optional[CurvePeerKeys] = None, conflate: bool = False
) -> zmq.Socket:
    """A monitor's socket, subscribed to everything the scheduler publishes; with `conflate`, only the newest message
    waits to be read (ZeroMQ drops older ones)."""
    sock = context.socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    if conflate:
        sock.setsockopt(zmq.CONFLATE, 1)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    if curve is not None:
        apply_peer_keys(sock, curve)
    sock.connect(address)
    return sock


def is_loopback(address: str) -> bool:
    """Whether a bind address is reachable from this machine only (ipc, or a tcp loopback address)."""
    if address.startswith("ipc://"):
        return True
    host = address[len("tcp://") :].rpartition(":")[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")
