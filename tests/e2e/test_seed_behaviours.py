"""Seed-system behaviours that need real processes: a scheduler killed under a waiting client, and objects that
clear() deleted while workers may still hold them. The others are in tests/client/test_seed_behaviours.py."""

from __future__ import annotations

import signal
import time

import pytest

from scaler import Client
from scaler.errors import MissingObjectError, SchedulerGoneError


def add(a, b):
    return a + b


def test_a_killed_scheduler_fails_pending_results_with_timeout_error_within_timeout_seconds(scheduler) -> None:
    address, process = scheduler  # no workers: the task stays pending at the scheduler
    timeout_seconds = 3.0  # far below the scheduler's 30 s client timeout, which no longer decides
    with Client(address, timeout_seconds=timeout_seconds) as client:
        future = client.submit(add, 1, 2)
        assert future.running()
        process.popen.send_signal(signal.SIGKILL)
        process.popen.wait(10)
        killed_at = time.monotonic()
        with pytest.raises(TimeoutError) as raised:
            future.result(60)
        waited = time.monotonic() - killed_at
    assert isinstance(raised.value, SchedulerGoneError)
    assert "no message from the scheduler" in str(raised.value)
    # within timeout_seconds of the kill; 1.5 s of slack for a loaded machine, far from the old fixed 30 s
    assert waited < timeout_seconds + 1.5, waited


def test_a_reference_after_clear_raises_missing_object_error_though_workers_cached_it(cluster) -> None:
    address, _ = cluster
    with Client(address, timeout_seconds=20) as client:
        reference = client.send_object(list(range(5)), name="five")
        assert client.map(add, [(reference, [n]) for n in range(4)]) == [list(range(5)) + [n] for n in range(4)]
        client.clear()  # both workers ran a task with it, so they may still hold it: the call must not reach them
        with pytest.raises(MissingObjectError, match="five"):
            client.submit(add, reference, [9])
        assert client.submit(add, client.send_object([7]), [8]).result(30) == [7, 8]
