"""A fetcher's sockets to holders are closed once unused for a while, unless a fetch waits on them: holders come and
go, and each would otherwise keep a socket, a descriptor and ZeroMQ's reconnecting to an address that is gone."""

from __future__ import annotations

import pytest
import zmq

from scaler.io.data_fetch import FETCH_TIMEOUT_SECONDS, IDLE_SOCKET_SECONDS, DataFetcher

pytestmark = pytest.mark.timeout(30)

GONE = "tcp://127.0.0.1:9"  # nobody answers there: fetches from it time out
BUSY = "tcp://127.0.0.1:10"
OTHER = "tcp://127.0.0.1:11"


def test_a_socket_unused_for_a_while_is_closed_and_one_a_fetch_waits_on_is_kept() -> None:
    context = zmq.Context()
    poller = zmq.Poller()
    fetcher = DataFetcher(context, poller)
    try:
        fetcher.fetch(GONE, b"a", 0.0)
        assert fetcher.ready({}, FETCH_TIMEOUT_SECONDS + 1) == [(b"a", None, True)], "given up"
        fetcher.fetch(BUSY, b"b", 10.0)
        assert set(fetcher.holders()) == {GONE, BUSY}, "unused for less than the idle time: kept"
        busy = poller.sockets[-1][0]
        later = 10.0 + IDLE_SOCKET_SECONDS + 1  # both unused since; the fetch from BUSY still under way
        fetcher.fetch(OTHER, b"c", later)
        assert set(fetcher.holders()) == {BUSY, OTHER}
        assert busy in {sock for sock, _ in poller.sockets}, "the very socket the fetch waits on"
        assert len(poller.sockets) == 2, "the closed one is no longer polled"
    finally:
        fetcher.close()
        context.term()
