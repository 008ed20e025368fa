"""The one reading of tcp:// addresses (scaler/io/addresses.py) and what is built on it."""

from __future__ import annotations

import pytest

from scaler.io.addresses import bare_host, tcp_host_port, tcp_ports
from scaler.io.data_server import data_host
from scaler.io.relay_link import relay_address
from scaler.io.sockets import is_loopback
from scaler.scheduler.relay_process import relay_host


@pytest.mark.parametrize(
    "address, parts",
    [
        ("tcp://127.0.0.1:2345", ("127.0.0.1", "2345")),
        ("tcp://[::1]:2345", ("[::1]", "2345")),
        ("tcp://eth0;10.0.0.2:2345", ("10.0.0.2", "2345")),  # ZeroMQ's source;destination
        ("tcp://*:2345", ("*", "2345")),
        ("ipc:///tmp/scheduler", None),
    ],
)
def test_tcp_addresses_split_into_host_and_port(address: str, parts) -> None:
    assert tcp_host_port(address) == parts


def test_users_of_the_split_agree() -> None:
    assert bare_host("[::1]") == "::1" and bare_host("example.com") == "example.com"
    assert relay_address("tcp://[::1]:2345", 3000) == "tcp://[::1]:3000"
    assert relay_address("ipc:///tmp/s", 3000) is None
    assert relay_host("tcp://0.0.0.0:2345") == "0.0.0.0" and relay_host("ipc:///tmp/s") is None
    assert data_host("tcp://127.0.0.1:2345") == "127.0.0.1" and data_host("ipc:///tmp/s") is None
    assert is_loopback("tcp://[::1]:1") and is_loopback("ipc:///tmp/s") and not is_loopback("tcp://10.1.2.3:1")
    assert tcp_ports("tcp://127.0.0.1:2345", "ipc:///tmp/s", "tcp://*:*", "tcp://[::1]:7") == (2345, 7)
