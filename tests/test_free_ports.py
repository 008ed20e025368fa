"""Tests pick ports for their servers below the kernel's ephemeral range, which outgoing connections draw from: a port
picked there could be taken by a connection before its server binds it."""

from __future__ import annotations

import socket

from scaler.testing.processes import free_tcp_address


def test_picked_ports_are_free_distinct_and_below_the_ephemeral_range() -> None:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
        lowest_ephemeral = int(ports.read().split()[0])
    picked = [int(free_tcp_address().rsplit(":", 1)[1]) for _ in range(200)]
    assert len(set(picked)) == len(picked), "never the same port twice, though each is free until its server binds it"
    assert all(port < lowest_ephemeral for port in picked)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", picked[-1]))
