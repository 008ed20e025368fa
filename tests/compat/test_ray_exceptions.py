"""Ray's error names (scaler.compat.ray.exceptions): each a Scaler error, and what ray.get raises for each failure."""

from __future__ import annotations

import concurrent.futures
import inspect
import pickle

import pytest

from scaler.compat.ray import exceptions
from scaler.compat.ray.exceptions import RayTaskError
from scaler.compat.ray.failures import ray_error
from scaler.errors import (
    MemoryLimitError,
    MissingObjectError,
    ProcessorDiedError,
    ScalerError,
    TaskTimeoutError,
    WorkerDiedError,
)


def test_every_ray_name_is_a_scaler_error() -> None:
    names = [
        name
        for name, value in vars(exceptions).items()
        if inspect.isclass(value) and value.__module__ == exceptions.__name__
    ]
    assert sorted(names) == sorted(exceptions.__all__)
    for name in names:
        assert issubclass(getattr(exceptions, name), ScalerError), name


class Custom(Exception):
    pass


class WithArguments(Exception):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(code, text)
        self.code = code


@pytest.mark.parametrize("cause", [ValueError("v"), KeyError("k"), Custom("c"), WithArguments(7, "t"), OSError(2, "x")])
def test_a_task_exception_is_also_an_instance_of_its_class(cause) -> None:
    error = ray_error(cause, "task")
    assert isinstance(error, RayTaskError) and isinstance(error, type(cause))
    assert error.cause is cause and error.__cause__ is cause
    assert type(error).__name__ == f"RayTaskError({type(cause).__name__})"
    assert "task raised" in str(error)
    if isinstance(cause, WithArguments):
        assert error.code == 7  # its attributes are the cause's
    assert type(ray_error(cause, "again")) is type(error)  # one class per cause class, made once


def test_a_plain_exception_is_a_plain_ray_task_error() -> None:
    error = ray_error(Exception("e"), "task")
    assert type(error) is RayTaskError
    assert isinstance(pickle.loads(pickle.dumps(error)), RayTaskError)


@pytest.mark.parametrize(
    "error, ray_name, scaler_class",
    [
        (concurrent.futures.CancelledError(), "TaskCancelledError", concurrent.futures.CancelledError),
        (ProcessorDiedError("died"), "WorkerCrashedError", ProcessorDiedError),
        (WorkerDiedError("died"), "WorkerCrashedError", WorkerDiedError),
        (MemoryLimitError(100, 200), "OutOfMemoryError", MemoryLimitError),
        (MissingObjectError("gone"), "ObjectLostError", MissingObjectError),
    ],
)
def test_scaler_failures_take_their_ray_names(error, ray_name, scaler_class) -> None:
    translated = ray_error(error, "task")
    assert type(translated) is getattr(exceptions, ray_name)
    assert isinstance(translated, scaler_class) and translated.__cause__ is error


def test_scaler_errors_without_a_ray_name_are_raised_as_they_are() -> None:
    timeout = TaskTimeoutError("too long")
    assert ray_error(timeout, "task") is timeout
    interrupt = KeyboardInterrupt()
    assert ray_error(interrupt, "task") is interrupt
