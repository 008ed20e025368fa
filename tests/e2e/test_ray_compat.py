"""scaler.compat.ray against a real scheduler and workers (started from their CLIs): every call of the layer, Ray's
semantics for references given as arguments (resolved on the worker, also one level down in lists and dicts), and
Ray's error names. Tasks that must stay unfinished wait on a file the test creates, never on a guessed sleep; every
wait is bounded."""

from __future__ import annotations

import concurrent.futures
import os
import sys
import time
from pathlib import Path
from typing import Iterator

import cloudpickle
import pytest

import scaler.compat.ray as ray
from scaler.client import ScalerFuture
from scaler.compat.ray import session
from scaler.compat.ray.exceptions import (
    GetTimeoutError,
    RayError,
    RayTaskError,
    TaskCancelledError,
    WorkerCrashedError,
)
from scaler.errors import ProcessorDiedError, RemoteTraceback, ScalerError

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WAIT = 60  # seconds any result may take on a loaded machine; far less when all is well
GATE_SECONDS = 60  # the longest a gated task waits for its file


class Overdrawn(Exception):
    """A user's own exception class."""


@ray.remote
def double(x):
    return 2 * x


@ray.remote
def add(a, b=0):
    return a + b


@ray.remote
def gated(path, value=None):
    """Returns `value` once `path` exists (or after GATE_SECONDS)."""
    deadline = time.monotonic() + GATE_SECONDS
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return value


@ray.remote
def describe(items):
    """What a task receives for a list or dict argument, and what ray.get of its references gives there."""
    values = items.values() if isinstance(items, dict) else items
    kinds = [type(item).__name__ for item in values]
    got = [ray.get(item) if isinstance(item, ray.ObjectRef) else item for item in values]
    return kinds, got


@ray.remote
def withdraw(amount):
    raise Overdrawn(f"cannot withdraw {amount}")


@ray.remote
def die():
    os._exit(1)


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[str]:
    """A file path gated tasks wait for; created at the end, so that no task outlives its test."""
    path = str(tmp_path / "open")
    try:
        yield path
    finally:
        Path(path).touch()


# ---- remote functions and options -------------------------------------------------------------------------------


def test_remote_functions_run_on_workers(ray_connected) -> None:
    assert ray.is_initialized()
    assert ray.get(double.remote(21), timeout=WAIT) == 42
    assert ray.get(add.remote(1, b=2), timeout=WAIT) == 3
    assert ray.get([double.remote(i) for i in range(10)], timeout=WAIT) == [2 * i for i in range(10)]


def test_remote_functions_refuse_direct_calls_and_bad_arguments(ray_connected) -> None:
    with pytest.raises(TypeError, match="remote"):
        double(1)
    with pytest.raises(TypeError):
        double.remote(1, 2, 3)  # checked at the call, as Ray does
    with pytest.raises(TypeError):
        add.remote(ray.put(1), c=3)  # also when the call holds references


def test_a_function_keyword_named_profiling_reaches_the_function(ray_connected) -> None:
    @ray.remote
    def echo(profiling):
        return profiling

    assert ray.get(echo.remote(profiling="yes"), timeout=WAIT) == "yes"


def test_num_cpus_of_one_runs_on_any_worker(ray_connected) -> None:
    assert ray.get(double.options(num_cpus=1).remote(4), timeout=WAIT) == 8
    assert ray.get(ray.remote(num_cpus=0.5)(lambda: "ran").remote(), timeout=WAIT) == "ran"


def test_num_gpus_waits_for_a_worker_offering_a_gpu(ray_connected) -> None:
    on_gpu = double.options(num_gpus=1).remote(5)
    custom = double.options(resources={"special": 2}).remote(6)
    ready, waiting = ray.wait([on_gpu, custom], num_returns=2, timeout=1.0)
    assert ready == [] and waiting == [on_gpu, custom]  # no worker offers either yet
    ray_connected.add_cluster(1, "--resources", "gpu=1,special=2")
    assert ray.get([on_gpu, custom], timeout=WAIT) == [10, 12]


def test_retry_exceptions_runs_a_failing_task_again(ray_connected, tmp_path: Path) -> None:
    counter = str(tmp_path / "calls")

    @ray.remote(max_retries=2, retry_exceptions=True)
    def flaky():
        calls = os.path.getsize(counter) + 1 if os.path.exists(counter) else 1
        with open(counter, "a") as file:
            file.write("x")
        if calls < 3:
            raise ConnectionError(f"call {calls}")
        return calls

    assert ray.get(flaky.remote(), timeout=WAIT) == 3

    once = str(tmp_path / "once")

    @ray.remote(max_retries=2)  # without retry_exceptions: exceptions are not retried, as in Ray
    def fails_once():
        Path(once).write_text("ran")
        raise ConnectionError("no retry")

    with pytest.raises(ConnectionError):
        ray.get(fails_once.remote(), timeout=WAIT)


# ---- references as arguments ------------------------------------------------------------------------------------


def test_an_unfinished_reference_is_resolved_on_the_worker(ray_connected, gate: str) -> None:
    slow = gated.remote(gate, 20)
    started = time.monotonic()
    total = add.remote(slow, 1)  # sent now, with the dependency: the caller does not wait for `slow`
    chained = double.remote(total)
    assert time.monotonic() - started < 1.0
    assert ray.wait([chained], timeout=0.3) == ([], [chained])
    twice = add.remote(slow, slow)  # one dependency, named twice
    Path(gate).touch()
    assert ray.get(chained, timeout=WAIT) == 42
    assert ray.get(twice, timeout=WAIT) == 40


def test_finished_and_put_references_as_arguments(ray_connected) -> None:
    done = double.remote(5)
    assert ray.get(done, timeout=WAIT) == 10
    assert ray.get(add.remote(done, b=done), timeout=WAIT) == 20
    big = ray.put(list(range(100_000)))  # over the inline limit: an object, fetched once per worker
    assert ray.get(big, timeout=WAIT) == list(range(100_000))
    assert ray.get([ray.remote(len).remote(big), ray.remote(sum).remote(big)], timeout=WAIT) == [
        100_000,
        sum(range(100_000)),
    ]


def test_references_inside_a_list_reach_the_task_as_references(ray_connected, gate: str) -> None:
    pending = gated.remote(gate, "late")
    refs = [double.remote(1), ray.put("put"), pending, "plain"]
    described = describe.remote(refs)
    Path(gate).touch()
    kinds, got = ray.get(described, timeout=WAIT)
    assert kinds == ["ObjectRef", "ObjectRef", "ObjectRef", "str"]
    assert got == [2, "put", "late", "plain"]


def test_references_inside_a_dict_reach_the_task_as_references(ray_connected) -> None:
    kinds, got = ray.get(describe.remote({"a": double.remote(2), "b": ray.put(7), "c": 1}), timeout=WAIT)
    assert kinds == ["ObjectRef", "ObjectRef", "int"]
    assert got == [4, 7, 1]


def test_nested_references_resolve_through_chains(ray_connected) -> None:
    @ray.remote
    def total(refs):
        return sum(ray.get(refs))

    level1 = [double.remote(i) for i in range(4)]  # 0 2 4 6
    level2 = total.remote(level1)  # 12
    level3 = add.remote(level2, b=total.remote([level2, double.remote(level2)]))  # 12 + (12 + 24)
    assert ray.get(level3, timeout=WAIT) == 48


def test_an_unfinished_reference_deeper_than_one_level_is_refused(ray_connected, gate: str) -> None:
    pending = gated.remote(gate, 1)
    with pytest.raises(TypeError, match="not finished"):
        describe.remote([[pending]])
    done = double.remote(3)
    ray.get(done, timeout=WAIT)
    kinds, got = ray.get(describe.remote([[done]]), timeout=WAIT)  # a finished one travels with its value
    assert kinds == ["list"] and ray.get(got[0][0]) == 6


def test_a_dependency_finished_before_the_scheduler_saw_the_call_is_sent_again(ray_connected) -> None:
    """The race dependencies.py handles, made certain: a dependency the scheduler does not know (as it forgets a
    result nobody waited for) is answered TaskNotFoundError, then sent again with the value."""
    connection = session.connection_of(session.current())
    unknown = ScalerFuture(os.urandom(16), connection)
    forgotten = ray.ObjectRef(unknown, None, ray.refs._NO_VALUE, "forgotten")
    call = add.remote(forgotten, 1)
    unknown.set_result(41)
    assert ray.get(call, timeout=WAIT) == 42

    unknown = ScalerFuture(os.urandom(16), connection)
    forgotten = ray.ObjectRef(unknown, None, ray.refs._NO_VALUE, "forgotten")
    call = double.remote(forgotten)
    unknown.set_result(4)
    ready, _ = ray.wait([call], timeout=WAIT)
    assert ready == [call] and ray.get(call, timeout=0) == 8


# ---- get, put, wait, cancel -------------------------------------------------------------------------------------


def test_get_times_out(ray_connected, gate: str) -> None:
    slow = gated.remote(gate, 1)
    started = time.monotonic()
    with pytest.raises(GetTimeoutError) as raised:
        ray.get(slow, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 5
    assert isinstance(raised.value, TimeoutError) and isinstance(raised.value, ScalerError)
    with pytest.raises(GetTimeoutError):
        ray.get([double.remote(1), slow], timeout=0.3)
    with pytest.raises(GetTimeoutError):
        ray.get(slow, timeout=0)
    Path(gate).touch()
    assert ray.get(slow, timeout=WAIT) == 1


def test_get_and_wait_refuse_what_is_not_a_reference(ray_connected) -> None:
    with pytest.raises(ValueError):
        ray.get(1)
    with pytest.raises(TypeError):
        ray.get([double.remote(1), 2])
    ref = double.remote(1)
    with pytest.raises(ValueError):
        ray.wait([ref, ref])
    with pytest.raises(ValueError):
        ray.wait([ref], num_returns=2)
    with pytest.raises(TypeError):
        ray.put(ref)


def test_put_sends_once_and_gets_back(ray_connected) -> None:
    ref = ray.put({"weights": [1.0, 2.0]})
    assert ray.get(ref) == {"weights": [1.0, 2.0]}
    assert (
        ray.get([ray.remote(lambda value: value["weights"][1]).remote(ref) for _ in range(4)], timeout=WAIT)
        == [2.0] * 4
    )


def test_wait_returns_num_returns_ready_in_order(ray_connected, gate: str) -> None:
    fast = [double.remote(i) for i in range(3)]
    blocked = [gated.remote(gate, i) for i in range(2)]
    refs = [blocked[0], fast[0], fast[1], blocked[1], fast[2]]
    ready, waiting = ray.wait(refs, num_returns=3, timeout=WAIT)
    assert ready == fast and waiting == [blocked[0], blocked[1]]
    ready, waiting = ray.wait(refs, num_returns=2, timeout=WAIT)
    assert ready == [fast[0], fast[1]] and waiting == [blocked[0], blocked[1], fast[2]]

    started = time.monotonic()
    ready, waiting = ray.wait(refs, num_returns=5, timeout=0.5)  # two never finish in time
    assert 0.5 <= time.monotonic() - started < 5
    assert ready == fast and waiting == blocked
    Path(gate).touch()
    ready, waiting = ray.wait(refs, num_returns=5, timeout=WAIT)
    assert ready == refs and waiting == []


def test_wait_counts_failed_tasks_as_ready(ray_connected) -> None:
    failed = withdraw.remote(1)
    assert ray.wait([failed], timeout=WAIT) == ([failed], [])


def test_cancel_stops_a_running_task_and_its_dependents(ray_connected, gate: str) -> None:
    running = gated.remote(gate, 1)
    dependent = add.remote(running, 1)
    ray.cancel(running)
    with pytest.raises(TaskCancelledError) as raised:
        ray.get(running, timeout=WAIT)
    assert isinstance(raised.value, concurrent.futures.CancelledError)
    with pytest.raises(TaskCancelledError):
        ray.get(dependent, timeout=WAIT)
    with pytest.raises(TaskCancelledError):
        ray.get(double.remote(running), timeout=WAIT)  # a call on a cancelled reference is cancelled at once
    ray.cancel(ray.put(1))  # nothing to cancel: no error


def test_cancel_removes_a_queued_task_that_never_runs(ray_connected, gate: str, tmp_path: Path) -> None:
    ray_connected.wait_idle()
    slots = ray_connected.status(lambda status: status.worker_slots > 0).worker_slots
    blockers = [gated.remote(gate, n) for n in range(slots)]
    ray_connected.status(lambda status: status.free_slots == 0)  # every slot holds a blocker, until the gate opens
    marker = tmp_path / "ran"
    queued = ray.remote(lambda path: Path(path).touch()).remote(str(marker))
    ray_connected.status(lambda status: status.tasks_ready + status.tasks_assigned > slots)  # the scheduler has it
    ray.cancel(queued)
    with pytest.raises(TaskCancelledError):
        ray.get(queued, timeout=WAIT)
    Path(gate).touch()
    assert ray.get(blockers, timeout=WAIT) == list(range(slots))
    ray_connected.wait_idle()
    assert not marker.exists()


# ---- errors -----------------------------------------------------------------------------------------------------


def test_a_task_exception_is_a_ray_task_error_and_its_own_class(ray_connected) -> None:
    with pytest.raises(Overdrawn) as raised:
        ray.get(withdraw.remote(10), timeout=WAIT)
    error = raised.value
    assert isinstance(error, RayTaskError) and isinstance(error, RayError) and isinstance(error, ScalerError)
    assert isinstance(error.cause, Overdrawn) and "cannot withdraw 10" in str(error)
    assert isinstance(error.cause.__cause__, RemoteTraceback)  # the worker's traceback
    with pytest.raises(ZeroDivisionError):
        ray.get(ray.remote(lambda: 1 / 0).remote(), timeout=WAIT)


def test_a_failed_dependency_fails_its_dependents_with_its_error(ray_connected, gate: str) -> None:
    failing = withdraw.remote(5)
    ray.wait([failing], timeout=WAIT)
    with pytest.raises(Overdrawn):
        ray.get(add.remote(failing, 1), timeout=WAIT)  # failed before the call: not sent
    blocked = gated.remote(gate, 1)
    chained = add.remote(withdraw.remote(blocked), 1)  # fails on the scheduler, once `blocked` is done
    Path(gate).touch()
    with pytest.raises(Overdrawn):
        ray.get(chained, timeout=WAIT)


def test_a_dead_process_is_a_worker_crashed_error(ray_connected) -> None:
    with pytest.raises(WorkerCrashedError) as raised:
        ray.get(die.remote(), timeout=WAIT)
    assert isinstance(raised.value, ProcessorDiedError)


def test_remote_calls_and_init_inside_a_task_say_they_are_not_supported(ray_connected) -> None:
    @ray.remote
    def nested():
        errors = []
        for attempt in (lambda: double.remote(1), ray.init):
            try:
                attempt()
            except RuntimeError as error:
                errors.append(str(error))
        return errors

    errors = ray.get(nested.remote(), timeout=WAIT)
    assert len(errors) == 2 and "inside a task" in errors[0] and "inside a task" in errors[1]


# ---- references as futures --------------------------------------------------------------------------------------


def test_references_are_futures_and_awaitables(ray_connected) -> None:
    import asyncio

    assert double.remote(3).future().result(WAIT) == 6
    assert isinstance(withdraw.remote(1).future().exception(WAIT), Overdrawn)

    async def main():
        return await double.remote(4)

    assert asyncio.run(asyncio.wait_for(main(), WAIT)) == 8
