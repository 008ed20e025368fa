"""Internal: the future a submission returns: a concurrent.futures.Future that knows its task and can cancel it."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from _thread import allocate_lock
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, RUNNING
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Protocol

from scaler import task_context
from scaler.client import output
from scaler.errors import ProfilingInfoError
from scaler.serializer import default_loads


@dataclass(frozen=True)
class ProfilingInfo:
    """What the worker measured around the call of a task submitted with profiling on."""

    duration_us: int  # wall time of the call
    cpu_time_us: int  # CPU time of the call
    peak_memory: int  # peak RSS growth during the call, bytes
    attempts: int = 1  # how often the task was started on a worker (retries and worker deaths included)

    @property
    def duration_s(self) -> float:
        return self.duration_us / 1_000_000

    @property
    def cpu_time_s(self) -> float:
        return self.cpu_time_us / 1_000_000


class TaskCanceller(Protocol):
    def cancel_task(self, task_id: bytes) -> None: ...


# One lock for every ScalerFuture of the process, used where Future uses its per-future Condition. A Condition costs
# about a dozen objects the garbage collector walks again and again while 100,000 futures are alive, which made it the
# largest cost of submit(). Critical sections are a few attribute writes, so sharing costs no real contention; it is
# reentrant because concurrent.futures.wait() acquires the "condition" of each future it is given in turn. Threads that
# block on one future sleep on locks of their own (like Condition's waiters), so a result wakes only its own waiters.
_LOCK = threading.RLock()


class FailureLatch:
    """Shared by the futures of one map or graph: the first of them to fail sets it and wakes the caller waiting on
    another of them, so that a failure is raised at once rather than after every earlier task finished. It also
    counts the futures that settled, in any order, for a progress bar."""

    __slots__ = ("failed", "waiting", "settled", "graph_nodes")

    def __init__(self) -> None:
        self.failed = False
        self.waiting: Optional[ScalerFuture] = None
        self.settled = 0  # only changed with _LOCK held
        # a graph's nodes without a future, cancelled with its keys: they may run on after every key was answered
        self.graph_nodes: List[bytes] = []


_DONE = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)
_LOGGER = logging.getLogger("concurrent.futures")


class ScalerFuture(concurrent.futures.Future):
    """The result of one task. Works with concurrent.futures.wait, as_completed and add_done_callback.

    `running()` is True from submission until the task is done, as in the seed system: the task is in the cluster's
    hands, and the client cannot tell queued from executing. `cancel()` returns False once the task is done;
    otherwise the future is cancelled at once and the scheduler told (a running task is stopped), and a result that
    crosses the cancel is dropped. Done callbacks run on the client's IO thread: keep them short and never wait on
    another future in them.
    """

    __slots__ = (
        "_state",
        "_result",
        "_exception",
        "_waiter_list",
        "_callback_list",
        "_sleepers",
        "_task_id",
        "_canceller",
        "_profiling",
        "_deserialize",
        "_profiling_info",
        "_latch",
    )
    _condition = _LOCK  # type: ignore[assignment]  # what the base class and concurrent.futures.wait() lock

    def __init__(
        self,
        task_id: bytes,
        canceller: Optional[TaskCanceller] = None,
        profiling: bool = False,
        deserialize: Callable[[bytes], Any] = default_loads,  # the default serializer's
    ) -> None:
        # Future.__init__ is not called: it would build the Condition this class does without.
        self._state = RUNNING  # submitted: see the class docstring
        self._result: Any = None
        self._exception: Optional[BaseException] = None
        self._waiter_list: Optional[List[Any]] = None  # wait()/as_completed() waiters, made on first use
        self._callback_list: Optional[List[Callable[[Any], Any]]] = None
        self._sleepers: Optional[List[Any]] = None  # locks of threads blocked in result()/exception()
        self._task_id = task_id
        self._canceller = canceller  # the connection itself: a bound method per future would cost the GC too
        self._profiling = profiling
        self._deserialize = deserialize  # the submitting client's serializer reads the result
        self._profiling_info: Optional[ProfilingInfo] = None
        self._latch: Optional[FailureLatch] = None

    @property
    def task_id(self) -> bytes:
        return self._task_id

    def __repr__(self) -> str:
        return f"<ScalerFuture task_id={self._task_id.hex()} {super().__repr__()[1:-1]}>"

    def profiling_info(self) -> ProfilingInfo:
        """What the worker measured; ProfilingInfoError (a ValueError) before the task is done or without profiling."""
        if not self.done():
            raise ProfilingInfoError("profiling info is known once the task is done: call result() first")
        if self._profiling_info is None:
            raise ProfilingInfoError(
                f"no profiling info for task {self._task_id.hex()}: submit it with profiling=True "
                "(or Client(profiling=True)); a cancelled task or a graph constant has none"
            )
        return self._profiling_info

    # ---- concurrent.futures.Future, without a condition per future ---------------------------------------------------

    @property
    def _waiters(self) -> List[Any]:  # type: ignore[override]  # only touched with _LOCK held
        self._before_blocking()  # concurrent.futures.wait() and as_completed() install waiters before they block
        if self._waiter_list is None:
            self._waiter_list = []
        return self._waiter_list

    @property
    def _done_callbacks(self) -> List[Callable[[Any], Any]]:  # only touched with _LOCK held
        if self._callback_list is None:
            self._callback_list = []
        return self._callback_list

    def result(self, timeout: Optional[float] = None) -> Any:
        if self._state == FINISHED and self._exception is None and not output.unprinted:
            # settled, and no task output waits to be printed (an empty dict, read without the lock, as output.py
            # allows): set_result wrote the value before the state (under the GIL, in order)
            return self._result
        self._before_blocking()
        with _LOCK:
            self._wait_until_done(timeout)
            if output.unprinted:
                self._wait_printed()
            if self._state != FINISHED:
                raise concurrent.futures.CancelledError()
            if self._exception is not None:
                try:
                    raise self._exception
                finally:
                    self = None  # type: ignore[assignment]  # break the traceback's cycle, as Future does
            return self._result

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        self._before_blocking()
        with _LOCK:
            self._wait_until_done(timeout)
            if output.unprinted:
                self._wait_printed()
            if self._state != FINISHED:
                raise concurrent.futures.CancelledError()
            return self._exception

    def set_result(self, result: Any) -> None:
        with _LOCK:
            if self._state in _DONE:
                raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")
            self._set_result_locked(result)
        self._invoke_callbacks()

    def _set_result_locked(self, result: Any) -> None:
        self._result = result
        self._state = FINISHED
        for waiter in self._waiter_list or ():
            waiter.add_result(self)
        self._wake_sleepers()
        if self._latch is not None:
            self._latch.settled += 1

    def set_exception(self, exception: Optional[BaseException]) -> None:
        with _LOCK:
            if self._state in _DONE:
                raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")
            self._exception = exception
            self._state = FINISHED
            for waiter in self._waiter_list or ():
                waiter.add_exception(self)
            self._wake_sleepers()
            latch = self._latch
            if latch is not None:
                latch.settled += 1
                if not latch.failed:
                    latch.failed = True
                    if latch.waiting is not None:
                        latch.waiting._wake_sleepers()
        self._invoke_callbacks()

    def cancel(self) -> bool:
        if not self._cancel_locally():
            return self.cancelled()
        if self._canceller is not None:
            self._canceller.cancel_task(self._task_id)
        return True

    def _cancel_locally(self) -> bool:
        """Cancel without telling the scheduler; True if this call moved the future from pending to cancelled."""
        # Straight to CANCELLED_AND_NOTIFIED, which is what wait() and as_completed() count as done: the base class
        # leaves a cancelled future in CANCELLED until an executor calls set_running_or_notify_cancel, so without
        # this a wait() on it would never return.
        with _LOCK:
            if self._state in _DONE:
                return False
            self._state = CANCELLED_AND_NOTIFIED
            for waiter in self._waiter_list or ():
                waiter.add_cancelled(self)
            self._wake_sleepers()
            if self._latch is not None:
                self._latch.settled += 1
        self._invoke_callbacks()
        return True

    def _invoke_callbacks(self) -> None:
        for callback in self._callback_list or ():
            try:
                callback(self)
            except Exception:
                _LOGGER.exception("exception calling callback for %r", self)

    def _wait_unless_failed(self, latch: FailureLatch, timeout: float = -1.0) -> bool:
        """Block until this future is done or another future sharing `latch` failed (True), or until `timeout`
        seconds passed (False; -1: no limit)."""
        self._before_blocking()
        with _LOCK:
            latch.waiting = self
            try:
                deadline = time.monotonic() + timeout if timeout >= 0 else None
                while self._state not in _DONE and not latch.failed:
                    remaining = -1.0
                    if deadline is not None:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            return False
                    self._sleep(remaining)
                return True
            finally:
                latch.waiting = None

    def _before_blocking(self) -> None:
        """Inside a task, waiting on a pending future parks the processor, so the worker runs the children the task
        may be waiting for on another one (see scaler/worker/agent.py): no deadlock when parents fill every worker."""
        on_block = task_context.on_block
        if on_block is not None and self._state not in _DONE:
            on_block()

    def _wait_until_done(self, timeout: Optional[float]) -> None:
        """With _LOCK held once: return when done, or raise TimeoutError after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._state not in _DONE:
            remaining = -1.0
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise concurrent.futures.TimeoutError()
            self._sleep(remaining)

    def _wait_printed(self) -> None:
        """With _LOCK held once: let the task's output be printed before its result is seen (output.py)."""
        _LOCK.release()
        try:
            output.wait_printed(self._task_id)
        finally:
            _LOCK.acquire()

    def _sleep(self, timeout: float) -> None:
        """With _LOCK held once: release it until woken by _wake_sleepers() or `timeout` (-1: none) passed."""
        sleeper = allocate_lock()
        sleeper.acquire()
        if self._sleepers is None:
            self._sleepers = []
        self._sleepers.append(sleeper)
        _LOCK.release()
        try:
            sleeper.acquire(True, timeout)
        finally:
            _LOCK.acquire()
            if self._sleepers is not None and sleeper in self._sleepers:
                self._sleepers.remove(sleeper)

    def _wake_sleepers(self) -> None:
        sleepers = self._sleepers
        if sleepers:
            self._sleepers = None
            for sleeper in sleepers:
                sleeper.release()

    @staticmethod
    def _settle_values(
        futures: List[ScalerFuture], values: List[Any], profiling_infos: Optional[List[Optional[ProfilingInfo]]]
    ) -> None:
        """Set the results of several futures at once (the IO thread, with a frame's results): futures[i] gets
        values[i] (and profiling_infos[i]; None: none has any), with one acquisition of the lock for all of them; a
        future the user cancelled meanwhile keeps its cancellation. Parallel lists, not a tuple per future: fewer
        objects for the garbage collector (see send_queue.py)."""
        with _LOCK:
            settled = []
            for index, future in enumerate(futures):
                if future._state in _DONE:
                    continue
                if profiling_infos is not None:
                    future._profiling_info = profiling_infos[index]
                future._set_result_locked(values[index])
                if future._callback_list:
                    settled.append(future)
        for future in settled:
            future._invoke_callbacks()

    def _settle(self, value: Any, is_exception: bool, profiling_info: Optional[ProfilingInfo]) -> None:
        """Called by the IO thread; a future the user cancelled meanwhile keeps its cancellation."""
        self._profiling_info = profiling_info  # before the result, so whoever wakes on it sees the info
        try:
            if is_exception:
                self.set_exception(value)
            else:
                self.set_result(value)
        except concurrent.futures.InvalidStateError:
            self._profiling_info = None  # the cancel was decided first
