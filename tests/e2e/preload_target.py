"""Preload functions for tests/e2e/test_preload.py, run by task processes before their first task (--preload)."""

from __future__ import annotations

import os
import time
from typing import Optional, Tuple

PRELOADED_IN: Optional[int] = None  # the pid of the process that ran `setup`
RUNS = 0  # how many times `setup` ran in this process: once


def setup() -> None:
    global PRELOADED_IN, RUNS
    PRELOADED_IN = os.getpid()
    RUNS += 1


def state() -> Tuple[int, Optional[int], int]:
    """A task: (its process's pid, the pid the preload ran in, how many times it ran there)."""
    return os.getpid(), PRELOADED_IN, RUNS


def fail() -> None:
    raise RuntimeError("no pricing curves today")


_BALLAST: bytes = b""


def hold_memory() -> None:
    """A preload too large for the test's memory limit: it holds 200 MB until the watchdog stops it (or 30 s)."""
    global _BALLAST
    _BALLAST = b"\x01" * 200_000_000  # written, so resident
    time.sleep(30)
