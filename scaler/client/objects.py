"""Objects a client ships to the scheduler: references, content ids, and the ObjectPut messages that carry them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, List, Union

from scaler.config import DEFAULT_INLINE_LIMIT_BYTES, DEFAULT_OBJECT_CHUNK_BYTES
from scaler.protocol import Encoded, ObjectPut, encode

# An item of the client's outgoing queue: a message or an Encoded one (a call's Task, see calls.py), batched with its
# neighbours into one frame; plain bytes already encoded, sent as a frame of their own (large objects, graphs that
# must arrive in one frame); or a run of submitted tasks' bytes (send_queue.py), sent joined into frames of their own.
Outgoing = Union[Any, Encoded, bytes, List[bytes]]

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

    def of(self, payload: bytes) -> bytes:
        return hashlib.blake2b(payload, digest_size=CONTENT_ID_BYTES, key=self._key).digest()


def object_puts(object_id: bytes, kind: int, name: str, payload: bytes) -> List[Outgoing]:
    """The ObjectPut messages for one object, chunked; a large chunk is encoded now so it travels as its own frame."""
    total = len(payload)
    if total <= DEFAULT_INLINE_LIMIT_BYTES:
        return [ObjectPut(object_id=object_id, kind=kind, name=name, payload=payload, total_size=total)]
    chunk_bytes = DEFAULT_OBJECT_CHUNK_BYTES
    count = max(1, -(-total // chunk_bytes))
    view = memoryview(payload)
    return [
        encode(
            ObjectPut(
                object_id=object_id,
                kind=kind,
                name=name,
                payload=bytes(view[index * chunk_bytes : (index + 1) * chunk_bytes]) if count > 1 else payload,
                chunk_index=index,
                chunk_count=count,
                total_size=total,
            )
        )
        for index in range(count)
    ]


def qualified_name(function: Any) -> str:
    """The name a function's ObjectPut carries, for the monitor's per-function counts."""
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None)
    if isinstance(name, str):
        return name
    inner = getattr(function, "func", None)  # functools.partial
    if inner is not None and inner is not function:
        return f"partial({qualified_name(inner)})"
    return type(function).__qualname__
