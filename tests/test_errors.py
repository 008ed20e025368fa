"""Scaler's exceptions travel pickled (a task's failure, from worker to client): they must come back whole, also where
a library has patched how exceptions pickle."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest

from scaler.errors import MemoryLimitError


def test_a_memory_limit_error_comes_back_whole_even_with_tblib_installed() -> None:
    """dask.multiprocessing and distributed install tblib's exception pickling, which rebuilt exceptions with custom
    __init__ through __new__: MemoryError.__new__ refuses a subclass."""
    pickling_support = pytest.importorskip("tblib.pickling_support")
    error = MemoryLimitError(400_000_000, 412_000_000, "the worker's watchdog", "W|host|1", "")
    for installed in (False, True):
        if installed:
            pickling_support.install(error)
        copy = pickle.loads(cloudpickle.dumps(error))
        assert type(copy) is MemoryLimitError and str(copy) == str(error)
        assert (copy.limit_bytes, copy.peak_bytes, copy.how, copy.worker) == (
            400_000_000,
            412_000_000,
            error.how,
            "W|host|1",
        )
