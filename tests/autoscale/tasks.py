"""Tasks for the scaling scenarios, importable by the workers (they run with the repository as working directory)."""

from __future__ import annotations

import os
import time


def record_and_square(value: int, journal: str, seconds: float) -> int:
    """Appends `start VALUE` when it begins and `end VALUE TIME` when it ends (one write each, O_APPEND, so lines
    from several workers never mix): a task run twice shows two start lines."""
    _append(journal, f"start {value}\n")
    time.sleep(seconds)
    _append(journal, f"end {value} {time.time():.6f}\n")
    return value * value


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
