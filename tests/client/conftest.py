from __future__ import annotations

from typing import Iterator

import pytest

from scaler.client import Client
from scaler.testing.protocol_peer import ProtocolPeer


@pytest.fixture
def peer() -> Iterator[ProtocolPeer]:
    with ProtocolPeer() as running:
        yield running


@pytest.fixture
def client(peer: ProtocolPeer) -> Iterator[Client]:
    connected = Client(peer.address, timeout_seconds=10)
    yield connected
    connected.disconnect()
