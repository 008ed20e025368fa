"""Internal: progress bars for long runs: `client.map(..., progress=True)` and `scaler.progress(futures)`.

The bar is tqdm's (`tqdm.auto`: a text bar in a terminal, a widget in a notebook), an optional dependency:
`pip install "scaler[progress]"`. It is moved by the thread waiting for the results, from a count the client keeps as
results arrive, so the client's IO thread never writes to a terminal, and a map without a bar does no extra work.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any, Iterable, List, Optional


def _tqdm() -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError as error:
        raise ImportError('progress bars need tqdm: pip install "scaler[progress]" (or pip install tqdm)') from error
    return tqdm


_REFRESH_SECONDS = 0.1  # update_now_and_then() passes counts on to tqdm at most this often


class ProgressBar:
    """A tqdm bar of `total` tasks, moved to absolute counts and closed once."""

    def __init__(self, total: int, label: Optional[str] = None) -> None:
        self._bar = _tqdm()(total=total, desc=label or "tasks", unit="task", dynamic_ncols=True)
        self._shown = 0
        self._next_refresh = 0.0

    @staticmethod
    def check_available() -> None:
        """ImportError with what to install, before any work is sent, if tqdm is missing."""
        _tqdm()

    def update_to(self, done: int) -> None:
        if done > self._shown:
            self._bar.update(done - self._shown)
            self._shown = done
        self._next_refresh = time.monotonic() + _REFRESH_SECONDS

    def update_now_and_then(self, done: int) -> None:
        """update_to(done), unless the bar was updated less than _REFRESH_SECONDS ago: cheap to call per result."""
        if time.monotonic() >= self._next_refresh:
            self.update_to(done)

    def close(self) -> None:
        self._bar.close()


def progress(futures: Iterable[concurrent.futures.Future], label: Optional[str] = None) -> List[Any]:
    """Show a progress bar while `futures` finish, updated as each one does; returns them, in the order given, once
    all are done (succeeded, failed or cancelled: result() tells which).

        futures = [client.submit(work, i) for i in range(1000)]
        results = [future.result() for future in scaler.progress(futures)]
    """
    futures = list(futures)
    distinct = list(dict.fromkeys(futures))  # as_completed yields a future given twice once
    bar = ProgressBar(len(distinct), label)
    try:
        for done, _ in enumerate(concurrent.futures.as_completed(distinct), start=1):
            bar.update_to(done)
    finally:
        bar.close()
    return futures
