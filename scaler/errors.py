"""Exceptions users of Scaler can catch. Shared by client, worker and scheduler; standard library only."""

import concurrent.futures


class ScalerError(Exception):
    """Base class of Scaler's own errors."""


class ProcessorDiedError(ScalerError):
    """The process running a task died (os._exit, a signal, out of memory) before the task finished."""


class WorkerDiedError(ScalerError):
    """The task's worker died too many times while running it (the retry cap was reached)."""


class TaskRefusedError(ScalerError):
    """The scheduler refused the task, for example because too many tasks are waiting."""


class TaskTimeoutError(ScalerError, TimeoutError):
    """The task ran longer than its timeout_seconds (client.options): the worker stopped it, replacing the process
    that ran it. The message is the worker's."""


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


class RemoteTraceback(Exception):
    """Carries the text of a traceback from a worker, attached as __cause__ of a task's re-raised exception."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text
