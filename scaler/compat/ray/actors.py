"""Internal: `@ray.remote` on a class: `Cls.remote(...)` makes an actor, `actor.method.remote(...)` calls it.

Built on Scaler's native actors: `client.actor(cls, *args, **kwargs)` returns a handle whose methods return
ScalerFutures, `handle.close()` frees the actor, and `scaler.errors.ActorLostError` (RayActorError here) says its
worker died. The native handle takes values, and the scheduler holds no actor call for a dependency, so references
given to an actor are resolved here, as Ray's caller-side dependency resolver does, without the caller waiting:

- a call whose references are all ready, on a handle with nothing queued, is sent at once with their values (nested
  ones, in a list or dict, as references holding their values, as for tasks);
- any other call returns an ObjectRef at once and waits in the handle's queue: it is sent once its references are
  ready and every call made before it was sent (or dropped), so that the calls of a handle keep their order.
  `Cls.remote(...)` with unfinished references returns the handle at once and queues the creation, the calls made
  meanwhile behind it.

Done callbacks of Scaler futures run on the client's IO thread, which must not block or submit: they only start a
thread that drains the queue, under the handle's lock. A call whose reference failed (or was cancelled) fails (or is
cancelled) the same way without being sent, and the calls behind it go on; `ray.kill` fails the queued calls with
ActorDiedError; `ray.cancel` of a queued call drops it. A queued call's ObjectRef wraps a local ScalerFuture, settled
from the native call's future once sent.
"""

from __future__ import annotations

import concurrent.futures
import threading
import uuid
from collections import deque
from typing import Any, Deque, Dict, Optional, Tuple

from scaler.client import ScalerFuture
from scaler.client.actors import check_constructor_arguments
from scaler.compat.ray import session
from scaler.compat.ray.calls import Lifted, fill_slots, lift_refs
from scaler.compat.ray.exceptions import ActorDiedError
from scaler.compat.ray.options import check_options, scaler_policies
from scaler.compat.ray.refs import _NO_VALUE, ObjectRef, failed_future


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
        lifted = lift_refs(args, kwargs)
        if lifted is None or all(ref.ready() for ref in lifted[2]):
            handle = ActorHandle(None, self._cls)
            try:
                args, kwargs = _values(lifted) if lifted is not None else (args, kwargs)
            except BaseException as error:  # a failed reference: the actor dies, as Ray's does
                handle._failure = _died(f"{self._cls.__name__} could not be created", error)
                return handle
            handle._native = client.actor(self._cls, *args, **kwargs)
            return handle
        check_constructor_arguments(self._cls, args, kwargs)  # now, as client.actor does: the creation waits
        handle = ActorHandle(None, self._cls)
        handle._enqueue(_Creation(handle, client, lifted))
        return handle


class ActorHandle:
    """An actor: `actor.method.remote(...)` returns an ObjectRef of the method's result, calls running in order."""

    def __init__(self, native: Any, cls: type) -> None:
        self._native = native  # None until the creation is sent
        self._cls = cls
        self._failure: Optional[ActorDiedError] = None  # killed, or its creation failed: what every call raises
        self._queue: Deque[_Queued] = deque()  # the calls not sent yet, in order; the head is sent first
        self._lock = threading.Lock()  # held while the queue changes or its head is sent

    def __getattr__(self, name: str) -> ActorMethod:
        if name.startswith("__") or not callable(getattr(self._cls, name, None)):
            raise AttributeError(f"{self._cls.__name__} actor has no method {name!r}")
        return ActorMethod(self, name)

    def __repr__(self) -> str:
        return f"Actor({self._cls.__name__})"

    def __reduce__(self) -> Any:
        # Into a task: the native handle borrows the actor there; the queue (and its lock) stays with the caller.
        if self._native is None and self._failure is None:
            raise TypeError(f"{self!r} is not created yet (its arguments wait for references): ray.get a call first")
        return (_borrowed, (self._native, self._cls, self._failure))

    # ---- the queue of calls waiting for their references -------------------------------------------------------------

    def _enqueue(self, queued: _Queued) -> None:
        with self._lock:
            self._queue.append(queued)
            if len(self._queue) == 1:  # the head: nobody else watches it yet
                self._drain_locked()

    def _wake(self, _: Any = None) -> None:
        """A done callback (on the client's IO thread): the sending happens on a thread of its own."""
        threading.Thread(target=self._drain, name="ray-actor-calls", daemon=True).start()

    def _drain(self) -> None:
        with self._lock:
            self._drain_locked()

    def _drain_locked(self) -> None:
        """Send the queue's calls from its head while their references are ready; a call is popped once sent, so a
        call made meanwhile sees a queue and waits behind it."""
        queue = self._queue
        while queue:
            head = queue[0]
            if not head.result.done():  # else cancelled (ray.cancel) or failed (ray.kill): dropped
                if self._failure is not None:
                    _settle(head.result, self._failure)
                else:
                    waiting = head.waiting_for()
                    if waiting is not None:
                        if head.watched is not waiting:
                            head.watched = waiting
                            waiting.add_done_callback(self._wake)
                        return
                    head.send()
            queue.popleft()

    def _kill(self) -> None:
        with self._lock:
            self._failure = ActorDiedError(f"{self._cls.__name__}: the actor was killed (ray.kill)")
            queued = list(self._queue)
            self._queue.clear()
            native = self._native
        for call in queued:
            _settle(call.result, self._failure)
        if native is not None:
            native.close()


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
        actor = self._actor
        if actor._failure is not None:  # as in Ray, the call's reference fails, not the call
            return ObjectRef(failed_future(actor._failure), None, _NO_VALUE, self._name)
        lifted = lift_refs(args, kwargs)
        if not actor._queue:  # nothing sent before is waiting: the call may go now
            if lifted is None:
                return ObjectRef(getattr(actor._native, self._method)(*args, **kwargs), None, _NO_VALUE, self._name)
            if all(ref.ready() for ref in lifted[2]):
                try:
                    args, kwargs = _values(lifted)
                except BaseException as error:  # a failed reference fails this call only
                    return ObjectRef(failed_future(error), None, _NO_VALUE, self._name)
                return ObjectRef(getattr(actor._native, self._method)(*args, **kwargs), None, _NO_VALUE, self._name)
        if lifted is None:
            lifted = (args, kwargs, [])
        call = _Call(actor, self._method, lifted)
        actor._enqueue(call)
        return ObjectRef(call.result, None, _NO_VALUE, self._name)


class _Queued:
    """A creation or a call in a handle's queue: `result` settles as its native future will."""

    def __init__(self, actor: ActorHandle, lifted: Lifted) -> None:
        self.actor = actor
        self.lifted = lifted
        self.result = ScalerFuture(uuid.uuid4().bytes)  # no canceller: cancelling it tells the scheduler nothing
        self.watched: Optional[concurrent.futures.Future] = None  # the future a done callback wakes the queue from
        self.native: Optional[ScalerFuture] = None  # once sent
        self.result.add_done_callback(self._on_done)

    def waiting_for(self) -> Optional[concurrent.futures.Future]:
        """The future of a reference not ready yet, or None once all are (their failures included)."""
        for ref in self.lifted[2]:
            if not ref.ready():  # may send a forgotten dependency again (refs.py): never on the IO thread
                return ref.current_future()
        return None

    def send(self) -> None:
        raise NotImplementedError

    def _on_done(self, result: concurrent.futures.Future) -> None:
        if not result.cancelled():
            return
        native = self.native
        if native is not None:
            native.cancel()
        else:
            self.actor._wake()  # dropped from the queue, which may go on behind it


class _Call(_Queued):
    def __init__(self, actor: ActorHandle, method: str, lifted: Lifted) -> None:
        super().__init__(actor, lifted)
        self.method = method

    def send(self) -> None:
        try:
            args, kwargs = _values(self.lifted)
            native = getattr(self.actor._native, self.method)(*args, **kwargs)
        except BaseException as error:  # a failed or cancelled reference, or the native call refused
            _settle(self.result, error)
            return
        self.native = native
        native.add_done_callback(self._copy)
        if self.result.cancelled():  # cancelled while it was being sent
            native.cancel()

    def _copy(self, native: concurrent.futures.Future) -> None:
        """The native call settled (on the client's IO thread): so does this call's reference."""
        if native.cancelled():
            self.result.cancel()
            return
        error = native.exception()
        _settle(self.result, error, None if error is not None else native.result())


class _Creation(_Queued):
    def __init__(self, actor: ActorHandle, client: Any, lifted: Lifted) -> None:
        super().__init__(actor, lifted)
        self.client = client

    def send(self) -> None:
        actor = self.actor
        try:
            args, kwargs = _values(self.lifted)
            actor._native = self.client.actor(actor._cls, *args, **kwargs)
        except BaseException as error:  # a failed reference, or no actors on this scheduler: the actor dies
            actor._failure = _died(f"{actor._cls.__name__} could not be created", error)
            _settle(self.result, actor._failure)
            return
        _settle(self.result, None, None)


def kill(actor: ActorHandle, *, no_restart: bool = True) -> None:
    """Free the actor (`handle.close()`); its queued and later calls fail with ActorDiedError, a RayActorError."""
    if type(actor) is not ActorHandle:
        raise TypeError(f"kill takes an actor handle, got {type(actor).__name__}")
    actor._kill()


def method(*args: Any, **options: Any) -> Any:
    """`@ray.method(num_returns=1)` on an actor method: accepted, one return value per call as ever."""
    if len(args) == 1 and callable(args[0]) and not options:
        return args[0]
    check_options(options)
    return lambda function: function


def _borrowed(native: Any, cls: type, failure: Optional[ActorDiedError]) -> ActorHandle:
    handle = ActorHandle(native, cls)
    handle._failure = failure
    return handle


def _values(lifted: Lifted) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    """The arguments with their ready references' values: at the top level the values, nested ones as resolved
    references (the task's side of calls.py, done here). Raises what `ray.get` of a failed reference raises."""
    lifted_args, lifted_kwargs, refs = lifted
    if not refs:
        return lifted_args, lifted_kwargs
    values = tuple(ref.get() for ref in refs)
    return tuple(fill_slots(arg, values) for arg in lifted_args), {
        name: fill_slots(arg, values) for name, arg in lifted_kwargs.items()
    }


def _settle(future: ScalerFuture, error: Optional[BaseException], value: Any = None) -> None:
    """Settle `future` with `error` (a cancel for a CancelledError), or else `value`; nothing if it is settled."""
    try:
        if isinstance(error, concurrent.futures.CancelledError):
            future.cancel()
        elif error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
    except concurrent.futures.InvalidStateError:
        pass  # cancelled meanwhile (ray.cancel): the cancel stands


def _died(message: str, cause: BaseException) -> ActorDiedError:
    error = ActorDiedError(f"{message}: {cause}")
    error.__cause__ = cause
    return error
