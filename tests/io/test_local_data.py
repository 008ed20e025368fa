"""A holder and a reader on the same host, over real Unix sockets: results handed over as descriptors of the holder's
shared memory, what is not held answered as such, a holder that leaves or speaks nonsense, and a reader on another
host (no such socket here) told to go through the network."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from typing import Any, Dict, List, Optional, Tuple

import pytest
import zmq

from scaler.io.data_fetch import DataFetcher
from scaler.io.local_data import LocalDataReader, LocalDataServer, local_name
from scaler.io.shared_bytes import SharedBytes
from scaler.protocol import DataRequest, encode

pytestmark = pytest.mark.timeout(30)


class Pair:
    """A holder's server and a reader, both polled by one poller here (in real life: two processes)."""

    def __init__(self, held: Dict[bytes, Any]) -> None:
        self.held = held
        self.address = f"tcp://127.0.0.1:{os.getpid()}{time.monotonic_ns() % 100000}"
        self.poller = zmq.Poller()
        self.server = LocalDataServer(self.address, self.poller)
        self.reader = LocalDataReader(self.poller)

    def answers(self, count: int) -> Tuple[List[Tuple[bytes, Optional[SharedBytes]]], Optional[str]]:
        done: List[Tuple[bytes, Optional[SharedBytes]]] = []
        deadline = time.monotonic() + 10
        while len(done) < count and time.monotonic() < deadline:
            events = dict(self.poller.poll(100))
            self.server.on_events(events, self.held.get)
            for fd in self.reader.descriptors():
                if fd in events:
                    answers, gone = self.reader.receive(fd)
                    done.extend(answers)
                    if gone is not None:
                        return done, gone
        return done, None

    def close(self) -> None:
        self.reader.close()
        self.server.close()


def test_a_held_result_is_handed_over_as_its_shared_memory() -> None:
    shared = SharedBytes.create(b"x" * 100_000)
    pair = Pair({b"a": shared, b"b": b"small, not in shared memory"})
    try:
        assert pair.reader.request(pair.address, b"a")
        assert pair.reader.request(pair.address, b"b")
        assert pair.reader.request(pair.address, b"gone")
        answers, gone = pair.answers(3)
        assert gone is None
        by_id = dict(answers)
        assert by_id[b"a"] is not None and by_id[b"a"].fd != shared.fd, "a descriptor of its own"
        assert os.fstat(by_id[b"a"].fd).st_ino == os.fstat(shared.fd).st_ino, "the same memory, not a copy"
        assert bytes(by_id[b"a"].view()) == b"x" * 100_000
        assert bytes(by_id[b"b"].view()) == b"small, not in shared memory"
        assert by_id[b"gone"] is None
        assert pair.server.served == 100_000 + len(b"small, not in shared memory")
    finally:
        pair.close()


def test_a_private_view_is_writable_and_leaves_the_holder_untouched() -> None:
    shared = SharedBytes.create(b"y" * 8192)
    view = shared.private_view()
    view[0:4] = b"mine"
    assert bytes(view[:6]) == b"mineyy"
    assert bytes(shared.view()[:6]) == b"yyyyyy"


def test_a_reader_on_another_host_is_told_to_use_the_network() -> None:
    reader = LocalDataReader(zmq.Poller())
    assert not reader.request("tcp://127.0.0.1:1", b"a"), "nobody serves that name on this host"
    assert reader.descriptors() == []
    reader.close()


def test_a_holder_that_leaves_ends_what_was_asked_of_it() -> None:
    pair = Pair({})
    try:
        assert pair.reader.request(pair.address, b"a")
        pair.server.close()  # without answering: its connections close
        done: List[Any] = []
        gone = None
        deadline = time.monotonic() + 10
        while gone is None and time.monotonic() < deadline:
            events = dict(pair.poller.poll(100))
            for fd in pair.reader.descriptors():
                if fd in events:
                    answers, gone = pair.reader.receive(fd)
                    done.extend(answers)
        assert gone == pair.address and done == []
        assert not pair.reader.request(pair.address, b"b"), "through the network from now on"
    finally:
        pair.reader.close()


def test_a_reader_that_leaves_with_answers_queued_for_it_is_closed_once() -> None:
    """A reader asks for more than its socket takes answers for, then leaves without reading: the holder drops what it
    queued for it and serves others (the agent's loop must not die of it)."""
    shared = SharedBytes.create(b"q" * 100_000)
    pair = Pair({})
    reader = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK)
    try:
        reader.connect(local_name(pair.address))
        pair.server.on_events(dict(pair.poller.poll(1000)), lambda object_id: shared)  # accepted
        queued = 0
        for index in range(10_000):  # until the holder queues what the reader's socket does not take
            try:
                reader.send(encode(DataRequest(object_ids=[index.to_bytes(16, "big")])))
            except BlockingIOError:
                pass
            pair.server.on_events(dict(pair.poller.poll(0)), lambda object_id: shared)
            queued = sum(len(peer.answers) for peer in pair.server._peers.values())
            if queued:
                break
        assert queued, "answers queued for a reader that does not read"
        reader.close()
        pair.server.on_events(dict(pair.poller.poll(1000)), lambda object_id: shared)
        assert not pair.server._peers, "the reader that left is closed"
        pair.held = {b"a": shared}
        assert pair.reader.request(pair.address, b"a"), "another reader is served"
        answers, _ = pair.answers(1)
        assert bytes(answers[0][1].view()) == b"q" * 100_000
    finally:
        reader.close()
        pair.close()


def test_a_malformed_request_closes_that_reader_only() -> None:
    pair = Pair({b"a": SharedBytes.create(b"z" * 1000)})
    rogue = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        rogue.connect(local_name(pair.address))
        rogue.send(b"\xff" * 64)
        rogue.settimeout(10)
        closed_at = time.monotonic() + 10
        while time.monotonic() < closed_at:
            pair.server.on_events(dict(pair.poller.poll(100)), pair.held.get)
            try:
                rogue.setblocking(False)
                if rogue.recv(16) == b"":
                    break
            except BlockingIOError:
                continue
        else:
            pytest.fail("the server kept a reader that sent garbage")
        assert pair.server.malformed == 1
        assert pair.reader.request(pair.address, b"a"), "others are still served"
        answers, _ = pair.answers(1)
        assert bytes(answers[0][1].view()) == b"z" * 1000
    finally:
        rogue.close()
        pair.close()


def fetch_once(fetcher: DataFetcher, poller: zmq.Poller, server: LocalDataServer, held: Any) -> List[Any]:
    """Fetch b"a" from the holder at tcp://127.0.0.1:9 on this host, which holds `held` under it; what ready() says."""
    now = time.monotonic()
    fetcher.fetch("tcp://127.0.0.1:9", b"a", now)
    done: List[Any] = []
    while not done and time.monotonic() < now + 10:
        events = dict(poller.poll(100))
        server.on_events(events, {b"a": held}.get)
        done = fetcher.ready(events, time.monotonic())
    return done


def test_a_fetch_from_a_holder_on_this_host_ends_with_its_shared_memory() -> None:
    context = zmq.Context()
    poller = zmq.Poller()
    shared = SharedBytes.create(b"w" * 70_000)
    server = LocalDataServer("tcp://127.0.0.1:9", poller)  # a data address nobody needs to reach by TCP
    fetcher = DataFetcher(context, poller)
    try:
        ((object_id, payload, timed_out),) = fetch_once(fetcher, poller, server, shared)
        assert object_id == b"a" and not timed_out
        assert type(payload) is SharedBytes and bytes(payload.view()) == b"w" * 70_000
        assert fetcher.next_deadline() is None
    finally:
        fetcher.close()
        server.close()
        context.term()


def test_a_holder_gone_after_its_fetch_is_read_and_no_longer_polled() -> None:
    """With no fetch under way, the poller still reports a holder on this host that closed its end (end of file reads
    as readable): the fetcher says it is its own, and reading it drops the connection, so the poller goes quiet."""
    context = zmq.Context()
    poller = zmq.Poller()
    server = LocalDataServer("tcp://127.0.0.1:9", poller)
    fetcher = DataFetcher(context, poller)
    try:
        assert len(fetch_once(fetcher, poller, server, b"small")) == 1
        assert fetcher.next_deadline() is None
        server.close()  # the holder leaves
        events = dict(poller.poll(1000))
        assert events and fetcher.polled(events), "its end of file is reported, and is the fetcher's"
        assert fetcher.ready(events, time.monotonic()) == []
        assert dict(poller.poll(0)) == {}, "nothing left to report: the loop polling it would not spin"
        assert not fetcher.polled({12345: zmq.POLLIN}), "another descriptor is not the fetcher's"
    finally:
        fetcher.close()
        context.term()


def test_a_reader_gets_a_descriptor_that_cannot_change_the_holders_bytes() -> None:
    """Without CurveZMQ a reader of any user may connect: what it is handed reads, and writing through it fails."""
    pair = Pair({b"a": SharedBytes.create(b"z" * 1000)})
    try:
        assert pair.reader.request(pair.address, b"a")
        ((_, shared),) = pair.answers(1)[0]
        assert shared is not None
        assert fcntl.fcntl(shared.fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
        with pytest.raises(OSError):
            os.pwrite(shared.fd, b"tampered", 0)
        assert bytes(pair.held[b"a"].view()) == b"z" * 1000
        private = shared.private_view()  # its own pages, as readers deserialize
        private[:8] = b"its own!"
        assert bytes(pair.held[b"a"].view()) == b"z" * 1000
        del private, shared
    finally:
        pair.close()


def test_a_holder_that_says_its_file_is_larger_than_it_is_is_left_for_the_network() -> None:
    """A reader maps what it is handed: reading a mapping past the end of its file would kill it (SIGBUS). A holder
    whose answer says more bytes than its file holds is not one the reader understands."""
    short = SharedBytes.create(b"s" * 1000)
    lying = SharedBytes(os.dup(short.fd), 1_000_000)  # says a million bytes; its file holds a thousand
    pair = Pair({b"a": lying})
    try:
        assert pair.reader.request(pair.address, b"a")
        answers, gone = pair.answers(1)
        assert answers == [] and gone == pair.address
        assert not pair.reader.request(pair.address, b"a"), "that holder is read through the network from now on"
    finally:
        pair.close()
