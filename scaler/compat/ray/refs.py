"""Internal: ObjectRef, what remote calls and `put` return: a Scaler future, or an object sent with send_object.

A reference is also what a task receives for a reference nested in a list or dict argument (calls.py): one resolved
on its worker, holding its value, so that `ray.get` inside the task returns at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any, Callable, Generator, Optional

from scaler.client import ObjectReference, ScalerFuture
from scaler.compat.ray.exceptions import GetTimeoutError
from scaler.compat.ray.failures import ray_error
from scaler.errors import TaskNotFoundError

_NO_VALUE: Any = object()
_RESUBMITTING = threading.RLock()  # rare (see current_future), and a resend may resend the calls it depends on


class ObjectRef:
    """A reference to the result of a remote call, or to an object `put` sent: pass it to remote calls, or `get` it.

    As in Ray, a reference given as an argument of a remote call (or inside a list or dict argument) is resolved on
    the worker: the call waits for the task that makes it, and never for the caller."""

    __slots__ = ("_future", "_object", "_value", "_function_name", "_resubmit", "__weakref__")

    def __init__(
        self,
        future: Optional[ScalerFuture] = None,
        reference: Optional[ObjectReference] = None,
        value: Any = _NO_VALUE,
        function_name: str = "",
        resubmit: Optional[Callable[[], ScalerFuture]] = None,
    ) -> None:
        self._future = future
        self._object = reference
        self._value = value  # known here: what put() sent, or a reference resolved on a worker
        self._function_name = function_name
        # A call that named unfinished tasks makes them again if one of them finished before the scheduler saw the
        # call (the scheduler forgets a result nobody was waiting for): see current_future().
        self._resubmit = resubmit

    def hex(self) -> str:
        if self._future is not None:
            return self._future.task_id.hex()
        if self._object is not None:
            return self._object.object_id.hex()
        return ""

    def __repr__(self) -> str:
        return f"ObjectRef({self.hex() or 'resolved'})"

    # ---- state -------------------------------------------------------------------------------------------------------

    def current_future(self) -> Optional[ScalerFuture]:
        """The future of the task that makes the value (None for a put or resolved reference). A call that named a
        task finished and forgotten by the scheduler before the call reached it is sent again, with the values (see
        dependencies.py): the scheduler answered it TaskNotFoundError without running it."""
        future = self._future
        if future is not None and self._resubmit is not None and _forgotten_dependency(future):
            with _RESUBMITTING:  # once, whichever threads ask
                future = self._future
                while future is not None and self._resubmit is not None and _forgotten_dependency(future):
                    future = self._future = self._resubmit()
        return future

    def ready(self) -> bool:
        """Whether get() would return (or raise) at once."""
        if self._value is not _NO_VALUE or self._future is None:
            return True
        future = self.current_future()
        return future is None or future.done()

    def get(self, deadline: Optional[float] = None) -> Any:
        """The value, waiting until `deadline` (time.monotonic(); None: no limit): GetTimeoutError after it, the
        task's failure under its Ray name (failures.py)."""
        future = self._future
        if future is not None and deadline is None and self._resubmit is None:
            try:
                return future.result()  # the common case, in one call; a task's failure takes the way below
            except BaseException:
                if not future.done():
                    raise  # interrupted while waiting (KeyboardInterrupt): not the task's
        if self._value is not _NO_VALUE:
            return self._value
        future = self.current_future()
        if future is None:
            return self._value
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return future.result(timeout)
            except BaseException as error:
                if not future.done():
                    if isinstance(error, concurrent.futures.TimeoutError):
                        raise GetTimeoutError(f"{self!r} was not ready within the timeout") from None
                    raise  # KeyboardInterrupt while waiting
                failure: BaseException = error
            if self._resubmit is not None and _forgotten_dependency(future):
                future = self.current_future()
                assert future is not None
                continue
            translated = ray_error(failure, self._function_name)
            if translated is failure:
                raise translated
            raise translated from translated.__cause__

    # ---- pickling: references nested deeper than remote calls lift them ----------------------------------------------

    def __reduce__(self) -> Any:
        if self._value is not _NO_VALUE:
            return (_resolved, (self._value,))
        future = self._future
        if future is not None and future.done() and not future.cancelled() and future.exception() is None:
            return (_resolved, (future.result(),))
        raise TypeError(
            f"{self!r} is not finished: a remote call resolves references given as its arguments, or inside a list "
            "or dict argument; anywhere else, ray.get it first (or pass the list it is in as an argument)"
        )

    # ---- futures -----------------------------------------------------------------------------------------------------

    def future(self) -> concurrent.futures.Future:
        """A concurrent.futures.Future of the value, whose exception is what get() would raise."""
        result: concurrent.futures.Future = concurrent.futures.Future()
        future = self.current_future()
        if future is None:
            result.set_result(self._value)
            return result

        def settle() -> None:
            try:
                result.set_result(self.get())
            except BaseException as error:
                result.set_exception(error)

        def on_done(done: concurrent.futures.Future) -> None:
            if self._resubmit is not None and _forgotten_dependency(done):
                # sending the call again waits for its dependencies: not on the client's IO thread, which runs this
                threading.Thread(target=settle, daemon=True).start()
            else:
                settle()

        future.add_done_callback(on_done)
        return result

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self.future()).__await__()


def _resolved(value: Any) -> ObjectRef:
    return ObjectRef(value=value)


def resolved(value: Any) -> ObjectRef:
    """A reference whose value is known here: what a task receives for a reference nested in an argument."""
    return ObjectRef(value=value)


def failed_future(error: BaseException) -> ScalerFuture:
    """A future already failed with `error`: the outcome of a call that was never sent."""
    future = ScalerFuture(b"")
    future.set_exception(error)
    return future


def _forgotten_dependency(future: concurrent.futures.Future) -> bool:
    if not future.done() or future.cancelled():
        return False
    return isinstance(future.exception(), TaskNotFoundError)
