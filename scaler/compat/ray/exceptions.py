"""Ray's exception names (`ray.exceptions`) for code run through `scaler.compat.ray`.

Each is a subclass of a Scaler error (scaler.errors), so code that catches either name works: a task's own exception
reaches `ray.get` as a `RayTaskError` that is also an instance of the exception's class, as in Ray.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Dict, Optional

from scaler.errors import (
    ActorLostError,
    MemoryLimitError,
    MissingObjectError,
    ProcessorDiedError,
    ScalerError,
    WorkerDiedError,
)

__all__ = [
    "RayError",
    "RayTaskError",
    "GetTimeoutError",
    "TaskCancelledError",
    "RayActorError",
    "ActorDiedError",
    "ObjectLostError",
    "WorkerCrashedError",
    "OutOfMemoryError",
    "RaySystemError",
]


class RayError(ScalerError):
    """Base class of the Ray-named errors."""


class RayTaskError(RayError):
    """A task raised: `cause` is its exception (with the worker's traceback as its `__cause__`), `function_name`
    the task's function. `ray.get` raises `as_instanceof_cause()`, an instance of both this class and the cause's."""

    def __init__(self, function_name: str, traceback_str: str, cause: BaseException) -> None:
        Exception.__init__(self, function_name, traceback_str, cause)
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause

    def __str__(self) -> str:
        return f"{self.function_name} raised {type(self.cause).__name__}: {self.cause}"

    def __reduce__(self) -> Any:
        return (RayTaskError, (self.function_name, self.traceback_str, self.cause))

    def as_instanceof_cause(self) -> RayTaskError:
        """This error as an instance of a class deriving from both RayTaskError and the cause's class, so that
        `except ValueError` catches a task's ValueError; itself where no such class can be made."""
        cause_class = type(self.cause)
        if issubclass(RayTaskError, cause_class):
            return self  # Exception, BaseException: already one
        dual = _dual_class(cause_class)
        if dual is None:
            return self
        error = dual(self.function_name, self.traceback_str, self.cause)
        error.__cause__ = self.cause
        return error


_DUAL_CLASSES: Dict[type, Optional[type]] = {}


def _dual_class(cause_class: type) -> Optional[type]:
    if cause_class not in _DUAL_CLASSES:
        try:
            made: Optional[type] = type(
                f"RayTaskError({cause_class.__name__})",
                (RayTaskError, cause_class),
                {"__getattr__": lambda self, name: getattr(self.cause, name), "__module__": __name__},
            )
        except TypeError:  # a class that cannot be a base with ours (a lay-out conflict, a final class)
            made = None
        _DUAL_CLASSES[cause_class] = made
    return _DUAL_CLASSES[cause_class]


class GetTimeoutError(RayError, TimeoutError):
    """`ray.get(..., timeout=...)` ran out of time before the values were ready."""


class TaskCancelledError(RayError, concurrent.futures.CancelledError):
    """The task was cancelled (`ray.cancel`), or a task it depended on was."""


class RayActorError(RayError, ActorLostError):
    """An actor could not run a method: it died, or was killed."""


class ActorDiedError(RayActorError):
    """The actor's worker died (scaler.errors.ActorLostError)."""


class ObjectLostError(RayError, MissingObjectError):
    """An object the reference names is no longer held (the session that put it was shut down)."""


class WorkerCrashedError(RayError, ProcessorDiedError, WorkerDiedError):
    """The process running the task died (os._exit, a signal), or its workers died more often than the cluster's
    retry limit allows."""


class OutOfMemoryError(RayError, MemoryLimitError):
    """The task used more memory than its worker's limit (scaler_cluster --memory-limit)."""


class RaySystemError(RayError):
    """Something other than the task itself failed."""
