"""client.executor() against what the standard library's executors promise (the behaviours CPython's own
test_concurrent_futures checks for every executor), on a real cluster."""

from __future__ import annotations

import concurrent.futures
import threading
import time
import types

import pytest

from scaler import Client


def power(base, exponent):
    return base**exponent


def capture(*args, **kwargs):
    return args, kwargs


def fail_on(value, bad):
    if value == bad:
        raise ZeroDivisionError(f"failed on {value}")
    return value


@pytest.fixture
def executor(client: Client):
    with client.executor() as running:
        yield running


def test_it_is_an_executor_and_submit_returns_futures(executor) -> None:
    assert isinstance(executor, concurrent.futures.Executor)
    future = executor.submit(power, 2, 8)
    assert isinstance(future, concurrent.futures.Future)
    assert future.result(30) == 256


def test_submit_passes_every_keyword_to_the_function(executor) -> None:
    # fn is positional-only, as in Executor.submit: keywords named fn or self reach the function
    assert executor.submit(capture, 1, fn=2, self=3).result(30) == ((1,), {"fn": 2, "self": 3})
    assert executor.submit(power, base=3, exponent=2).result(30) == 9


def test_a_failing_call_sets_its_future_exception(executor) -> None:
    future = executor.submit(fail_on, 0, 0)
    assert isinstance(future.exception(30), ZeroDivisionError)
    with pytest.raises(ZeroDivisionError, match="failed on 0"):
        future.result()


def test_map_yields_results_in_order_lazily(executor) -> None:
    results = executor.map(power, range(20), range(20))
    assert isinstance(results, types.GeneratorType)  # an iterator, consumed as results are asked for
    assert list(results) == [n**n for n in range(20)]
    assert list(executor.map(power, [2, 3, 4], [1, 2])) == [2, 9]  # stops with the shortest iterable, as zip
    assert list(executor.map(power, [], [])) == []
    assert list(executor.map(abs, iter([-1, -2, -3]))) == [1, 2, 3]  # iterables, not only sequences


def test_map_raises_a_calls_exception_when_its_result_is_reached(executor) -> None:
    results = executor.map(fail_on, range(5), [3] * 5)
    assert [next(results) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ZeroDivisionError, match="failed on 3"):
        next(results)


def test_map_timeout_counts_from_the_map_call(executor) -> None:
    started = time.monotonic()
    results = executor.map(time.sleep, [0, 0, 20], timeout=1.5)
    assert next(results) is None and next(results) is None
    with pytest.raises(concurrent.futures.TimeoutError):
        next(results)
    assert time.monotonic() - started < 15  # the 20 s call was not waited for


def test_map_with_chunksize_groups_calls_and_keeps_order(executor) -> None:
    assert list(executor.map(power, range(40), [2] * 40, chunksize=7)) == [n**2 for n in range(40)]
    with pytest.raises(ZeroDivisionError):
        list(executor.map(fail_on, range(10), [8] * 10, chunksize=3))
    with pytest.raises(ValueError, match="chunksize must be >= 1"):
        executor.map(abs, [1], chunksize=0)
    with pytest.raises(TypeError, match="missing a required argument: 'exponent'"):
        executor.map(power, range(5), chunksize=2)  # each call is checked at map(), chunked or not


def test_closing_the_map_iterator_cancels_what_was_not_yielded(client: Client) -> None:
    executor = client.executor()
    results = executor.map(time.sleep, [0, 30, 30, 30])
    assert next(results) is None
    results.close()
    started = time.monotonic()
    executor.shutdown(wait=True)  # nothing left to wait for: the 30 s calls were cancelled
    assert time.monotonic() - started < 10


def test_shutdown_refuses_new_calls_and_leaves_the_client_connected(client: Client) -> None:
    executor = client.executor()
    future = executor.submit(power, 2, 3)
    executor.shutdown(wait=True)
    assert future.done() and future.result() == 8
    with pytest.raises(RuntimeError, match="after shutdown"):
        executor.submit(power, 2, 3)
    with pytest.raises(RuntimeError, match="after shutdown"):
        executor.map(abs, [1])
    executor.shutdown()  # idempotent
    assert client.submit(power, 2, 4).result(30) == 16


def test_shutdown_waits_for_running_calls_unless_told_not_to(client: Client) -> None:
    executor = client.executor()
    futures = [executor.submit(time.sleep, 0.5) for _ in range(3)]
    executor.shutdown(wait=False)
    assert all(future.result(30) is None for future in futures)  # still run to completion

    with client.executor() as executor:
        futures = [executor.submit(time.sleep, 0.3) for _ in range(4)]
    assert all(future.done() and not future.cancelled() for future in futures)  # the with block waited


def test_shutdown_cancel_futures_cancels_every_unfinished_call(client: Client) -> None:
    executor = client.executor()
    done = executor.submit(power, 2, 2)
    assert done.result(30) == 4
    slow = [executor.submit(time.sleep, 30) for _ in range(6)]
    executor.shutdown(wait=True, cancel_futures=True)
    assert all(future.cancelled() for future in slow)  # queued and running alike: the cluster stops them
    assert done.result() == 4


def test_futures_work_with_wait_and_as_completed_from_many_threads(executor) -> None:
    futures = []
    lock = threading.Lock()

    def submit_some(offset: int) -> None:
        for n in range(offset, offset + 25):
            future = executor.submit(power, n, 2)
            with lock:
                futures.append((n, future))

    threads = [threading.Thread(target=submit_some, args=(offset,)) for offset in range(0, 100, 25)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    done, not_done = concurrent.futures.wait([future for _, future in futures], timeout=60)
    assert not not_done and len(done) == 100
    assert sorted(future.result() for future in concurrent.futures.as_completed(done)) == sorted(
        n**2 for n, _ in futures
    )
