"""Internal: the parts of a ZeroMQ tcp:// address, read one way for every use (resolving it, binding next to it,
serving data on the interface that reaches it, naming the relay beside it). No sockets here."""

from __future__ import annotations

from typing import Optional, Tuple


def tcp_host_port(address: str) -> Optional[Tuple[str, str]]:
    """(host, port) of a tcp:// address, of its destination in ZeroMQ's "source;destination" form, with an IPv6 host
    in its brackets as written; None for any other transport (ipc://)."""
    if not address.startswith("tcp://"):
        return None
    host, _, port = address[len("tcp://") :].rpartition(";")[2].rpartition(":")
    return host, port


def tcp_ports(*addresses: str) -> Tuple[int, ...]:
    """The ports of the tcp:// addresses among `addresses` (a port that is not a number, as `*`, is left out)."""
    ports = []
    for address in addresses:
        parts = tcp_host_port(address)
        if parts is not None and parts[1].isdigit():
            ports.append(int(parts[1]))
    return tuple(ports)


def bare_host(host: str) -> str:
    """A host without the brackets an IPv6 address has in an address."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host
