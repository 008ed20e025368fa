"""The sans-IO cores rate limit the warnings peers cause: a few lines per peer and in all, then one summary per
interval, with the time the shell passes in (no clock in the cores)."""

from __future__ import annotations

import logging
import os

from scaler.config import (
    DEFAULT_PEER_EVENTS_PER_INTERVAL,
    DEFAULT_PEER_WARNINGS_INTERVAL_SECONDS,
    DEFAULT_PEER_WARNINGS_PER_INTERVAL,
    DEFAULT_PEER_WARNINGS_PER_PEER,
)
from scaler.protocol import PROTOCOL_VERSION, ClientDisconnect, Hello, ObjectPut, Role
from scaler.testing.scheduler_harness import CLIENT
from scaler.testing.scheduler_harness import Harness as SchedulerHarness
from tests.worker.core_harness import Harness as WorkerHarness


def _warnings(caplog) -> list:
    return [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]


def test_scheduler_malformed_frames_from_many_strangers_give_a_bounded_log_and_a_summary(caplog) -> None:
    harness = SchedulerHarness()
    with caplog.at_level(logging.WARNING):
        for _ in range(100):
            harness.core.receive_malformed(b"X|one|peer", "garbage", harness.now)
        for _ in range(2000):
            harness.core.receive_malformed(os.urandom(8), "garbage", harness.now)
        assert len(_warnings(caplog)) == DEFAULT_PEER_WARNINGS_PER_INTERVAL
        harness.tick(DEFAULT_PEER_WARNINGS_INTERVAL_SECONDS)
    *lines, summary = _warnings(caplog)
    assert len(lines) == DEFAULT_PEER_WARNINGS_PER_INTERVAL
    assert summary.startswith(f"suppressed {2100 - len(lines)} warning(s) in 10.0 s (X|one|peer: 95, ")
    assert harness.core.malformed == 2100, "every frame is still counted"


def test_scheduler_refusals_and_object_limits_are_rate_limited_per_peer(caplog) -> None:
    harness = SchedulerHarness(max_objects_per_client=1)
    harness.connect_client()
    with caplog.at_level(logging.WARNING):
        for _ in range(50):
            harness.send(b"X|old|peer", Hello(protocol_version=0, role=Role.client, name="old"))
        for _ in range(50):
            put = ObjectPut(object_id=os.urandom(32), chunk_index=0, chunk_count=1, payload=b"x", total_size=1)
            harness.send(CLIENT, put)
        harness.core.shutdown("test over")  # the summary is not held back at exit
    warnings = _warnings(caplog)
    assert sum("protocol version 0 is not supported" in line for line in warnings) == DEFAULT_PEER_WARNINGS_PER_PEER
    assert sum("the limit: object dropped" in line for line in warnings) == DEFAULT_PEER_WARNINGS_PER_PEER
    assert warnings[-1].startswith("suppressed 89 warning(s)") and "X|old|peer: 45" in warnings[-1]


def test_scheduler_lines_on_peers_coming_and_going_are_bounded_too(caplog) -> None:
    """Every line while many peers connect once (a cluster starting); a few per peer that loops."""
    harness = SchedulerHarness()
    with caplog.at_level(logging.INFO, logger="scaler.scheduler.core"):
        for index in range(DEFAULT_PEER_EVENTS_PER_INTERVAL):
            harness.send(f"W|{index}".encode(), Hello(protocol_version=PROTOCOL_VERSION, role=Role.worker, capacity=1))
    assert sum("connected" in record.getMessage() for record in caplog.records) == DEFAULT_PEER_EVENTS_PER_INTERVAL
    caplog.clear()
    harness = SchedulerHarness()
    hello = Hello(protocol_version=PROTOCOL_VERSION, role=Role.client, name="looping")
    with caplog.at_level(logging.INFO, logger="scaler.scheduler.core"):
        for _ in range(100):
            harness.send(b"C|looping", hello, ClientDisconnect(shutdown_cluster=False))
        harness.tick(DEFAULT_PEER_WARNINGS_INTERVAL_SECONDS)
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == DEFAULT_PEER_WARNINGS_PER_PEER + 1, lines
    assert lines[-1] == "suppressed 195 line(s) on peers in 10.0 s (C|looping: 195)"


def test_worker_duplicate_tasks_are_rate_limited(caplog) -> None:
    harness = WorkerHarness()
    harness.connect(peer_timeout_ms=60_000)
    task = harness.task()
    with caplog.at_level(logging.WARNING):
        for _ in range(100):
            harness.send(task)
        harness.tick(DEFAULT_PEER_WARNINGS_INTERVAL_SECONDS)
    warnings = _warnings(caplog)
    assert sum("ignored task" in line for line in warnings) == DEFAULT_PEER_WARNINGS_PER_PEER
    assert warnings[-1] == "Worker[test]: suppressed 94 warning(s) in 10.0 s (task received twice: 94)"


def test_worker_dying_processors_are_summed_up_at_exit(caplog) -> None:
    harness = WorkerHarness()
    harness.connect()
    with caplog.at_level(logging.WARNING):
        for _ in range(20):
            harness.die(harness.core.active.number)
        harness.core.stop(0, "test over")
    warnings = _warnings(caplog)
    assert sum("died with signal SIGKILL" in line for line in warnings) == DEFAULT_PEER_WARNINGS_PER_PEER
    assert warnings[-1] == "Worker[test]: suppressed 15 warning(s) in 0.0 s (processor died: 15)"
