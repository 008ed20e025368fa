"""joblib on Scaler: `import scaler.joblib` registers a joblib backend named "scaler".

    import joblib
    import scaler.joblib  # noqa: F401

    with joblib.parallel_config(backend="scaler", address="tcp://127.0.0.1:2345"):
        results = joblib.Parallel()(joblib.delayed(work)(i) for i in range(1000))

Libraries that use joblib (scikit-learn's `n_jobs=-1`, for instance) then run their work on the cluster. Pass
`address=` (the backend connects for each Parallel call and disconnects after it) or `client=` (an existing Client,
left connected), plus any other keyword of Client with `address=`.

joblib groups small calls into batches, and each batch is one task, so a million tiny calls are not a million
messages: it grows a batch while batches take under 0.2 s, as measured here on the worker (the time a batch waited in
the cluster's queues does not count). A batch travels as an argument of one shared function, so nothing per batch is
cached by the client. joblib's completion callbacks (which dispatch the next batches) run on a thread of this backend,
never on the client's IO thread. A Parallel call that fails cancels its unfinished tasks. Calls made with joblib
inside a task run sequentially in the worker's process.

joblib sizes its batches and keeps about 2 x n_jobs of them in flight for `n_jobs` workers. n_jobs=-1 ("all of
them") stands for `n_workers`, a keyword of the backend, since a client cannot ask the scheduler how many workers it
has: by default this machine's CPU count, right for a SchedulerClusterCombo; give the size of a larger cluster, as in
`parallel_config(backend="scaler", address=..., n_workers=64)`.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from typing import Any, Callable, List, Optional

from joblib import register_parallel_backend
from joblib._parallel_backends import AutoBatchingMixin, ParallelBackendBase, SequentialBackend

from scaler.client.client import Client
from scaler.client.future import ScalerFuture

logger = logging.getLogger(__name__)


def run_batch(batch: Callable[[], List[Any]]) -> List[Any]:
    """The task of every batch: joblib's BatchedCalls, called in the worker."""
    return batch()


class ScalerBackend(AutoBatchingMixin, ParallelBackendBase):
    """The joblib backend "scaler": each batch of calls is one task on a Scaler cluster."""

    supports_retrieve_callback = True  # results are fetched in the callback thread, so joblib can wait with timeouts
    default_n_jobs = -1

    def __init__(
        self,
        address: Optional[str] = None,
        client: Optional[Client] = None,
        n_workers: Optional[int] = None,
        nesting_level: Optional[int] = None,
        inner_max_num_threads: Optional[int] = None,
        **client_options: Any,
    ) -> None:
        super().__init__(nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads)
        if n_workers is None:
            n_workers = os.cpu_count() or 1
        if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
            raise ValueError(f"n_workers must be a positive int (the workers n_jobs=-1 stands for), got {n_workers!r}")
        self._n_workers = n_workers
        if (address is None) == (client is None):
            raise ValueError(
                'the "scaler" joblib backend needs address= (a scheduler address) or client= (a connected Client), '
                'e.g. joblib.parallel_config(backend="scaler", address="tcp://127.0.0.1:2345")'
            )
        if client is not None and client_options:
            raise ValueError(f"with client=, options for a new Client make no sense: {sorted(client_options)}")
        if client is not None and not isinstance(client, Client):
            raise TypeError(f"client must be a scaler Client, got {client!r}")
        self._address = address
        self._client_options = client_options
        self._given_client = client
        self._client: Optional[Client] = client
        self._futures: List[ScalerFuture] = []
        self._callbacks: Optional[_CallbackThread] = None
        self._worker_seconds: Optional[float] = None  # how long the batch whose callback runs now took on its worker

    def __reduce__(self) -> Any:
        raise TypeError("the scaler joblib backend cannot be pickled: it runs where the Parallel call is made")

    # ---- joblib's backend API ----------------------------------------------------------------------------------------

    def effective_n_jobs(self, n_jobs: Optional[int]) -> int:
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if n_jobs is None or n_jobs < 0:
            return self._n_workers
        return n_jobs

    def configure(self, n_jobs: int = 1, parallel: Any = None, **backend_args: Any) -> int:
        n_jobs = self.effective_n_jobs(n_jobs)
        self.parallel = parallel
        if self._client is None:
            self._client = Client(self._address, **self._client_options)  # type: ignore[arg-type]
        if self._callbacks is None:
            self._callbacks = _CallbackThread(self._before_callback)
        return n_jobs

    def submit(self, func: Callable[[], Any], callback: Optional[Callable[[Any], None]] = None) -> ScalerFuture:
        client = self._client
        if client is None:
            raise RuntimeError("the scaler joblib backend is not configured: joblib calls configure() first")
        # with profiling, the worker measures the batch itself, which auto-batching needs (see batch_completed)
        future = client._submit(run_batch, (func,), {}, True)
        self._futures.append(future)
        if callback is not None:
            callbacks = self._callbacks
            assert callbacks is not None
            future.add_done_callback(lambda _: callbacks.put(callback, future))
        return future

    def retrieve_result_callback(self, out: ScalerFuture) -> Any:
        return out.result()

    def batch_completed(self, batch_size: int, duration: float) -> None:
        """joblib measures from dispatch to result, queueing in the cluster included, which would make it shrink
        batches whenever the cluster is busy: the worker's own measure of the batch is used instead."""
        measured = self._worker_seconds
        super().batch_completed(batch_size, duration if measured is None else measured)

    def _before_callback(self, future: ScalerFuture) -> None:
        """On the callback thread, just before joblib's callback for `future` (which calls batch_completed)."""
        info = future._profiling_info  # None for a failed or cancelled batch
        self._worker_seconds = None if info is None else info.duration_s

    def abort_everything(self, ensure_ready: bool = True) -> None:
        futures, self._futures = self._futures, []
        for future in futures:
            future.cancel()
        if not ensure_ready:
            self.terminate()

    def stop_call(self) -> None:
        self._futures = [future for future in self._futures if not future.done()]

    def terminate(self) -> None:
        """End of a Parallel call: stop the callback thread, and disconnect a client this backend connected."""
        if self._callbacks is not None:
            self._callbacks.stop()
            self._callbacks = None
        if self._given_client is None and self._client is not None:
            self._client.disconnect()
            self._client = None
        self._futures = []

    def get_nested_backend(self) -> Any:
        # Inside a task: one process per worker, so nested Parallel calls run sequentially there.
        return SequentialBackend(nesting_level=(self.nesting_level or 0) + 1), None


class _CallbackThread:
    """Runs joblib's completion callbacks in order, off the client's IO thread (they dispatch new batches)."""

    def __init__(self, before_callback: Callable[[ScalerFuture], None]) -> None:
        self._before_callback = before_callback
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="scaler-joblib-callbacks", daemon=True)
        self._thread.start()

    def put(self, callback: Callable[[Any], None], future: ScalerFuture) -> None:
        self._queue.put((callback, future))

    def stop(self) -> None:
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            callback, future = item
            try:
                self._before_callback(future)
                callback(future)  # joblib records a failed batch itself; this catches failures of its dispatching
            except Exception:
                logger.exception("a joblib completion callback failed")


register_parallel_backend("scaler", ScalerBackend)

__all__ = ["ScalerBackend"]
