"""Internal: how functions, arguments and results become bytes, and cloudpickle as the default.

The Serializer class is public, as `from scaler import Serializer`.

Shared by the client (which serializes) and the worker's processors (which deserialize), so it belongs to neither.
"""

from __future__ import annotations

import abc
import io
import os
import pickle
import struct
import types
from collections import ChainMap
from typing import IO, Any, List, Optional, Type, Union

import cloudpickle

from scaler.io.shared_bytes import SharedBytes, shared_fd


class Serializer(abc.ABC):
    """Turns functions, each argument and each result into bytes and back.

    Subclass it with two static methods and pass the class (or an instance) as `Client(serializer=...)`. The serializer
    is cloudpickled and shipped to the workers once, so whatever it imports must be installed on the workers too.
    Exceptions raised by tasks always travel cloudpickled, whatever the serializer.
    """

    @staticmethod
    @abc.abstractmethod
    def serialize(obj: Any) -> bytes:
        """Bytes for a function, an argument or a result."""

    @staticmethod
    @abc.abstractmethod
    def deserialize(payload: bytes) -> Any:
        """The object that `serialize` turned into `payload`."""


# Types the C pickler writes exactly as cloudpickle would, many times faster; anything that may hold a function
# (containers included) goes through cloudpickle, which pickles functions of __main__ by value.
_PLAIN_TYPES = frozenset({int, float, str, bytes, bool, type(None), complex})


_DYNAMIC_CODE = "<dynamic-code>"
_cloudpickle_code_reduce = cloudpickle.Pickler.dispatch_table.get(types.CodeType)  # None: a cloudpickle without one


def _code_reduce(code: types.CodeType) -> Any:
    """cloudpickle's reduction of a code object, with its file name kept. cloudpickle 3 writes "<dynamic-code>"
    instead (so that the bytes do not depend on where a function was defined), which left the tracebacks of tasks
    whose functions travel by value (those of __main__, a notebook, a module registered by value) without a file or
    a source line. The bytes stay the same for the same function from the same file."""
    constructor, args = _cloudpickle_code_reduce(code)
    filename = code.co_filename
    return constructor, tuple(filename if arg.__class__ is str and arg == _DYNAMIC_CODE else arg for arg in args)


class _Pickler(cloudpickle.Pickler):
    dispatch_table = ChainMap(
        {types.CodeType: _code_reduce} if _cloudpickle_code_reduce is not None else {},
        cloudpickle.Pickler.dispatch_table,
    )


def _cloudpickle_dumps(obj: Any) -> bytes:
    """cloudpickle.dumps(obj, HIGHEST_PROTOCOL), code keeping its file name (see _code_reduce)."""
    with io.BytesIO() as file:
        _Pickler(file, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
        return file.getvalue()


# A large result of the default serializer whose pickle has out-of-band buffers (protocol 5: numpy arrays, pandas
# frames) is laid out so that a reader maps the buffers where they are instead of copying them out of the pickle:
#   _BUFFERS_MAGIC, the pickle stream (in-band part), then each buffer at a 64-byte aligned offset, then a table of
#   (offset, length) per buffer, then a trailer (buffer count, length of the pickle stream).
# A pickle never starts with a zero byte (protocol 2 and later start with PROTO, 0x80), so the first byte tells them
# apart. Only workers write it (to shared memory: scaler/worker/processor.py); every reader of the default serializer
# reads both.
_BUFFERS_MAGIC = b"\x00SC5"
_BUFFER_ENTRY = struct.Struct("<QQ")
_BUFFERS_TRAILER = struct.Struct("<QQ")
_BUFFER_ALIGNMENT = 64


def memory_as_pickleable(view: memoryview) -> Any:
    """A memoryview (which pickle refuses; cloudpickle copies it into bytes first) as what pickles to its bytes
    without a copy: read back as bytes, or as a bytearray if it was writable."""
    return pickle.PickleBuffer(view) if view.contiguous else view.tobytes()


def default_loads(payload: Any) -> Any:
    """What the default serializer wrote (bytes-like): a pickle, or one laid out with its buffers (see above). The
    buffers are views of `payload` when it is writable (a private mapping of shared memory): arrays read without a
    copy and stay writable; copied once otherwise (the received frame is read-only), as an in-band pickle would be."""
    if payload[0] != 0:
        return pickle.loads(payload)
    view = memoryview(payload)
    if view[: len(_BUFFERS_MAGIC)] != _BUFFERS_MAGIC:
        return pickle.loads(payload)  # not ours: pickle says why
    end = len(view) - _BUFFERS_TRAILER.size
    count, stream_length = _BUFFERS_TRAILER.unpack_from(view, end)
    table = end - count * _BUFFER_ENTRY.size
    entries = _BUFFER_ENTRY.iter_unpack(view[table:end])
    buffers: List[Any] = [view[offset : offset + length] for offset, length in entries]
    if view.readonly:
        buffers = [bytearray(buffer) for buffer in buffers]
    start = len(_BUFFERS_MAGIC)
    return pickle.loads(view[start : start + stream_length], buffers=buffers)


def dump_with_buffers(value: Any, file: IO[bytes]) -> None:
    """`value` as the default serializer writes it, laid out with its out-of-band buffers (see above; none is fine),
    into `file` from its start, each buffer written once, straight from where it is."""
    buffers: List[pickle.PickleBuffer] = []
    file.write(_BUFFERS_MAGIC)
    _Pickler(file, protocol=5, buffer_callback=buffers.append).dump(value)
    stream_length = file.tell() - len(_BUFFERS_MAGIC)
    raws = [buffer.raw() for buffer in buffers]  # pickle takes contiguous ones only: in place
    entries = []
    position = file.tell()
    for raw in raws:
        padding = -position % _BUFFER_ALIGNMENT
        file.write(bytes(padding))
        position += padding
        entries.append(_BUFFER_ENTRY.pack(position, raw.nbytes))
        file.write(raw)
        position += raw.nbytes
    file.write(b"".join(entries))
    file.write(_BUFFERS_TRAILER.pack(len(raws), stream_length))


_SMALL_TYPES = frozenset({int, float, bool, type(None), complex})


def known_large(value: Any, limit: int) -> bool:
    """A value sure to pickle to more than `limit` bytes, told cheaply (no call for the small types of most values):
    bytes, or anything with an `nbytes` (numpy arrays, pandas series, memoryviews)."""
    kind = type(value)
    if kind in _SMALL_TYPES:
        return False
    if kind is bytes or kind is bytearray:
        return len(value) > limit
    nbytes = getattr(value, "nbytes", None)
    return type(nbytes) is int and nbytes > limit


def dump_to_shared(value: Any, spare: Optional[SharedBytes] = None) -> SharedBytes:
    """The value as the default serializer writes it, straight into shared memory: a large bytes object or array
    buffer is written to the file directly, so it is copied once, not into a bytes object and then again; arrays go
    out of band (dump_with_buffers), so that readers map them instead of copying them out. Into a new file, or into
    `spare`'s (a file no reader maps any more, written over from its start; see worker/spares.py)."""
    fd = spare.take_fd() if spare is not None else shared_fd("scaler-data")
    try:
        if spare is not None:
            os.lseek(fd, 0, os.SEEK_SET)
        with open(fd, "wb", buffering=0, closefd=False) as file:
            if type(value) is bytes or type(value) is memoryview:  # a raw buffer: its bytes, written once
                pickle.dump(memory_as_pickleable(value) if type(value) is memoryview else value, file, protocol=5)
            else:
                dump_with_buffers(value, file)
            size = file.tell()
        if spare is not None:
            os.ftruncate(fd, size)  # what it held past the new bytes goes
    except BaseException:
        os.close(fd)
        raise
    return SharedBytes(fd, size)


class DefaultSerializer(Serializer):
    """cloudpickle, with the highest pickle protocol. Tasks naming no serializer are read with it by workers.

    Functions pickled by value keep the name of the file they were defined in, so their frames in a task's traceback
    name it (cloudpickle 3 alone would write "<dynamic-code>")."""

    @staticmethod
    def serialize(obj: Any) -> bytes:
        if type(obj) in _PLAIN_TYPES:
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return _cloudpickle_dumps(obj)

    deserialize = staticmethod(default_loads)  # itself: a client tells the default serializer by it


SerializerLike = Union[Serializer, Type[Serializer]]  # an instance, or the class: its methods are static


def check_serializer(serializer: Any) -> SerializerLike:
    """The serializer as given, if it can serialize and deserialize; a precise TypeError otherwise."""
    abstract = getattr(serializer, "__abstractmethods__", None)
    if abstract:
        raise TypeError(
            "serializer {!r} does not implement {}: define them as @staticmethod".format(
                serializer, ", ".join(sorted(abstract))
            )
        )
    for method in ("serialize", "deserialize"):
        if not callable(getattr(serializer, method, None)):
            raise TypeError(
                "serializer must be a Serializer subclass or instance with static serialize(obj) -> bytes and "
                f"deserialize(payload) -> object, got {serializer!r}"
            )
    return serializer


def is_default_serializer(serializer: Any) -> bool:
    return serializer is DefaultSerializer or type(serializer) is DefaultSerializer


def load_exception(payload: bytes) -> BaseException:
    """A task's exception: always cloudpickled, whatever the client's serializer."""
    exception = pickle.loads(payload)
    if not isinstance(exception, BaseException):
        raise TypeError(f"the payload of a failed task is a {type(exception).__name__}, not an exception")
    return exception
