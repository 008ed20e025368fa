"""A fetcher's sockets to holders are closed once unused for a while, unless a fetch waits on them: holders come and
go, and each would otherwise keep a socket, a descriptor and ZeroMQ's reconnecting to an address that is gone."""

from __future__ import annotations

import pytest
import zmq

from scaler.io.data_fetch import FETCH_TIMEOUT_SECONDS, IDLE_SOCKET_SECONDS, UNREACHABLE_SECONDS, DataFetcher

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


def test_what_was_learnt_of_addresses_gone_is_forgotten_as_idle_sockets_are_closed() -> None:
    """Holders come and go: an address found out of reach, or not on this host, is not remembered for good."""
    context = zmq.Context()
    poller = zmq.Poller()
    fetcher = DataFetcher(context, poller)
    try:
        fetcher.relay = "tcp://127.0.0.1:12"  # a relay to fall back on: a silent holder is then marked out of reach
        fetcher.fetch(GONE, b"a", 0.0)
        fetcher.ready({}, FETCH_TIMEOUT_SECONDS + 1)  # no answer: asked through the relay, GONE out of reach a while
        fetcher.fetch(GONE, b"b", FETCH_TIMEOUT_SECONDS + 2)  # through the relay at once
        assert GONE in fetcher._unreachable and fetcher._local._by_address == {GONE: None}, "not on this host"
        fetcher.ready({}, 4 * FETCH_TIMEOUT_SECONDS)  # the relay did not answer either: both given up
        fetcher.fetch(OTHER, b"c", UNREACHABLE_SECONDS + IDLE_SOCKET_SECONDS)
        assert GONE not in fetcher._unreachable and GONE not in fetcher._local._by_address
    finally:
        fetcher.close()
        context.term()
