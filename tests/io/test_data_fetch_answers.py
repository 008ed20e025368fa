"""A holder's answers that break the protocol end that one fetch as failed (the fetcher then asks elsewhere); they
never raise in the fetcher, which runs in a worker agent's loop or a client's IO thread. Real sockets: a ROUTER plays
the holder."""

from __future__ import annotations

import time
from typing import Any, Iterator, List, Tuple

import pytest
import zmq

from scaler.io.data_fetch import DataFetcher
from scaler.protocol import DataResponse, encode

pytestmark = pytest.mark.timeout(30)

OBJECT_ID = b"x" * 16


@pytest.fixture
def holder_and_fetcher() -> Iterator[Tuple[zmq.Socket, str, DataFetcher, zmq.Poller]]:
    context = zmq.Context()
    poller = zmq.Poller()
    holder = context.socket(zmq.ROUTER)
    address = f"tcp://127.0.0.1:{holder.bind_to_random_port('tcp://127.0.0.1')}"
    fetcher = DataFetcher(context, poller)
    try:
        yield holder, address, fetcher, poller
    finally:
        fetcher.close()
        holder.close(linger=0)
        context.term()


def _fetch_answered(
    holder_and_fetcher: Tuple[zmq.Socket, str, DataFetcher, zmq.Poller], chunks: List[Tuple[int, int, int, bytes]]
) -> List[Tuple[bytes, Any, bool]]:
    """Fetch OBJECT_ID; the holder answers each (index, count, total size, bytes); what the fetch ended with."""
    holder, address, fetcher, poller = holder_and_fetcher
    fetcher.fetch(address, OBJECT_ID, time.monotonic())
    peer, _ = holder.recv_multipart()
    for index, count, total, payload in chunks:
        header = DataResponse(object_id=OBJECT_ID, found=True, chunk_index=index, chunk_count=count, total_size=total)
        holder.send_multipart([peer, encode(header), payload])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done = fetcher.ready(dict(poller.poll(50)), time.monotonic())
        if done:
            return [(object_id, None if payload is None else bytes(payload), late) for object_id, payload, late in done]
    raise AssertionError("the fetch never ended")


def test_whole_chunks_in_any_order_make_the_result(holder_and_fetcher: Any) -> None:
    answered = _fetch_answered(holder_and_fetcher, [(1, 2, 8, b"5678"), (0, 2, 8, b"1234")])
    assert answered == [(OBJECT_ID, b"12345678", False)]


def test_a_chunk_index_past_the_count_fails_the_fetch(holder_and_fetcher: Any) -> None:
    assert _fetch_answered(holder_and_fetcher, [(0, 2, 8, b"1234"), (2, 2, 8, b"5678")]) == [(OBJECT_ID, None, False)]


def test_chunks_that_disagree_on_their_count_fail_the_fetch(holder_and_fetcher: Any) -> None:
    assert _fetch_answered(holder_and_fetcher, [(0, 3, 8, b"1234"), (1, 2, 8, b"5678")]) == [(OBJECT_ID, None, False)]


def test_bytes_short_of_the_size_the_holder_said_fail_the_fetch(holder_and_fetcher: Any) -> None:
    assert _fetch_answered(holder_and_fetcher, [(0, 1, 1_000_000, b"abcd")]) == [(OBJECT_ID, None, False)]


def test_an_answer_from_a_holder_that_was_not_asked_is_ignored(holder_and_fetcher: Any) -> None:
    holder, address, fetcher, poller = holder_and_fetcher
    other = holder.context.socket(zmq.ROUTER)
    try:
        other_address = f"tcp://127.0.0.1:{other.bind_to_random_port('tcp://127.0.0.1')}"
        fetcher.fetch(other_address, b"y" * 16, time.monotonic())  # a socket to it, asked for something else
        peer, _ = other.recv_multipart()
        forged = DataResponse(object_id=OBJECT_ID, found=True, chunk_index=0, chunk_count=1, total_size=6)
        other.send_multipart([peer, encode(forged), b"forged"])
        assert _fetch_answered(holder_and_fetcher, [(0, 1, 4, b"real")]) == [(OBJECT_ID, b"real", False)]
    finally:
        other.close(linger=0)
