"""Internal: fetches of results from the workers that hold them (their data addresses), by clients (on their IO
thread) and by workers (their agent's loop), for the graph nodes they run.

The scheduler says where a held result is (ObjectResponse.holderAddress); the peer asks that worker directly
(DataRequest on a DEALER of its own per worker) and gets the bytes in chunks, each the payload part of a two-part
DataResponse message, so they never pass through the scheduler. A fetch that hears nothing for FETCH_TIMEOUT_SECONDS
is given up (a worker this peer cannot reach: another network, a firewall): the caller then asks the scheduler to
relay the result, and later results held at that address are asked for through the scheduler at once, for
UNREACHABLE_SECONDS.

A holder on this host is asked through its local socket instead (scaler/io/local_data.py), and answers with the
descriptor of the shared memory holding the result: the fetch ends with a SharedBytes, mapped, not copied.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

import zmq

from scaler.io.local_data import LocalDataReader
from scaler.protocol import DataRequest, DataResponse, ProtocolError, decode_frame, encode

FETCH_TIMEOUT_SECONDS = 5.0
UNREACHABLE_SECONDS = 60.0


class _Fetch:
    __slots__ = ("address", "local", "deadline", "chunks", "chunk_count")

    def __init__(self, address: str, local: bool, deadline: float) -> None:
        self.address = address
        self.local = local  # asked through the holder's local socket
        self.deadline = deadline  # pushed back by each chunk: a large result may take a while, as long as it flows
        self.chunks: Dict[int, Any] = {}  # views of ZeroMQ's messages
        self.chunk_count = 0


class DataFetcher:
    def __init__(self, context: zmq.Context, poller: zmq.Poller) -> None:
        self._context = context
        self._poller = poller
        self._sockets: Dict[str, zmq.Socket] = {}  # by data address
        self._fetches: Dict[bytes, _Fetch] = {}  # by object id
        self._unreachable: Dict[str, float] = {}  # address -> until when it is not tried
        self._local = LocalDataReader(poller)

    def reachable(self, address: str, now: float) -> bool:
        until = self._unreachable.get(address)
        if until is None:
            return True
        if now < until:
            return False
        del self._unreachable[address]
        return True

    def fetch(self, address: str, object_id: bytes, now: float) -> None:
        if self._local.request(address, object_id):
            self._fetches[object_id] = _Fetch(address, True, now + FETCH_TIMEOUT_SECONDS)
            return
        sock = self._sockets.get(address)
        if sock is None:
            sock = self._context.socket(zmq.DEALER)
            sock.setsockopt(zmq.ROUTING_ID, os.urandom(8))
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, 0)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.connect(address)
            self._poller.register(sock, zmq.POLLIN)
            self._sockets[address] = sock
        self._fetches[object_id] = _Fetch(address, False, now + FETCH_TIMEOUT_SECONDS)
        sock.send(encode(DataRequest(object_ids=[object_id])), zmq.NOBLOCK)

    def next_deadline(self) -> Optional[float]:
        return min((fetch.deadline for fetch in self._fetches.values()), default=None)

    def ready(self, events: Dict[Any, int], now: float) -> List[Tuple[bytes, Any, bool]]:
        """(object id, its bytes, whether it timed out) for each fetch that ended, given what the poller said: the
        bytes are a SharedBytes from a holder on this host, bytes-like from another, None if the holder did not
        have it, is gone, or said nothing for FETCH_TIMEOUT_SECONDS."""
        done: List[Tuple[bytes, Any, bool]] = []
        for sock in self._sockets.values():
            if sock in events:
                done.extend((object_id, payload, False) for object_id, payload in self._receive(sock, now))
        for fd in self._local.descriptors():
            if fd in events:
                answers, gone = self._local.receive(fd)
                for object_id, shared in answers:
                    if self._fetches.pop(object_id, None) is not None:
                        done.append((object_id, shared, False))
                if gone is not None:  # the holder closed the connection: what it was asked is not coming
                    lost = [key for key, fetch in self._fetches.items() if fetch.local and fetch.address == gone]
                    for object_id in lost:
                        del self._fetches[object_id]
                        done.append((object_id, None, False))
        done.extend((object_id, None, True) for object_id in self._expired(now))
        return done

    def _receive(self, sock: zmq.Socket, now: float) -> List[Tuple[bytes, Any]]:
        """(object id, its bytes, or None if the holder does not have it) for each fetch that ended."""
        done: List[Tuple[bytes, Any]] = []
        while True:
            try:
                parts = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return done
            try:
                (response,) = decode_frame(parts[0].bytes)
            except (ProtocolError, ValueError):
                continue  # not ours to understand: dropped, the fetch times out if it was its answer
            if type(response) is not DataResponse:
                continue
            fetch = self._fetches.get(response.object_id)
            if fetch is None:
                continue  # given up already
            if not response.found or len(parts) != 2:
                del self._fetches[response.object_id]
                done.append((response.object_id, None))
                continue
            fetch.chunks[response.chunk_index] = parts[1].buffer  # a view of ZeroMQ's message: no copy
            fetch.chunk_count = response.chunk_count
            fetch.deadline = now + FETCH_TIMEOUT_SECONDS
            if len(fetch.chunks) < fetch.chunk_count:
                continue
            del self._fetches[response.object_id]
            chunks = fetch.chunks
            # joined into a bytearray: writable, so that arrays read from it out of band need no copy of their own
            payload = chunks[0] if fetch.chunk_count == 1 else bytearray().join(chunks[i] for i in range(len(chunks)))
            done.append((response.object_id, payload))  # bytes-like: a memoryview when it came in one chunk

    def _expired(self, now: float) -> List[bytes]:
        """The fetches that heard nothing for FETCH_TIMEOUT_SECONDS, given up; their addresses are not tried for a
        while."""
        late = [object_id for object_id, fetch in self._fetches.items() if fetch.deadline <= now]
        for object_id in late:
            fetch = self._fetches.pop(object_id)
            self._unreachable[fetch.address] = now + UNREACHABLE_SECONDS
        return late

    def forget(self) -> List[bytes]:
        """Every fetch under way, given up (the scheduler was lost: what it said about holders may be stale)."""
        pending = list(self._fetches)
        self._fetches.clear()
        return pending

    def close(self) -> None:
        self._local.close()
        for sock in self._sockets.values():
            self._poller.unregister(sock)
            sock.close(linger=0)
        self._sockets.clear()
