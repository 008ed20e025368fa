"""Internal: `@ray.remote` on a function: `f.remote(...)` submits a task and returns an ObjectRef."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Dict, Optional

from scaler.client import Client
from scaler.compat.ray import session
from scaler.compat.ray.calls import CallWithRefs, lift_refs
from scaler.compat.ray.dependencies import submit_call
from scaler.compat.ray.options import check_options, scaler_policies
from scaler.compat.ray.refs import _NO_VALUE, ObjectRef

_MAY_HOLD_REFS = frozenset({ObjectRef, list, tuple, dict})


class RemoteFunction:
    """A function made remote: `.remote(*args, **kwargs)` runs it on a worker; `.options(...)` gives a copy with
    other options (see the docs' options table for how each maps onto Scaler's task policies)."""

    def __init__(self, function: Any, options: Dict[str, Any]) -> None:
        if not callable(function):
            raise TypeError(f"ray.remote takes a function or a class, got {function!r}")
        self._function = function
        self._options = check_options(options)
        self._policies = scaler_policies(self._options)
        self._name = str(getattr(function, "__qualname__", None) or getattr(function, "__name__", "task"))
        self._with_refs = CallWithRefs(function)
        self._signature: Optional[inspect.Signature] = None
        self._client: Optional[Client] = None  # the session's client, or a view of it with these options
        self._generation = -1  # the session _client belongs to
        functools.update_wrapper(self, function, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"remote functions cannot be called directly: instead of {self._name}(), call {self._name}.remote()"
        )

    def __repr__(self) -> str:
        return f"<RemoteFunction {self._name}>"

    def options(self, **options: Any) -> RemoteFunction:
        return RemoteFunction(self._function, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        client = self._client
        current = session._session  # read directly: this is the hot path of every task
        if current is None or current.generation != self._generation:
            client = self._client_of(session.current())
        assert client is not None
        # Most calls pass plain values: one type test per argument tells, before any list or dict is looked into.
        plain = "profiling" not in kwargs  # submit would take a `profiling` keyword for itself
        for arg in args:
            if type(arg) in _MAY_HOLD_REFS:
                plain = False
                break
        if plain and kwargs:
            plain = not any(type(arg) in _MAY_HOLD_REFS for arg in kwargs.values())
        if plain:  # what client.submit does, without packing the arguments again
            future = client._submit(self._function, args, kwargs, client._profiling)
            return ObjectRef(future, None, _NO_VALUE, self._name)
        lifted = lift_refs(args, kwargs)
        if lifted is None and "profiling" not in kwargs:
            return ObjectRef(client.submit(self._function, *args, **kwargs), None, _NO_VALUE, self._name)
        self._check_binds(args, kwargs)  # as submit does, before anything is sent
        return submit_call(client, self._with_refs, lifted or (args, kwargs, []), self._name)

    def _client_of(self, current: Any) -> Client:
        client = current.client.options(**self._policies) if self._policies else current.client
        self._client, self._generation = client, current.generation
        return client

    def _check_binds(self, args: Any, kwargs: Any) -> None:
        if self._signature is None:
            try:
                self._signature = inspect.signature(self._function)
            except (TypeError, ValueError):  # builtins without one: their own call will say
                return
        self._signature.bind(*args, **kwargs)
