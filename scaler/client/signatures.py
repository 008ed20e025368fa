"""Internal: arguments that cannot bind to a function's signature raise TypeError at submit(), not later on a worker.

`inspect.signature` is slow (tens of microseconds) and `Signature.bind` is a few microseconds, so each function's
signature is looked up once per client, and the common call (positional arguments only, a count the signature
accepts) is checked by comparing the count with two numbers; only other calls go through `bind`. Callables without
a signature (some builtins and C functions) are not checked.
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any, Dict, Optional, Sequence, Union

from scaler.client.caches import put_bounded

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class CallShape:
    """What a function accepts: `fewest <= len(args) <= most` without keywords is a call that binds."""

    __slots__ = ("function", "signature", "fewest", "most")

    def __init__(self, function: Any, signature: inspect.Signature) -> None:
        self.function = function  # keeps it alive: its id() keys the cache
        self.signature = signature
        fewest = most = 0
        for parameter in signature.parameters.values():
            if parameter.kind in _POSITIONAL:
                most += 1
                if parameter.default is inspect.Parameter.empty:
                    fewest += 1
            elif parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                most = sys.maxsize
            elif parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.default is inspect.Parameter.empty:
                fewest = sys.maxsize  # a required keyword-only parameter: a call without keywords never binds
        self.fewest = fewest
        self.most = most

    def check(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> None:
        """TypeError, naming the function and its signature, if fn(*args, **kwargs) would not bind."""
        if not kwargs and self.fewest <= len(args) <= self.most:
            return
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{_name(self.function)}{self.signature}: {error}") from None


class SignatureCache:
    """One CallShape per function, looked up by identity; at most `size` functions are remembered."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._shapes: Dict[Any, Union[CallShape, _Unchecked]] = {}

    def shape(self, fn: Any) -> Optional[CallShape]:
        """fn's CallShape, or None if it has no signature to check against."""
        key = identity_key(fn)
        shapes = self._shapes
        entry = shapes.get(key)
        if entry is not None:
            return entry if type(entry) is CallShape else None
        shape = self._inspect(fn)
        # The entry keeps fn alive (through the shape, or the anchor below), so its id() cannot be reused meanwhile;
        # an evicted one is inspected again if used again.
        put_bounded(shapes, key, shape if shape is not None else _Unchecked(anchor(fn)), self._size)
        return shape

    def check(self, fn: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> None:
        shape = self.shape(fn)
        if shape is not None:
            shape.check(args, kwargs)

    @staticmethod
    def _inspect(fn: Any) -> Optional[CallShape]:
        try:
            signature = inspect.signature(fn)
        except (ValueError, TypeError):  # no signature: builtins without text signatures, some C callables
            return None
        return CallShape(anchor(fn), signature)


class _Unchecked:
    """The cache entry of a function without a signature: it only keeps the function alive."""

    __slots__ = ("function",)

    def __init__(self, function: Any) -> None:
        self.function = function


def identity_key(fn: Any) -> Any:
    """What identifies fn while it is alive. A bound method is a new object at every attribute access: it is keyed
    by its function and instance instead."""
    if type(fn) is types.MethodType:
        return (id(fn.__func__), id(fn.__self__))
    return id(fn)


def anchor(fn: Any) -> Any:
    """What must stay alive for identity_key(fn) to keep naming fn."""
    return (fn.__func__, fn.__self__) if type(fn) is types.MethodType else fn


def _name(fn: Any) -> str:
    if type(fn) is tuple:  # a bound method's anchor
        fn = fn[0]
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__qualname__
