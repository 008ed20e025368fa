"""Internal: `@ray.remote` on a class: `Cls.remote(...)` makes an actor, `actor.method.remote(...)` calls it.

Built on Scaler's native actors: `client.actor(cls, *args, **kwargs)` returns a handle whose methods return
ScalerFutures, `handle.close()` frees the actor, and `scaler.errors.ActorLostError` (RayActorError here) says its
worker died. References given to an actor are resolved here, by the caller, before the call is sent (the native
handle takes values), nested ones (in a list or dict) as references holding their values, as for tasks.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

from scaler.client import ScalerFuture
from scaler.compat.ray import session
from scaler.compat.ray.calls import fill_slots, lift_refs
from scaler.compat.ray.exceptions import ActorDiedError
from scaler.compat.ray.options import check_options, scaler_policies
from scaler.compat.ray.refs import _NO_VALUE, ObjectRef


class ActorClass:
    """A class made remote: `.remote(*args, **kwargs)` starts an actor, `.options(...)` gives a copy with other
    options."""

    def __init__(self, cls: type, options: Dict[str, Any]) -> None:
        self._cls = cls
        self._options = check_options(options)
        self._policies = scaler_policies(self._options)
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__doc__ = cls.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = self._cls.__name__
        raise TypeError(f"actors cannot be made directly: instead of {name}(), call {name}.remote()")

    def __repr__(self) -> str:
        return f"<ActorClass {self._cls.__qualname__}>"

    def options(self, **options: Any) -> ActorClass:
        return ActorClass(self._cls, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        client = session.current().client
        if self._policies:
            client = client.options(**self._policies)
        args, kwargs = _values(args, kwargs)
        native = client.actor(self._cls, *args, **kwargs)
        return ActorHandle(native, self._cls)


class ActorHandle:
    """An actor: `actor.method.remote(...)` returns an ObjectRef of the method's result, calls running in order."""

    def __init__(self, native: Any, cls: type) -> None:
        self._native = native
        self._cls = cls
        self._killed = False

    def __getattr__(self, name: str) -> ActorMethod:
        if name.startswith("__") or not callable(getattr(self._cls, name, None)):
            raise AttributeError(f"{self._cls.__name__} actor has no method {name!r}")
        return ActorMethod(self, name)

    def __repr__(self) -> str:
        return f"Actor({self._cls.__name__})"


class ActorMethod:
    def __init__(self, actor: ActorHandle, name: str) -> None:
        self._actor = actor
        self._method = name
        self._name = f"{actor._cls.__name__}.{name}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"actor methods cannot be called directly: instead of {self._name}(), call .remote()")

    def options(self, **options: Any) -> ActorMethod:
        check_options(options)
        return self

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        if self._actor._killed:  # as in Ray, the call's reference fails, not the call
            future = ScalerFuture(b"")
            future.set_exception(ActorDiedError(f"{self._name}: the actor was killed (ray.kill)"))
            return ObjectRef(future, None, _NO_VALUE, self._name)
        args, kwargs = _values(args, kwargs)
        call = getattr(self._actor._native, self._method)
        return ObjectRef(call(*args, **kwargs), None, _NO_VALUE, self._name)


def kill(actor: ActorHandle, *, no_restart: bool = True) -> None:
    """Free the actor (`handle.close()`); later calls of its methods fail with ActorDiedError, a RayActorError."""
    if type(actor) is not ActorHandle:
        raise TypeError(f"kill takes an actor handle, got {type(actor).__name__}")
    actor._killed = True
    actor._native.close()


def method(*args: Any, **options: Any) -> Any:
    """`@ray.method(num_returns=1)` on an actor method: accepted, one return value per call as ever."""
    if len(args) == 1 and callable(args[0]) and not options:
        return args[0]
    check_options(options)
    return lambda function: function


def _values(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    """The arguments with their references' values: at the top level the values, nested ones as resolved
    references (the task's side of calls.py, done here)."""
    lifted = lift_refs(args, kwargs)
    if lifted is None:
        return args, kwargs
    lifted_args, lifted_kwargs, refs = lifted
    values = tuple(ref.get() for ref in refs)
    return tuple(fill_slots(arg, values) for arg in lifted_args), {
        name: fill_slots(arg, values) for name, arg in lifted_kwargs.items()
    }
