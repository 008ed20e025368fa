"""Exceptions users of Scaler can catch. Shared by client, worker and scheduler; standard library only."""

import concurrent.futures
import re
from typing import Any, Optional


class ScalerError(Exception):
    """Base class of Scaler's own errors."""


class ProcessorDiedError(ScalerError):
    """The process running a task died (os._exit, a signal, out of memory) before the task finished."""


class MemoryLimitError(ScalerError, MemoryError):
    """The task used more memory than its worker's limit (scaler_cluster --memory-limit): the worker stopped it and
    replaced the process that ran it, or the kernel did (the memory cgroup of that process). The message names the
    limit and the peak seen; `limit_bytes` and `peak_bytes` hold them (0 where unknown), `worker` is the worker's
    identity as scaler_top shows it."""

    def __init__(self, limit_bytes: int, peak_bytes: int, how: str = "", worker: str = "", detail: str = "") -> None:
        super().__init__(limit_bytes, peak_bytes, how, worker, detail)
        self.limit_bytes = limit_bytes
        self.peak_bytes = peak_bytes
        self.how = how  # who stopped it: "the worker's watchdog", "the kernel (memory cgroup)"
        self.worker = worker
        self.detail = detail  # the scheduler's word: "no connected worker has a larger limit"

    def __reduce__(self) -> Any:
        # Explicit: pickling helpers that rebuild exceptions with __new__ (tblib, which distributed installs) cannot
        # call MemoryError.__new__ for a subclass
        return (type(self), (self.limit_bytes, self.peak_bytes, self.how, self.worker, self.detail))

    def __str__(self) -> str:
        where = f" on worker {self.worker}" if self.worker else ""
        peak = f"{_megabytes(self.peak_bytes)} at its peak" if self.peak_bytes else "an unknown peak"
        by = f", stopped by {self.how}" if self.how else ""
        detail = f": {self.detail}" if self.detail else ""
        return f"the task used more memory than the limit of {_megabytes(self.limit_bytes)}{where} ({peak}{by}){detail}"


_STOPPED_BY = re.compile(r", stopped by (.+)\)$", re.MULTILINE)


def memory_stopped_by(error_text: str) -> str:
    """Who stopped a task past its memory limit, as the worker's error text says ("the kernel (memory cgroup)"); ""
    if it does not say. For the scheduler, which re-states a worker's MemoryLimitError without unpickling it."""
    found = _STOPPED_BY.search(error_text)
    return found.group(1) if found else ""


def _megabytes(size: int) -> str:
    return f"{size / 1e6:,.1f} MB" if size % 1_000_000 else f"{size // 1_000_000:,} MB"


class WorkerDiedError(ScalerError):
    """The task's worker died too many times while running it (the retry cap was reached)."""


class TaskRefusedError(ScalerError):
    """The scheduler refused the task, for example because too many tasks are waiting."""


class TaskTimeoutError(ScalerError, TimeoutError):
    """The task ran longer than its timeout_seconds (client.options): the worker stopped it, replacing the process
    that ran it. The message is the worker's."""


class ActorLostError(ScalerError):
    """The actor a method call was for is gone, with its state: its worker or its process died, it went past its
    worker's memory limit, its worker retired, it was closed, or its constructor raised. The message says which.
    Actor calls are never retried and an actor is never created again behind its handle's back."""


class ActorAnswerLostError(ScalerError):
    """An actor call ran before a scheduler restart, and its answer was lost with the scheduler: the actor's worker no
    longer kept it. The call is not run again (an actor call never runs twice); the actor lives on."""


class TaskPoliciesUnsupportedError(ScalerError, RuntimeError):
    """Tasks were submitted with options (resources, priority, retries, timeout) that the scheduler does not
    implement (an older version): rather than have them ignored, nothing was submitted."""


class FrameTooLargeError(ScalerError, ValueError):
    """A message was larger than the scheduler's frame limit (scaler_scheduler --max-frame-bytes), so it was not sent:
    the scheduler would have dropped the connection. The message names the sizes."""


class ProtocolVersionError(ScalerError):
    """The scheduler speaks another protocol version and refused this peer."""


class AuthenticationError(ScalerError, PermissionError):
    """The scheduler refused this peer's CurveZMQ key, or does not speak CurveZMQ with the key this peer expects."""


class SchedulerGoneError(ScalerError, TimeoutError):
    """The scheduler said a final goodbye, or none was heard for the client's `reconnect_seconds` (by default its
    `timeout_seconds`: a lost scheduler that did not come back on the address in time); pending tasks cannot finish.
    A TimeoutError, as the seed system raises for a scheduler that does not come back."""


class TaskNotFoundError(ScalerError, LookupError):
    """The scheduler does not know the task: a graph node named a dependency it never received."""


class MissingObjectError(ScalerError, LookupError):
    """An ObjectReference names an object the scheduler no longer holds for this client (clear() deleted it)."""


class ProfilingInfoError(ScalerError, concurrent.futures.InvalidStateError, ValueError):
    """profiling_info() was asked too early (the task is not done) or of a task submitted without profiling.

    A ValueError, as in the seed system, and an InvalidStateError, as concurrent.futures raises for a future asked
    about a state it is not in."""


class DisconnectedError(ScalerError, RuntimeError):
    """The client was disconnected; no further calls can be made on it (a RuntimeError, like using a shut down
    executor)."""


class ResultSerializationError(ScalerError):
    """The task ran, but its return value could not be serialized (pickled, by default) on the worker, so it could not
    be sent back; not to be confused with an argument that cannot be, which raises at submit on the client. `reason`
    is the serializer's error, `worker` the identity of the worker, as scaler_top shows it (empty if unknown)."""

    def __init__(self, task_id: str, function: str, reason: str, verb: str = "pickle", worker: str = "") -> None:
        super().__init__(task_id, function, reason, verb, worker)
        self.task_id = task_id
        self.function = function
        self.reason = reason
        self.verb = verb  # "serialize" with a serializer of the client's own
        self.worker = worker

    def __str__(self) -> str:
        where = f" on worker {self.worker}" if self.worker else ""
        return f"could not {self.verb} the result of task {self.task_id} ({self.function}){where}: {self.reason}"


# The first line of a failed task's traceback text, as workers write it (scaler/worker/core.py)
_WHERE = re.compile(r"task ([0-9a-f]+) failed on worker (\S+):\n")


def where_failed(task_id: str, worker: str) -> str:
    """The line that starts the traceback text of a task that failed (TaskResult.errorText)."""
    return f"task {task_id} failed on worker {worker}:\n"


class RemoteTraceback(Exception):
    """Carries the text of a traceback from a worker, attached as __cause__ of a task's re-raised exception. It starts
    with the task and the worker it failed on (`task_id` and `worker`, empty if the worker did not say)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text
        where: Optional[re.Match] = _WHERE.match(text)
        self.task_id = where.group(1) if where else ""
        self.worker = where.group(2) if where else ""

    def __str__(self) -> str:
        return self.text
