"""Internal: a Scaler future's exception as `ray.get` raises it, under Ray's name (exceptions.py)."""

from __future__ import annotations

import concurrent.futures

from scaler.compat.ray.exceptions import (
    ActorDiedError,
    ObjectLostError,
    OutOfMemoryError,
    RayError,
    RayTaskError,
    TaskCancelledError,
    WorkerCrashedError,
)
from scaler.errors import (
    ActorLostError,
    MemoryLimitError,
    MissingObjectError,
    ProcessorDiedError,
    ScalerError,
    WorkerDiedError,
)


def ray_error(error: BaseException, function_name: str) -> BaseException:
    """What `ray.get` raises for a task that ended with `error`: a task's own exception as a RayTaskError that is also
    an instance of its class, Scaler's errors under their Ray names where Ray has one, anything else as it is."""
    if isinstance(error, RayError):
        return error  # already translated: a task that ray.get a failed reference re-raised it
    if isinstance(error, concurrent.futures.CancelledError):
        return _with_cause(TaskCancelledError(f"{function_name} was cancelled"), error)
    if isinstance(error, ActorLostError):
        return _with_cause(ActorDiedError(str(error)), error)
    if isinstance(error, MemoryLimitError):
        oom = OutOfMemoryError(error.limit_bytes, error.peak_bytes, error.how, error.worker, error.detail)
        return _with_cause(oom, error)
    if isinstance(error, (ProcessorDiedError, WorkerDiedError)):
        return _with_cause(WorkerCrashedError(str(error)), error)
    if isinstance(error, MissingObjectError):
        return _with_cause(ObjectLostError(str(error)), error)
    if isinstance(error, ScalerError) or not isinstance(error, Exception):
        return error  # timeouts, a lost scheduler, KeyboardInterrupt...: Scaler's own names
    wrapped = RayTaskError(function_name, str(error.__cause__ or ""), error).as_instanceof_cause()
    wrapped.__cause__ = error
    return wrapped


def _with_cause(error: BaseException, cause: BaseException) -> BaseException:
    error.__cause__ = cause
    return error
