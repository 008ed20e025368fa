"""Internal: what a TaskResult means for its future: the value's bytes, the task's own exception, or a Scaler error.

A failure after more than one attempt (retries, worker deaths) carries a note saying which attempt it was (add_note on
Python 3.11+, __notes__ before), as tracebacks show notes."""

from __future__ import annotations

from concurrent.futures._base import CANCELLED as CANCELLED_STATE
from concurrent.futures._base import CANCELLED_AND_NOTIFIED
from typing import Any, List, Optional

from scaler.client.future import ProfilingInfo, ScalerFuture
from scaler.errors import (
    ActorLostError,
    RemoteTraceback,
    ResultSerializationError,
    ScalerError,
    TaskNotFoundError,
    TaskRefusedError,
    TaskTimeoutError,
    WorkerDiedError,
)
from scaler.protocol import TaskResult, TaskStatus
from scaler.serializer import load_exception
from scaler.tracebacks import add_note, fill_in_source

SUCCESS = int(TaskStatus.success)
CANCELED = int(TaskStatus.canceled)
_FAILED = int(TaskStatus.failed)
_NOT_FOUND = int(TaskStatus.not_found)
_WORKER_DIED = int(TaskStatus.worker_died)
_REFUSED = int(TaskStatus.refused)
_TIMED_OUT = int(TaskStatus.timed_out)
_ACTOR_LOST = int(TaskStatus.actor_lost)
_CANCELLED = (CANCELLED_STATE, CANCELLED_AND_NOTIFIED)


def failure_of(result: TaskResult, retries: int = 0) -> BaseException:
    """The exception a task that neither succeeded nor was canceled raises from result(); `retries` is the task's
    option, for the note on the attempts."""
    exception = _failure(result)
    attempts = result.attempts or 1
    # One attempt: it ran once without retries, or it did not run at all (refused, or a graph node answered with its
    # failed dependency's exception; a task with retries that ran and failed would have run again): no note, which for
    # such a node would claim an attempt of its own.
    if attempts > 1:
        note = f"Scaler: failed on attempt {attempts} of {retries + 1} (retries={retries})"
        if attempts > retries + 1:
            note = f"Scaler: failed on attempt {attempts} (retries={retries}; restarts after worker deaths count too)"
        add_note(exception, note)
    return exception


def _failure(result: TaskResult) -> BaseException:
    status = result.status
    text = result.error_text
    if status == _FAILED:
        return remote_exception(result)
    if status == _TIMED_OUT:
        return TaskTimeoutError(text or f"task {result.task_id.hex()} ran longer than its timeout")
    if status == _ACTOR_LOST:
        return ActorLostError(text or f"the actor task {result.task_id.hex()} called is gone")
    if status == _WORKER_DIED:
        return WorkerDiedError(text or "the workers running the task died")
    if status == _REFUSED:
        return TaskRefusedError(text or "the scheduler refused the task")
    if status == _NOT_FOUND:
        return TaskNotFoundError(
            f"the scheduler does not know task {result.task_id.hex()}" + (f": {text}" if text else "")
        )
    return ScalerError(f"task {result.task_id.hex()} ended with unknown status {status}")


def remote_exception(result: TaskResult) -> BaseException:
    """The task's own exception, with the worker's traceback as its __cause__, as concurrent.futures.process does;
    source lines the worker could not read are taken from this process's files."""
    try:
        exception = load_exception(result.payload)
    except Exception as error:
        exception = ScalerError(f"the task failed and its exception could not be unpickled here ({error!r})")
    if result.error_text:
        cause = RemoteTraceback(fill_in_source(result.error_text))
        exception.__cause__ = cause
        if type(exception) is ResultSerializationError and not exception.worker:
            exception.worker = cause.worker  # the processor that raised it does not know its worker's identity
    return exception


def profiling_info_of(future: ScalerFuture, result: TaskResult) -> Optional[ProfilingInfo]:
    if not future._profiling:
        return None
    return ProfilingInfo(result.duration_us, result.cpu_time_us, result.peak_memory, result.attempts or 1)


def settle_successes(futures: List[ScalerFuture], results: List[TaskResult]) -> None:
    """Futures whose tasks succeeded with their value inline (`results`, in the same order), settled together: each
    value deserialized with its client's serializer (a failure to deserialize is that future's exception), then one
    lock for all of them."""
    settled: List[ScalerFuture] = []
    values: List[Any] = []
    infos: Optional[List[Optional[ProfilingInfo]]] = None  # made at the first future with profiling
    for future, result in zip(futures, results):
        if future._state in _CANCELLED:
            continue  # cancelled by the user: not worth deserializing
        try:
            value = future._deserialize(result.payload)
        except Exception as error:
            future._settle(error, True, None)
            continue
        if future._profiling or infos is not None:
            if infos is None:
                infos = [None] * len(settled)
            infos.append(profiling_info_of(future, result))
        settled.append(future)
        values.append(value)
    ScalerFuture._settle_values(settled, values, infos)
