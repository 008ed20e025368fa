"""The data relay over real sockets: a holder that serves through its link to the relay, a requester that cannot reach
the holder's data address and gets the bytes through the relay, chunk by chunk, after its direct fetch timed out; a
holder the relay does not know answered as not found; garbage dropped."""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Tuple

import pytest
import zmq

from scaler.io.curve import ZapResponder
from scaler.io.curve_keys import CurvePeerKeys, CurveServerKeys, raw_key
from scaler.io.data_fetch import FETCH_TIMEOUT_SECONDS, DataFetcher
from scaler.io.relay_link import RelayLink, follow_relay
from scaler.protocol import DataRequest, DataResponse, encode
from scaler.relay.relay import Relay, bind_avoiding
from scaler.testing.curve_files import until_it_takes_nothing
from scaler.testing.processes import free_tcp_address, wait_for

pytestmark = pytest.mark.timeout(60)


class World:
    def __init__(self, held: Dict[bytes, Any]) -> None:
        self.context = zmq.Context()
        self.relay = Relay(self.context, "127.0.0.1", 64 * 1024 * 1024, None)
        self.relay_address = f"tcp://127.0.0.1:{self.relay.port}"
        self.holder_address = free_tcp_address()  # nobody listens there: the requester cannot reach it
        self.link = RelayLink(self.context, self.relay_address, self.holder_address, 64 * 1024 * 1024)
        self.held = held
        self.poller = zmq.Poller()
        self.fetcher = DataFetcher(self.context, self.poller)
        self.fetcher.relay = self.relay_address

    def run_until(self, count: int, seconds: float) -> List[Any]:
        done: List[Any] = []
        deadline = time.monotonic() + seconds
        while len(done) < count and time.monotonic() < deadline:
            self.relay.serve_once(10)
            if self.link.sock.poll(0):
                self.link.serve(self.held.get)
            done += self.fetcher.ready(dict(self.poller.poll(10)), time.monotonic())
        return done

    def close(self) -> None:
        self.fetcher.close()
        self.link.close()
        self.relay.close()
        self.context.term()


def test_a_holder_out_of_reach_is_fetched_from_through_the_relay() -> None:
    payload = bytes(range(256)) * 40_000  # over one chunk: it comes back in several
    world = World({b"a": payload})
    try:
        world.run_until(0, 0.5)  # the link's RelayHello reaches the relay
        started = time.monotonic()
        world.fetcher.fetch(world.holder_address, b"a", started)
        ((object_id, data, timed_out),) = world.run_until(1, FETCH_TIMEOUT_SECONDS + 10)
        assert object_id == b"a" and not timed_out and bytes(data) == payload
        assert time.monotonic() - started >= FETCH_TIMEOUT_SECONDS, "tried directly first"
        assert world.relay.requests == 1 and world.relay.relayed_bytes == len(payload)
        # the address is known to be out of reach now: the next fetch goes through the relay at once
        world.fetcher.fetch(world.holder_address, b"a", time.monotonic())
        ((_, again, _),) = world.run_until(1, 5)
        assert bytes(again) == payload and world.relay.requests == 2
    finally:
        world.close()


def test_what_the_holder_does_not_have_and_holders_the_relay_does_not_know_end_the_fetch() -> None:
    world = World({})
    try:
        world.run_until(0, 0.5)
        world.fetcher.fetch(world.holder_address, b"gone", time.monotonic() - FETCH_TIMEOUT_SECONDS)
        (ended,) = world.run_until(1, 5)
        assert ended == (b"gone", None, False), "the holder answered it does not have it"
        world.fetcher.fetch("tcp://127.0.0.1:9", b"x", time.monotonic() - FETCH_TIMEOUT_SECONDS)
        (unknown,) = world.run_until(1, 5)
        assert unknown == (b"x", None, False), "the relay knows no holder there"
    finally:
        world.close()


def test_garbage_sent_to_the_relay_is_dropped_and_counted() -> None:
    world = World({})
    rogue = world.context.socket(zmq.DEALER)
    try:
        rogue.connect(world.relay_address)
        rogue.send(b"\xff" * 100)
        deadline = time.monotonic() + 5
        while world.relay.malformed == 0 and time.monotonic() < deadline:
            world.relay.serve_once(10)
        assert world.relay.malformed == 1
    finally:
        rogue.close(linger=0)
        world.close()


def test_an_answer_from_a_peer_the_relay_did_not_ask_is_dropped() -> None:
    """Only the holder a request went to answers it: another peer cannot slip bytes to the requester."""
    world = World({b"a": b"genuine" * 1000})
    rogue = world.context.socket(zmq.DEALER)
    try:
        rogue.connect(world.relay_address)
        world.run_until(0, 0.5)
        world.fetcher.fetch(world.holder_address, b"a", time.monotonic() - FETCH_TIMEOUT_SECONDS)
        world.run_until(0, 0.1)  # the fetch goes to the relay; its socket exists from now on
        (requester,) = [sock for sock, _ in world.poller.sockets]
        forged = DataResponse(
            object_id=b"a", found=True, chunk_count=1, total_size=6, reply_to=requester.getsockopt(zmq.ROUTING_ID)
        )
        rogue.send_multipart([encode(forged), b"forged"])
        ((object_id, data, _),) = world.run_until(1, 10)
        assert object_id == b"a" and bytes(data) == b"genuine" * 1000
        assert world.relay.malformed == 1
    finally:
        rogue.close(linger=0)
        world.close()


def test_with_curve_an_address_is_served_by_the_key_that_claimed_it_first() -> None:
    """Another peer the scheduler lets in claims a served holder's address at the relay: refused, and fetches through
    the relay still reach the holder, under the key the scheduler named."""
    scheduler, holder_keys, other_keys, requester_keys = (zmq.curve_keypair() for _ in range(4))
    authorized = frozenset({holder_keys[0], other_keys[0], requester_keys[0]})
    context = zmq.Context()
    relay = Relay(context, "127.0.0.1", 64 * 1024 * 1024, None, CurveServerKeys(*scheduler, authorized))
    relay_address = f"tcp://127.0.0.1:{relay.port}"
    holder_address = free_tcp_address()
    served: List[Tuple[RelayLink, Dict[bytes, bytes]]] = []
    poller = zmq.Poller()
    fetcher = DataFetcher(context, poller, CurvePeerKeys(*requester_keys, scheduler[0]))
    fetcher.relay = relay_address
    done: List[Any] = []

    def turn() -> None:
        relay.serve_once(10)
        for link, held in served:
            if link.sock.poll(0):
                link.serve(held.get)
        done.extend(fetcher.ready(dict(poller.poll(10)), time.monotonic()))

    try:
        for keys, held in ((holder_keys, b"genuine"), (other_keys, b"forged!")):
            link_keys = CurvePeerKeys(*keys, scheduler[0])
            link = RelayLink(context, relay_address, holder_address, 64 * 1024 * 1024, link_keys)
            served.append((link, {b"a": held}))
            wait_for(lambda: turn() or holder_address in relay._holders, 10, "the holder's RelayHello")
        wait_for(lambda: turn() or relay.malformed == 1, 10, "the second claim refused")
        fetcher.fetch(holder_address, b"a", time.monotonic() - FETCH_TIMEOUT_SECONDS, raw_key(holder_keys[0]))
        wait_for(lambda: turn() or bool(done), 10, "the fetch through the relay")
        ((object_id, data, _),) = done
        assert object_id == b"a" and bytes(data) == b"genuine"
    finally:
        fetcher.close()
        for link, _ in served:
            link.close()
        relay.close()
        context.term()


def test_a_relay_link_refused_at_its_handshake_is_made_anew_at_the_next_registration() -> None:
    """ZeroMQ never connects a socket again once its handshake was refused, and takes nothing more on it: a holder
    registering again (a scheduler back, accepting its key now) opens a new link rather than fail saying RelayHello on
    the old one."""
    scheduler, late = zmq.curve_keypair(), zmq.curve_keypair()
    context = zmq.Context()
    relay = Relay(context, "127.0.0.1", 64 * 1024 * 1024, None, CurveServerKeys(*scheduler, frozenset()))
    assert relay.zap is not None  # with CurveZMQ
    relay_address = f"tcp://127.0.0.1:{relay.port}"
    holder_address = free_tcp_address()
    poller = zmq.Poller()
    keys = CurvePeerKeys(*late, scheduler[0])
    link = follow_relay(None, relay_address, context, poller, holder_address, 64 * 1024 * 1024, keys)
    assert link is not None
    try:
        wait_for(lambda: relay.serve_once(10) or relay.zap.refusals == 1, 10, "the refusal")
        until_it_takes_nothing(link.sock)
        relay.zap.authorized_keys = frozenset({late[0]})
        link = follow_relay(link, relay_address, context, poller, holder_address, 64 * 1024 * 1024, keys)
        assert link is not None
        wait_for(lambda: relay.serve_once(10) or holder_address in relay._holders, 10, "the holder's RelayHello")
    finally:
        if link is not None:
            link.close()
        relay.close()
        context.term()


def _curve_router(context: zmq.Context, secret_key: bytes, port: int = 0) -> Tuple[zmq.Socket, int]:
    """A CURVE server ROUTER on 127.0.0.1 (a relay's socket, as the relay makes it), on `port` or a free one."""
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.curve_server = True
    router.curve_secretkey = secret_key
    if not port:
        return router, router.bind_to_random_port("tcp://127.0.0.1")
    wait_for(lambda: _binds(router, f"tcp://127.0.0.1:{port}"), 10, f"port {port} free again")
    return router, port


def test_a_relay_link_refused_with_requests_unread_stops_serving_instead_of_blocking() -> None:
    """Requests the relay passed on before it went away stay readable on the link after a relay back on its port
    refused the holder's key; ZeroMQ takes nothing more on that socket, and answering them must not block the holder's
    loop: the link stops serving (the next registration makes a new one)."""
    scheduler, holder = zmq.curve_keypair(), zmq.curve_keypair()
    context = zmq.Context()
    zap = ZapResponder(context, frozenset({holder[0]}))  # bound first, as the relay binds it
    relay, port = _curve_router(context, scheduler[1])
    link = RelayLink(
        context, f"tcp://127.0.0.1:{port}", "tcp://127.0.0.1:9", 1 << 20, CurvePeerKeys(*holder, scheduler[0])
    )
    server = None
    try:
        wait_for(lambda: zap.answer_pending() or bool(relay.poll(10)), 10, "the link's RelayHello")
        identity, _ = relay.recv_multipart()
        relay.send_multipart([identity, encode(DataRequest(object_ids=[b"o" * 32], reply_to=b"asker"))])
        wait_for(lambda: bool(link.sock.poll(10)), 10, "the request at the link, left unread")
        relay.close(linger=0)
        zap.authorized_keys = frozenset()  # the relay back without the holder's key
        relay, _ = _curve_router(context, scheduler[1], port)
        wait_for(lambda: zap.answer_pending() or zap.refusals == 1, 10, "the link's key refused")
        until_it_takes_nothing(link.sock)
        server = threading.Thread(target=link.serve, args=({b"o" * 32: b"x" * 100}.get,), daemon=True)
        server.start()
        server.join(5)
        assert not server.is_alive(), "a blocking send on a socket that takes nothing waits forever"
    finally:
        if server is None or not server.is_alive():  # else its socket is in use: left to the process's end
            link.close()
            relay.close(linger=0)
            zap.close()
            context.term()


class _FirstPortTaken:
    """Says the first port asked about is to be avoided, as the scheduler's is when the kernel hands it out again."""

    def __init__(self) -> None:
        self.asked: List[int] = []

    def __contains__(self, port: object) -> bool:
        assert isinstance(port, int)
        self.asked.append(port)
        return len(self.asked) == 1


def test_the_relay_binds_again_rather_than_take_a_port_the_scheduler_will_bind() -> None:
    context = zmq.Context()
    avoid = _FirstPortTaken()
    try:
        sock = context.socket(zmq.ROUTER)
        port = bind_avoiding(sock, "tcp://127.0.0.1", avoid)
        assert avoid.asked == [avoid.asked[0], port] and port != avoid.asked[0]
        assert sock.getsockopt(zmq.LAST_ENDPOINT) == f"tcp://127.0.0.1:{port}".encode()
        probe = context.socket(zmq.ROUTER)  # the avoided port is let go (libzmq unbinds in its I/O thread)
        wait_for(lambda: _binds(probe, f"tcp://127.0.0.1:{avoid.asked[0]}"), 10, "the avoided port to be free")
    finally:
        context.destroy(linger=0)


def _binds(sock: zmq.Socket, endpoint: str) -> bool:
    try:
        sock.bind(endpoint)
    except zmq.ZMQError:
        return False
    return True
