"""Internal: `client.executor()`: the standard library's Executor interface on a Scaler cluster.

Code written for `concurrent.futures` (ThreadPoolExecutor, ProcessPoolExecutor) runs on the cluster unchanged:
`submit` returns a future, `map` yields results in order as they are asked for, `shutdown` stops accepting calls.
Differences, each because the cluster can do more than a local pool:

- `map` sends every call at once (in frames of many calls, like `Client.map`), so workers start at once;
  `chunksize` > 1 groups that many calls into one task, as ProcessPoolExecutor does, for very short calls.
- A future's `cancel()` also stops a call that is running, and `shutdown(cancel_futures=True)` cancels every
  unfinished call, since the client cannot tell queued from running (see ScalerFuture).
- `shutdown()` leaves the client connected: the executor borrows it.
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Protocol, Sequence, Tuple

from scaler.client.future import FailureLatch, ScalerFuture


class _Client(Protocol):
    """What the executor uses of a Client (client.py makes executors, so this module does not import it)."""

    _profiling: bool

    def _submit(self, fn: Any, args: Sequence[Any], kwargs: Dict[str, Any], profiling: bool) -> ScalerFuture: ...

    def _map_futures(
        self, fn: Any, iterable: Iterable[Sequence[Any]], profiling: Optional[bool]
    ) -> Tuple[List[ScalerFuture], FailureLatch]: ...

    def _check_calls(self, fn: Any, all_args: Sequence[Any]) -> None: ...


class ScalerExecutor(concurrent.futures.Executor):
    """A concurrent.futures.Executor bound to a Client: every call runs as a task on the client's cluster."""

    def __init__(self, client: _Client) -> None:
        self._client = client
        self._shutdown = False
        self._lock = threading.Lock()
        self._futures: List[ScalerFuture] = []  # unfinished ones, for shutdown(); pruned as it grows
        self._prune_at = 1024

    def __repr__(self) -> str:
        return f"<ScalerExecutor of {self._client!r}{' shut down' if self._shutdown else ''}>"

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> ScalerFuture:
        """Run fn(*args, **kwargs) on a worker; every keyword goes to fn. RuntimeError after shutdown()."""
        with self._lock:
            self._check_open()
            future = self._client._submit(fn, args, kwargs, self._client._profiling)
            self._track([future])
        return future

    def map(
        self, fn: Callable[..., Any], *iterables: Iterable[Any], timeout: Optional[float] = None, chunksize: int = 1
    ) -> Iterator[Any]:
        """fn applied to the items of `iterables` in parallel (zip semantics), results yielded in order.

        Every call is sent now; the returned iterator waits for each result when it is asked for, and raises the
        call's exception there, or TimeoutError if `timeout` seconds have passed since map() was called. Calls not
        yet yielded are cancelled if the iterator is closed or raises.
        """
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        deadline = None if timeout is None else time.monotonic() + timeout
        calls: List[Any] = list(zip(*iterables))
        if chunksize > 1:
            self._client._check_calls(fn, calls)  # each call, before they are hidden in chunks
            calls = [(calls[start : start + chunksize],) for start in range(0, len(calls), chunksize)]
            fn = functools.partial(_call_chunk, fn)  # one function for the whole map: serialized once
        with self._lock:
            self._check_open()
            futures, _ = self._client._map_futures(fn, calls, None)
            self._track(futures)
        return _results_in_order(futures, deadline, chunked=chunksize > 1)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new calls from now on. `cancel_futures` cancels every unfinished call; `wait` waits for the others.
        The client stays connected."""
        with self._lock:
            self._shutdown = True
            futures, self._futures = self._futures, []
        if cancel_futures:
            for future in futures:
                future.cancel()
        if wait:
            concurrent.futures.wait(futures)

    def _check_open(self) -> None:
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")

    def _track(self, futures: List[ScalerFuture]) -> None:
        tracked = self._futures
        tracked.extend(futures)
        if len(tracked) >= self._prune_at:
            self._futures = tracked = [future for future in tracked if not future.done()]
            self._prune_at = max(1024, 2 * len(tracked))


def _call_chunk(fn: Callable[..., Any], calls: List[tuple]) -> List[Any]:
    """A task of map(chunksize > 1): several calls, results in order."""
    return [fn(*args) for args in calls]


def _results_in_order(futures: List[ScalerFuture], deadline: Optional[float], chunked: bool) -> Iterator[Any]:
    # A generator that owns only the futures (not the executor), as concurrent.futures' own map does.
    futures.reverse()  # popped from the end: a yielded result is no longer held here
    try:
        while futures:
            future = futures[-1]
            if deadline is None:
                value = future.result()
            else:
                value = future.result(deadline - time.monotonic())
            futures.pop()
            if chunked:
                yield from value
            else:
                yield value
    finally:
        for future in futures:
            future.cancel()


__all__ = ["ScalerExecutor"]
