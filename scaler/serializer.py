"""Internal: how functions, arguments and results become bytes, and cloudpickle as the default.

The Serializer class is public, as `from scaler import Serializer`.

Shared by the client (which serializes) and the worker's processors (which deserialize), so it belongs to neither.
"""

from __future__ import annotations

import abc
import io
import pickle
import types
from collections import ChainMap
from typing import Any, Type, Union

import cloudpickle


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


class DefaultSerializer(Serializer):
    """cloudpickle, with the highest pickle protocol. Tasks naming no serializer are read with it by workers.

    Functions pickled by value keep the name of the file they were defined in, so their frames in a task's traceback
    name it (cloudpickle 3 alone would write "<dynamic-code>")."""

    @staticmethod
    def serialize(obj: Any) -> bytes:
        if type(obj) in _PLAIN_TYPES:
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return _cloudpickle_dumps(obj)

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        return pickle.loads(payload)


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
