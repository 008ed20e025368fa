"""Data addresses with CurveZMQ, on real sockets over TCP: a holder serves only the keys its scheduler accepts, a
requester talks only to the holder whose key it was given, and every data socket keeps to the frame limit."""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, List, Optional, Tuple

import pytest
import zmq

from scaler.io.curve import ZapResponder, z85_keys
from scaler.io.curve_keys import CurvePeerKeys, raw_key
from scaler.io.data_fetch import DataFetcher
from scaler.io.data_server import DataServer
from scaler.testing.curve_files import until_it_takes_nothing

pytestmark = pytest.mark.timeout(60)

KiB = 1024
OBJECT = b"o" * 16


def _keys() -> CurvePeerKeys:
    public, secret = zmq.curve_keypair()
    return CurvePeerKeys(public, secret, zmq.curve_keypair()[0])  # the scheduler's key plays no part here


class Holder:
    """A data address as a worker or client serves it with CurveZMQ: its ZapResponder first, then the server."""

    def __init__(self, authorized: List[CurvePeerKeys], held: Dict[bytes, Any]) -> None:
        self.keys = _keys()
        self.context = zmq.Context()
        self.zap = ZapResponder(self.context)
        # as a DataKeys from the scheduler brings them: 32 bytes each
        self.zap.authorized_keys = z85_keys(raw_key(keys.public_key) for keys in authorized)
        self.server = DataServer(self.context, "127.0.0.1", self.keys, self.zap)
        self.held = held

    def serve_once(self) -> None:
        self.zap.answer_pending()
        self.server.serve(self.held.get)

    def close(self) -> None:
        self.server.close()
        self.zap.close()
        self.context.term()


class Requester:
    def __init__(self, keys: Optional[CurvePeerKeys]) -> None:
        self.context = zmq.Context()
        self.poller = zmq.Poller()
        self.fetcher = DataFetcher(self.context, self.poller, keys)

    def close(self) -> None:
        self.fetcher.close()
        self.context.term()


def _run(holder: Holder, requester: Requester, seconds: float) -> List[Tuple[bytes, Any, bool]]:
    """Both ends' loops, in turn, until a fetch ends or `seconds` pass."""
    poller = zmq.Poller()
    poller.register(holder.zap.socket, zmq.POLLIN)
    poller.register(holder.server.sock, zmq.POLLIN)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        poller.poll(5)
        holder.serve_once()
        done = requester.fetcher.ready(dict(requester.poller.poll(5)), time.monotonic())
        if done:
            return done
    return []


@pytest.fixture
def closing():
    opened: List[Any] = []
    yield opened.append
    for end in reversed(opened):
        end.close()


def test_a_requester_with_an_authorized_key_fetches_a_large_object_in_chunks(closing) -> None:
    requester_keys = _keys()
    payload = bytes(range(256)) * (1200 * KiB // 256)
    holder = Holder([requester_keys], {OBJECT: payload})
    closing(holder)
    holder.server.chunk_bytes = 256 * KiB  # under the scheduler's frame limit: five chunks
    requester = Requester(requester_keys)
    closing(requester)
    key = raw_key(holder.keys.public_key)
    assert requester.fetcher.reachable(holder.server.address, time.monotonic(), key)
    requester.fetcher.fetch(holder.server.address, OBJECT, time.monotonic(), key)
    ((object_id, fetched, timed_out),) = _run(holder, requester, 20)
    assert (object_id, bytes(fetched), timed_out) == (OBJECT, payload, False)
    assert holder.zap.refusals == 0


def test_a_key_no_longer_authorized_gets_nothing_on_the_connection_it_opened(closing, caplog) -> None:
    """ZAP checks a key at the handshake only: a holder whose scheduler came back accepting fewer keys (DataKeys)
    still has connections open from the keys it dropped, and must not answer them."""
    kept, dropped = _keys(), _keys()
    holder = Holder([kept, dropped], {OBJECT: b"x" * 100 * KiB})
    closing(holder)
    requester = Requester(dropped)
    closing(requester)
    key = raw_key(holder.keys.public_key)
    requester.fetcher.fetch(holder.server.address, OBJECT, time.monotonic(), key)
    assert [(object_id, timed_out) for object_id, _, timed_out in _run(holder, requester, 20)] == [(OBJECT, False)]
    served = holder.server.served_bytes
    holder.zap.authorized_keys = z85_keys([raw_key(kept.public_key)])
    with caplog.at_level(logging.WARNING, logger="scaler.io.data_server"):
        requester.fetcher.fetch(holder.server.address, OBJECT, time.monotonic(), key)  # the same connection
        assert _run(holder, requester, 2.0) == [], "never answered"
    assert holder.server.served_bytes == served
    assert holder.zap.refusals == 0, "no new handshake: the connection it had"
    refusals = [record.getMessage() for record in caplog.records if "no longer among" in record.getMessage()]
    assert len(refusals) == 1 and dropped.public_key.decode() in refusals[0]


def test_a_requester_without_the_holders_key_does_not_try(closing) -> None:
    requester = Requester(_keys())
    closing(requester)
    assert not requester.fetcher.reachable("tcp://127.0.0.1:9", time.monotonic(), b"")  # then it asks for a relay
    assert Requester(None).fetcher.reachable("tcp://127.0.0.1:9", time.monotonic(), b"")  # without CurveZMQ it does


def test_a_key_the_scheduler_does_not_accept_is_refused_and_logged(closing, caplog) -> None:
    holder = Holder([_keys()], {OBJECT: b"x" * 100 * KiB})
    closing(holder)
    stranger = Requester(_keys())
    closing(stranger)
    with caplog.at_level(logging.WARNING, logger="scaler.io.curve"):
        stranger.fetcher.fetch(holder.server.address, OBJECT, time.monotonic(), raw_key(holder.keys.public_key))
        assert _run(holder, stranger, 2.0) == [], "never answered"
    assert holder.zap.refusals >= 1 and holder.server.served_bytes == 0
    refusals = [record.getMessage() for record in caplog.records if "refused a connection" in record.getMessage()]
    assert refusals and "not among the authorized keys" in refusals[0] and "scaler-data" in refusals[0]


def test_a_fetch_after_a_refused_handshake_goes_on_a_new_connection(closing) -> None:
    """ZeroMQ never connects a socket again once its handshake was refused, and takes nothing more on it: a holder
    that refused this peer's key (its DataKeys not there yet, say) is asked again on a new connection, and answers it
    once it accepts the key."""
    late = _keys()
    holder = Holder([], {OBJECT: b"x" * 100 * KiB})
    closing(holder)
    requester = Requester(late)
    closing(requester)
    key = raw_key(holder.keys.public_key)
    requester.fetcher.fetch(holder.server.address, OBJECT, time.monotonic(), key)
    assert _run(holder, requester, 1.0) == [], "refused"
    assert holder.zap.refusals == 1
    until_it_takes_nothing(requester.fetcher._sockets[holder.server.address, key])
    holder.zap.authorized_keys = z85_keys([raw_key(late.public_key)])
    requester.fetcher.fetch(holder.server.address, OBJECT, time.monotonic(), key)
    ((object_id, fetched, timed_out),) = _run(holder, requester, 20)
    assert (object_id, len(fetched), timed_out) == (OBJECT, 100 * KiB, False)
    assert requester.fetcher.holders() == [holder.server.address], "the refused connection closed, not kept"


def test_a_peer_without_curve_or_with_a_wrong_holder_key_gets_nothing(closing) -> None:
    authorized = _keys()
    holder = Holder([authorized], {OBJECT: b"x" * 100 * KiB})
    closing(holder)
    keyless = Requester(None)  # a plain ZeroMQ peer: the CURVE server does not even ask the ZAP handler
    closing(keyless)
    keyless.fetcher.fetch(holder.server.address, OBJECT, time.monotonic())
    assert _run(holder, keyless, 1.5) == []
    impostor_check = Requester(authorized)  # an authorized peer told a key the server cannot prove it holds
    closing(impostor_check)
    impostor_check.fetcher.fetch(holder.server.address, OBJECT, time.monotonic(), raw_key(_keys().public_key))
    assert _run(holder, impostor_check, 1.5) == []
    assert holder.server.served_bytes == 0


def test_a_fetching_socket_reads_no_frame_over_the_schedulers_limit(closing) -> None:
    requester_keys = _keys()
    holder = Holder([requester_keys], {OBJECT: b"x" * 300 * KiB})
    closing(holder)
    holder.server.chunk_bytes = 1024 * KiB  # a holder that ignores the limit: one frame of 300 KiB
    requester = Requester(requester_keys)
    closing(requester)
    requester.fetcher.max_frame_bytes = 128 * KiB
    requester.fetcher.fetch(holder.server.address, OBJECT, time.monotonic(), raw_key(holder.keys.public_key))
    assert _run(holder, requester, 2.0) == [], "ZeroMQ drops the connection: the fetch times out, then is relayed"
