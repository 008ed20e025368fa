"""Internal: objects a client ships: references, content ids, and the ObjectPut messages that carry them (or say that
the client keeps them)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterator, List, Union, cast

from scaler.config import DEFAULT_INLINE_LIMIT_BYTES
from scaler.io.shared_bytes import SharedBytes, as_buffer
from scaler.protocol import Encoded, ObjectPut, encode

# An item of the client's outgoing queue: a message or an Encoded one (a call's Task, see calls.py), batched with its
# neighbours into one frame; plain bytes already encoded, sent as a frame of their own (graphs that must arrive in one
# frame); a LargeObject, sent in chunks of a frame each; or a run of submitted tasks' bytes (send_queue.py), sent
# joined into frames of their own.
Outgoing = Union[Any, Encoded, bytes, List[bytes], "LargeObject"]

CONTENT_ID_BYTES = 16


@dataclass(frozen=True)
class ObjectReference:
    """What `Client.send_object` returns: pass it as a top-level argument of submit, map or a graph node.

    The worker receives the object itself. A reference nested inside a list, dict or other object is not resolved
    (it arrives as this reference), except in graphs, where lists are evaluated element by element.
    """

    object_id: bytes
    name: str
    size: int  # serialized bytes
    # the identity of the connection that sent it, so that using it after that connection's clear() raises at once
    owner: bytes = field(default=b"", compare=False, repr=False)

    def __repr__(self) -> str:
        return f"ObjectReference(name={self.name!r}, object_id={self.object_id.hex()}, size={self.size})"


class ContentIds:
    """Object ids derived from an object's bytes, keyed per client: identical bytes share an id, clients never do."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def of(self, payload: Any) -> bytes:
        """The id of `payload`: bytes, or SharedBytes (read through a mapping dropped at once: served on this host by
        its descriptor, it needs no other)."""
        if type(payload) is SharedBytes:
            with payload.mapped_once() as data:
                return hashlib.blake2b(data, digest_size=CONTENT_ID_BYTES, key=self._key).digest()
        return hashlib.blake2b(payload, digest_size=CONTENT_ID_BYTES, key=self._key).digest()


class LargeObject:
    """An object above the inline limit, as an item of the outgoing queue. To a scheduler that lets clients keep their
    objects (HelloReply.holdsOnClients), the IO thread puts only its size and serves its bytes at the client's data
    address (io_thread.py); to another, it sends it as ObjectPut chunks under the scheduler's frame limit
    (HelloReply.maxFrameBytes), one frame each. Decided when sent, not when queued, so that a resubmission to another
    scheduler follows that one. `upload`: the bytes of an object the client keeps, asked for by the scheduler to
    relay to a peer that cannot fetch it here: always sent whole."""

    __slots__ = ("object_id", "kind", "name", "payload", "upload")

    def __init__(self, object_id: bytes, kind: int, name: str, payload: Any, upload: bool = False) -> None:
        self.object_id = object_id
        self.kind = kind
        self.name = name
        self.payload = payload  # bytes, or SharedBytes once kept and served
        self.upload = upload

    def shared(self) -> SharedBytes:
        """Its bytes in shared memory, copied there once (and the bytes let go): readers on this host map them."""
        if type(self.payload) is not SharedBytes:
            self.payload = SharedBytes.create(self.payload)
        return self.payload

    def frames(self, chunk_bytes: int) -> Iterator[bytes]:
        payload = as_buffer(self.payload)
        total = len(payload)
        count = max(1, -(-total // chunk_bytes))
        view = memoryview(payload)
        for index in range(count):
            yield encode(
                ObjectPut(
                    object_id=self.object_id,
                    kind=self.kind,
                    name=self.name,
                    # a view, not a copy: the encoder reads any buffer
                    payload=cast(bytes, view[index * chunk_bytes : (index + 1) * chunk_bytes])
                    if count > 1
                    else payload,
                    chunk_index=index,
                    chunk_count=count,
                    total_size=total,
                )
            )

    def kept(self) -> bytes:
        """The ObjectPut saying the client keeps it: its size, not its bytes."""
        return encode(
            ObjectPut(
                object_id=self.object_id,
                kind=self.kind,
                name=self.name,
                chunk_count=0,
                total_size=len(self.payload),
                held_by_sender=True,
            )
        )


def object_puts(object_id: bytes, kind: int, name: str, payload: bytes) -> List[Outgoing]:
    """What to queue for one object: an ObjectPut to batch with its neighbours, or a large one to send in chunks."""
    total = len(payload)
    if total <= DEFAULT_INLINE_LIMIT_BYTES:
        return [ObjectPut(object_id=object_id, kind=kind, name=name, payload=payload, total_size=total)]
    return [LargeObject(object_id, kind, name, payload)]


def qualified_name(function: Any) -> str:
    """The name a function's ObjectPut carries, for the monitor's per-function counts."""
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None)
    if isinstance(name, str):
        return name
    inner = getattr(function, "func", None)  # functools.partial
    if inner is not None and inner is not function:
        return f"partial({qualified_name(inner)})"
    return type(function).__qualname__
