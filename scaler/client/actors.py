"""Internal: actors as the client sees them: `client.actor(cls, ...)` and the handle whose methods return futures.

An actor's creation and each of its method calls are tasks carrying its id (Task.actorId): they go through the same
paths as any task (TaskFactory.submit, the same futures and results), with the functions of scaler/actor_calls.py.
The scheduler places the creation on a worker with a free actor slot and sends every call to that worker in the order
it received them; the worker runs them one at a time in the process it started for the actor.

A handle made by `client.actor` owns the actor: closing it, its being garbage collected, or its client leaving frees
the actor (ActorRelease; the calls sent before still run). A handle passed to a task is borrowed: it calls the same
actor through the task's client, and never frees it.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any, Dict, FrozenSet, Optional, Protocol, Sequence

from scaler.actor_calls import ActorConstructor, ActorMethod
from scaler.client.future import ScalerFuture
from scaler.client.options import TaskOptions
from scaler.errors import ActorLostError, ScalerError


class ActorClient(Protocol):
    """What actors use of a Client (client.py, which imports this module: named here by what it does)."""

    _options: TaskOptions

    def _open_connection(self) -> Any: ...

    def _check_policies(self, connection: Any, options: TaskOptions) -> None: ...

    def _submit_options(
        self, fn: Any, args: Sequence[Any], kwargs: Dict[str, Any], options: TaskOptions
    ) -> ScalerFuture: ...


def create_actor(client: ActorClient, cls: Any, args: tuple, kwargs: Dict[str, Any]) -> ActorHandle:
    """client.actor: submit the actor's creation, return its owning handle at once."""
    if not isinstance(cls, type):
        raise TypeError(f"client.actor takes a class, got {cls!r}")
    check_constructor_arguments(cls, args, kwargs)
    connection = client._open_connection()
    if not connection.actors:
        raise ScalerError(
            f"the scheduler at {connection.address} does not place actors (an older version): upgrade it to use "
            "client.actor"
        )
    actor_id = connection.new_task_id()
    options = client._options.for_actor(actor_id, creates=True)
    client._check_policies(connection, options)
    created = client._submit_options(ActorConstructor(actor_id, cls), args, kwargs, options)
    connection.own_actor(actor_id)
    methods = frozenset(name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name, None)))
    handle = ActorHandle(client, actor_id, cls.__qualname__, methods, created)
    handle._finalizer = weakref.finalize(handle, connection.release_actor, actor_id)
    return handle


def check_constructor_arguments(cls: type, args: tuple, kwargs: Dict[str, Any]) -> None:
    """TypeError, as calling `cls` here would raise, if the arguments do not bind to its constructor."""
    try:
        inspect.signature(cls).bind(*args, **kwargs)
    except TypeError as error:
        raise TypeError(f"{cls.__qualname__}{_signature_text(cls)}: {error}") from None
    except ValueError:
        pass  # no signature to check (a builtin): the constructor says so on the worker


class ActorHandle:
    """An actor: `handle.method(*args, **kwargs)` runs that method on the actor's instance and returns a ScalerFuture.

    Calls from one thread run in the order they were made; calls from several threads (or tasks holding the handle)
    run one at a time, in the order the scheduler received them. A method that raises fails its future, and the actor
    lives on. If the actor is lost (its worker died, its process went past the memory limit, it was closed, its
    constructor raised), pending and later calls fail with ActorLostError. `created` is the future of its creation:
    its result is None, or the constructor's exception.
    """

    def __init__(
        self,
        client: ActorClient,
        actor_id: bytes,
        class_name: str,
        methods: FrozenSet[str],
        created: Optional[ScalerFuture] = None,
    ) -> None:
        self._client = client
        self.actor_id = actor_id
        self.class_name = class_name
        self._methods = methods
        self.created = created  # None for a borrowed handle
        # one function object per method, so that the client's caches of encoded calls find it again; the callers
        # made on each access hold the handle, and nothing the handle holds does: it is freed as soon as unused
        self._functions: Dict[str, ActorMethod] = {}
        self._options: Optional[TaskOptions] = None
        self._finalizer: Optional[weakref.finalize] = None
        self._closed = False

    def __getattr__(self, name: str) -> ActorMethodCaller:
        if name.startswith("_") or name not in self._methods:
            raise AttributeError(f"actor {self.class_name} has no method {name!r}")
        function = self._functions.get(name)
        if function is None:
            function = self._functions[name] = ActorMethod(self.actor_id, name, self.class_name)
        return ActorMethodCaller(self, function)

    def close(self) -> None:
        """Free the actor once the calls made before have run; later calls raise ActorLostError. Only the handle
        client.actor returned frees it; closing a borrowed handle only stops its own calls. Idempotent."""
        self._closed = True
        if self._finalizer is not None:
            self._finalizer()

    def _call(self, function: ActorMethod, args: tuple, kwargs: Dict[str, Any]) -> ScalerFuture:
        if self._closed:
            raise ActorLostError(f"actor {self.class_name} ({self.actor_id.hex()}) was closed")
        options = self._options
        if options is None:  # the same object for every call: the client's encoders of these calls are reused
            options = self._options = self._client._options.for_actor(self.actor_id, creates=False)
        return self._client._submit_options(function, args, kwargs, options)

    def __reduce__(self) -> Any:
        # Borrowed where it lands (a task): it calls the actor, and never frees it.
        return _borrowed, (self._client, self.actor_id, self.class_name, self._methods)

    def __repr__(self) -> str:
        state = " closed" if self._closed else ("" if self.created is not None else " borrowed")
        return f"<ActorHandle {self.class_name} {self.actor_id.hex()}{state}>"


class ActorMethodCaller:
    """`handle.name`: calling it submits the call."""

    __slots__ = ("_handle", "_function")

    def __init__(self, handle: ActorHandle, function: ActorMethod) -> None:
        self._handle = handle
        self._function = function

    def __call__(self, *args: Any, **kwargs: Any) -> ScalerFuture:
        return self._handle._call(self._function, args, kwargs)

    def __repr__(self) -> str:
        return f"<method {self._function.name} of {self._handle!r}>"


def _borrowed(client: ActorClient, actor_id: bytes, class_name: str, methods: FrozenSet[str]) -> ActorHandle:
    return ActorHandle(client, actor_id, class_name, methods)


def _signature_text(cls: Any) -> str:
    try:
        return str(inspect.signature(cls))
    except (TypeError, ValueError):
        return "(...)"
