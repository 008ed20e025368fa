"""Internal: zeroMQ socket set-up shared by the scheduler, clients, workers and monitors.

Every socket made here has TCP keepalive on (unless told otherwise, see TcpKeepalive). Heartbeats keep connections
busy at the default interval of 1 s, but a connection can go quiet for longer than a firewall's or NAT's idle timeout
(often minutes, sometimes 5): with a long --heartbeat-interval or --status-interval, or while a peer process is
stopped (a debugger, SIGSTOP) or starved. Then the kernel's keepalive probes keep the middleboxes' state, so that an
hours-long task's result still has a connection to travel on. ZeroMQ applies the options to every TCP connection the
socket makes or accepts; ipc connections ignore them.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import uuid
from typing import Any, NamedTuple, Optional, Tuple

import zmq

from scaler.config import (
    DEFAULT_MAX_FRAME_BYTES,
    TCP_KEEPALIVE,
    TCP_KEEPALIVE_COUNT,
    TCP_KEEPALIVE_IDLE,
    TCP_KEEPALIVE_INTERVAL,
)
from scaler.io.addresses import bare_host, tcp_host_port
from scaler.io.curve import apply_peer_keys, apply_server_keys
from scaler.io.curve_keys import CurvePeerKeys, CurveServerKeys
from scaler.io.limits import LISTEN_BACKLOG


class TcpKeepalive(NamedTuple):
    """The tcp_keepalive settings of scaler.config, as one value to hand to the functions below."""

    enabled: bool = TCP_KEEPALIVE.default
    idle_seconds: int = TCP_KEEPALIVE_IDLE.default
    interval_seconds: int = TCP_KEEPALIVE_INTERVAL.default
    probes: int = TCP_KEEPALIVE_COUNT.default  # not `count`, which would hide tuple.count

    @classmethod
    def of(cls, settings: Any) -> TcpKeepalive:
        """From anything holding the settings as attributes: SchedulerSettings, WorkerSettings, parsed arguments."""
        return cls(
            settings.tcp_keepalive,
            settings.tcp_keepalive_idle_seconds,
            settings.tcp_keepalive_interval_seconds,
            settings.tcp_keepalive_count,
        )

    @classmethod
    def checked(cls, enabled: Any, idle_seconds: Any, interval_seconds: Any, probes: Any) -> TcpKeepalive:
        """From keywords (a Client's), each checked as its declaration says: TypeError or ValueError naming it."""
        return cls(
            TCP_KEEPALIVE.validate(enabled),
            TCP_KEEPALIVE_IDLE.validate(idle_seconds),
            TCP_KEEPALIVE_INTERVAL.validate(interval_seconds),
            TCP_KEEPALIVE_COUNT.validate(probes),
        )

    def apply(self, sock: zmq.Socket) -> None:
        """Before connect or bind: ZeroMQ reads the options when it opens each TCP connection."""
        sock.setsockopt(zmq.TCP_KEEPALIVE, 1 if self.enabled else 0)
        if self.enabled:
            sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, self.idle_seconds)
            sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, self.interval_seconds)
            sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, self.probes)


DEFAULT_KEEPALIVE = TcpKeepalive()


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


# The resolver's answers that mean "no such host": fail at once. Others (EAI_AGAIN: the resolver could not answer now)
# leave the lookup to ZeroMQ, which retries it as it reconnects.
_NO_SUCH_HOST = frozenset(
    code for code in (getattr(socket, "EAI_NONAME", None), getattr(socket, "EAI_NODATA", None)) if code is not None
)


def check_resolvable(address: str) -> str:
    """`address`, if its host needs no lookup (ipc://, an IP address, *) or resolves; ValueError naming the host if
    the resolver says there is no such host. ZeroMQ would retry such a host quietly until the caller's timeout; a
    host that resolves but does not answer yet is left to wait, as a scheduler may start later."""
    parts = tcp_host_port(address)
    if parts is None:
        return address
    host = bare_host(parts[0])
    if host in ("", "*"):
        return address
    try:
        ipaddress.ip_address(host.partition("%")[0])  # an IPv6 address may name its interface: fe80::1%eth0
        return address
    except ValueError:
        pass
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        if error.errno in _NO_SUCH_HOST:
            raise ValueError(f"cannot resolve host {host!r} of {address}: {error.strerror}") from None
    return address


# The events of a refused handshake (a key the scheduler does not accept, a wrong server key): libzmq never connects
# that socket again, so the peer must give up, saying why, rather than wait or connect anew in a loop.
HANDSHAKE_REFUSALS = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL


def refusal_reason(event: int, peer: str, server_key_option: str) -> str:
    """What a refused handshake's `event` tells a `peer` ("client", "worker") about its keys."""
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return f"the scheduler refused this {peer}'s CurveZMQ key: is its public key among the authorized ones?"
    return f"the CurveZMQ handshake failed: is {server_key_option} the public key of this scheduler?"


def create_dealer(
    context: zmq.Context,
    address: str,
    identity: bytes,
    events: int,
    curve: Optional[CurvePeerKeys] = None,
    keepalive: TcpKeepalive = DEFAULT_KEEPALIVE,
) -> Tuple[zmq.Socket, zmq.Socket]:
    """A DEALER connected to the scheduler, and the monitor socket that reports its `events`, attached before the
    connection starts: libzmq tries a refused CurveZMQ handshake once, and only a monitor already there hears of it.
    Unlimited high-water marks: a full queue must block nobody's results."""
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.ROUTING_ID, identity)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    keepalive.apply(sock)
    if curve is not None:
        apply_peer_keys(sock, curve)
    monitor = sock.get_monitor_socket(events)
    try:
        sock.connect(address)
    except zmq.ZMQError:
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)
        raise
    return sock, monitor


def create_router(
    context: zmq.Context,
    address: Optional[str],
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    curve: Optional[CurveServerKeys] = None,
    keepalive: TcpKeepalive = DEFAULT_KEEPALIVE,
    backlog: int = LISTEN_BACKLOG,
) -> zmq.Socket:
    """A ROUTER bound to `address`; with None, not bound yet: its caller attaches a monitor first, which hears only of
    the connections accepted after it."""
    sock = context.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # a peer that vanished must not make a send raise mid-batch
    sock.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
    sock.setsockopt(zmq.BACKLOG, backlog)  # a thousand workers starting at once must not lose their SYNs
    keepalive.apply(sock)
    if curve is not None:
        apply_server_keys(sock, curve)
    if address is not None:
        sock.bind(address)
    return sock


def create_publisher(
    context: zmq.Context,
    address: Optional[str],
    curve: Optional[CurveServerKeys] = None,
    keepalive: TcpKeepalive = DEFAULT_KEEPALIVE,
) -> zmq.Socket:
    """The scheduler's monitor socket, bound to `address` (with None, not yet, as create_router). Status is dropped,
    never queued, for a subscriber that does not keep up."""
    sock = context.socket(zmq.PUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 16)
    keepalive.apply(sock)
    if curve is not None:
        apply_server_keys(sock, curve)
    if address is not None:
        sock.bind(address)
    return sock


def create_subscriber(
    context: zmq.Context,
    address: str,
    curve: Optional[CurvePeerKeys] = None,
    conflate: bool = False,
    keepalive: TcpKeepalive = DEFAULT_KEEPALIVE,
) -> zmq.Socket:
    """A monitor's socket, subscribed to everything the scheduler publishes; with `conflate`, only the newest message
    waits to be read (ZeroMQ drops older ones)."""
    sock = context.socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    keepalive.apply(sock)
    if conflate:
        sock.setsockopt(zmq.CONFLATE, 1)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    if curve is not None:
        apply_peer_keys(sock, curve)
    sock.connect(address)
    return sock


def is_loopback(address: str) -> bool:
    """Whether a bind address is reachable from this machine only (ipc, or a tcp loopback address)."""
    parts = tcp_host_port(address)
    if parts is None:
        return True
    host = bare_host(parts[0])
    return host in ("localhost", "::1") or host.startswith("127.")
