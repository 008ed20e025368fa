"""What a TaskResult means for its future: the value's bytes, the task's own exception, or a Scaler error."""

from __future__ import annotations

from typing import Optional

from scaler.client.future import ProfilingInfo, ScalerFuture
from scaler.errors import RemoteTraceback, ScalerError, TaskRefusedError, WorkerDiedError
from scaler.protocol import TaskResult, TaskStatus
from scaler.serializer import load_exception

SUCCESS = int(TaskStatus.success)
CANCELED = int(TaskStatus.canceled)
_FAILED = int(TaskStatus.failed)
_NOT_FOUND = int(TaskStatus.not_found)
_WORKER_DIED = int(TaskStatus.worker_died)
_REFUSED = int(TaskStatus.refused)


def failure_of(result: TaskResult) -> BaseException:
    """The exception a task that neither succeeded nor was canceled raises from result()."""
    status = result.status
    text = result.error_text
    if status == _FAILED:
        return remote_exception(result)
    if status == _WORKER_DIED:
        return WorkerDiedError(text or "the workers running the task died")
    if status == _REFUSED:
        return TaskRefusedError(text or "the scheduler refused the task")
    if status == _NOT_FOUND:
        return ScalerError(f"the scheduler does not know task {result.task_id.hex()}" + (f": {text}" if text else ""))
    return ScalerError(f"task {result.task_id.hex()} ended with unknown status {status}")


def remote_exception(result: TaskResult) -> BaseException:
    """The task's own exception, with the worker's traceback as its __cause__, as concurrent.futures.process does."""
    try:
        exception = load_exception(result.payload)
    except Exception as error:
        exception = ScalerError(f"the task failed and its exception could not be unpickled here ({error!r})")
    if result.error_text:
        exception.__cause__ = RemoteTraceback(result.error_text)
    return exception


def profiling_info_of(future: ScalerFuture, result: TaskResult) -> Optional[ProfilingInfo]:
    if not future._profiling:
        return None
    return ProfilingInfo(result.duration_us, result.cpu_time_us, result.peak_memory)
