"""The seed system's exception names, for code written for it: `from scaler.utility.exceptions import MissingObjects`.

Each name is the class Scaler raises where the seed system raised the named one (one of scaler.errors, or
concurrent.futures.CancelledError), so `except MissingObjects:` catches what it caught there:

| seed system's name         | here                                | raised when                                      |
| -------------------------- | ----------------------------------- | ------------------------------------------------ |
| `MissingObjects`           | `scaler.errors.MissingObjectError`  | a task names an object that clear() deleted      |
| `WorkerDiedError`          | `scaler.errors.WorkerDiedError`     | the task's workers died (retry cap reached)      |
| `ProcessorDiedError`       | `scaler.errors.ProcessorDiedError`  | the process running the task died                |
| `TaskNotFoundError`        | `scaler.errors.TaskNotFoundError`   | the scheduler answers that it does not know it   |
| `NoWorkerError`            | `scaler.errors.TaskRefusedError`    | the scheduler refused it (too many tasks wait)   |
| `DisconnectedError`        | `scaler.errors.DisconnectedError`   | a call on a client that is disconnected          |
| `ClientQuitException`      | `concurrent.futures.CancelledError` | result() of a task its client disconnected from  |
| `ClientShutdownException`  | `concurrent.futures.CancelledError` | result() of a task of a client that shut down    |
| `ClientCancelledException` | `concurrent.futures.CancelledError` | result() of a task canceled (clear(), cancel())  |
| `DeserializeObjectError`   | a ScalerError of its own            | never: see below                                 |
| `ObjectStorageException`   | a ScalerError of its own            | never: see below                                 |

Where the seed system failed a task's future with ClientQuitException or ClientShutdownException, because its client
disconnected or shut the cluster down, Scaler cancels the future, as concurrent.futures does: result() raises
CancelledError and cancelled() is True. A call on a client after that raises DisconnectedError, which the seed system
called ClientQuitException too: `except ClientQuitException` does not catch it there.
DeserializeObjectError was a worker missing the client's serializer, which Scaler sends with the tasks that need it
(a serializer that fails raises its own error); ObjectStorageException was the seed system's connection to a separate
object storage server, which Scaler does not have (objects live in the scheduler). Both remain for `except` clauses.
"""

from __future__ import annotations

from concurrent.futures import CancelledError

from scaler.errors import (
    DisconnectedError,
    MissingObjectError,
    ProcessorDiedError,
    ScalerError,
    TaskNotFoundError,
    TaskRefusedError,
    WorkerDiedError,
)

__all__ = [
    "ClientCancelledException",
    "ClientQuitException",
    "ClientShutdownException",
    "DeserializeObjectError",
    "DisconnectedError",
    "MissingObjects",
    "NoWorkerError",
    "ObjectStorageException",
    "ProcessorDiedError",
    "TaskNotFoundError",
    "WorkerDiedError",
]

MissingObjects = MissingObjectError
NoWorkerError = TaskRefusedError
ClientQuitException = CancelledError
ClientShutdownException = CancelledError
ClientCancelledException = CancelledError


class DeserializeObjectError(ScalerError):
    """Never raised by Scaler: the seed system's worker lacking a client's serializer, which Scaler ships with the
    tasks that need it."""


class ObjectStorageException(ScalerError):
    """Never raised by Scaler: the seed system's failures to reach its object storage server, which Scaler does not
    have."""
