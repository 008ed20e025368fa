"""The JIT warm-up (scaler/scheduler/warmup.py): its synthetic peers (scaler/testing/py), and a
private scheduler that leaves nothing."""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import signal
import tempfile
from types import SimpleNamespace
from typing import Callable, Dict, List

import pytest

from scaler.protocol import ObjectResponse, TaskResult, decode_frame_for_routing
from scaler.scheduler import shell, warmup
from scaler.scheduler.core import SchedulerCore
from scaler.scheduler.settings import SchedulerSettings
from scaler.scheduler.shell import SchedulerShell
from scaler.scheduler.synthetic_peers import (
    CLIENT,
    FUNCTION,
    FUNCTION_ID,
    RESULTS_PER_ROUND,
    TASKS_PER_ROUND,
    WORKERS,
    SyntheticPeers,
)

pytestmark = pytest.mark.timeout(60)


def test_the_synthetic_peers_route_a_map_and_a_tree_through_a_core_and_leave_it_empty() -> None:
    """As real peers do: the client puts its function before its tasks, each worker fetches it with its first ones."""
    peers = SyntheticPeers()
    core = SchedulerCore(SchedulerSettings("tcp://127.0.0.1:1"), 1000.0)

    def send(peer: bytes, frame: bytes) -> None:
        core.receive(peer, decode_frame_for_routing(frame), 1000.0)
        core.validate()

    for identity, hello in peers.hellos():
        send(identity, hello)
    assert len(core.workers) == 2 and len(core.clients) == 1
    send(CLIENT, peers.function())
    assert list(core.objects) == [FUNCTION_ID]
    fetched: Dict[bytes, List[ObjectResponse]] = {}  # worker -> the ObjectResponses it was sent
    for round_number in range(1, 3):  # the second round sends the same bytes: the task ids are free again
        results = 0
        for frame in peers.client_frames:
            send(CLIENT, frame)
        while True:
            outgoing = core.take_outgoing()
            replies = []
            for peer, chunks in outgoing.items():
                if peer in WORKERS:
                    frame = b"".join(chunks)
                    responses = [m for m in decode_frame_for_routing(frame) if m.WHICH == ObjectResponse.WHICH]
                    fetched.setdefault(peer, []).extend(responses)
                    replies.append((peer, peers.answer(peer, frame)))
            results += sum(peers.results_in(b"".join(chunks)) for peer, chunks in outgoing.items() if peer == CLIENT)
            if not any(reply for _, reply in replies):
                break
            for peer, reply in replies:
                if reply:
                    send(peer, reply)
        assert results == RESULTS_PER_ROUND
        assert core.sent_counts[TaskResult.WHICH] == round_number * RESULTS_PER_ROUND
        assert not core.tasks and list(core.objects) == [FUNCTION_ID]
    for worker in WORKERS:
        [response] = fetched[worker]
        assert response.found and response.object_id == FUNCTION_ID and response.payload == FUNCTION
    for identity, goodbye in peers.goodbyes():
        send(identity, goodbye)
    assert not core.workers and not core.clients and not core.objects


def _warm_up_dirs() -> set:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "scaler-jit-warmup-*")))


def test_the_private_scheduler_serves_the_rounds_logs_nothing_and_leaves_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    before = _warm_up_dirs()
    report = asyncio.run(warmup.warm_up(0.0, SchedulerShell))  # one round, however short the time
    assert report.rounds == 1 and report.tasks == TASKS_PER_ROUND
    assert not [record for record in caplog.records if record.name.startswith("scaler")]
    assert _warm_up_dirs() == before, "its ipc endpoints and their directory are gone"
    core_logger = logging.getLogger("scaler.scheduler.core")
    core_logger.info("after the warm-up")
    assert [record.getMessage() for record in caplog.records if record.name.startswith("scaler")] == [
        "after the warm-up"
    ]


def test_an_interrupted_warm_up_ends_after_the_round_it_is_in() -> None:
    report = asyncio.run(warmup.warm_up(60.0, SchedulerShell, interrupted=lambda: True))
    assert report.rounds == 1 and report.seconds < 30


def test_only_pypy_is_warmed() -> None:
    assert warmup.should_warm_up(1.0) is warmup.IS_PYPY
    assert warmup.should_warm_up(0.0) is False


def _run_warm_up_jit(monkeypatch: pytest.MonkeyPatch, fake: Callable) -> SimpleNamespace:
    monkeypatch.setattr(shell, "warm_up", fake)
    signals: list = []
    real = SimpleNamespace(_on_signal=signals.append, signals=signals)  # the bound SchedulerShell that serves next
    loop = asyncio.new_event_loop()
    try:
        shell._warm_up_jit(loop, real, 1.0)
        for signum in (signal.SIGINT, signal.SIGTERM):  # its handlers are gone: the serving shell installs its own
            assert loop.remove_signal_handler(signum) is False
    finally:
        loop.close()
    return real


def test_a_failed_warm_up_is_logged_and_the_scheduler_serves_anyway(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(seconds: float, make_shell: Callable, interrupted: Callable) -> warmup.WarmupReport:
        raise RuntimeError("JIT warm-up: 3 synthetic tasks were left in the private scheduler")

    caplog.set_level(logging.INFO)
    real = _run_warm_up_jit(monkeypatch, broken)  # returns: run_scheduler goes on to serve
    assert real.signals == []
    messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "scaler.scheduler.shell"]
    assert messages == [
        (logging.INFO, "Scheduler: warming up the JIT for 1.0 s before serving"),
        (logging.ERROR, "Scheduler: the JIT warm-up failed; serving without it"),
    ]
    assert "3 synthetic tasks were left" in caplog.text  # the traceback says what went wrong


def test_a_sigterm_during_the_warm_up_ends_it_and_then_stops_the_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    async def until_interrupted(seconds: float, make_shell: Callable, interrupted: Callable) -> warmup.WarmupReport:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            if interrupted():
                return warmup.WarmupReport(1, TASKS_PER_ROUND, 0.0)
            await asyncio.sleep(0.01)
        raise AssertionError("the SIGTERM never reached the warm-up")

    real = _run_warm_up_jit(monkeypatch, until_interrupted)
    assert real.signals == [signal.SIGTERM]  # told before run(): it stops at once, as on a SIGTERM while serving


def test_a_warm_up_whose_peers_fail_at_once_stops_its_private_scheduler_and_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def failing(*args: object) -> int:  # before any await: the private shell's run() has not begun
        raise RuntimeError("no sockets for the synthetic peers")

    monkeypatch.setattr(warmup, "_drive", failing)
    before = _warm_up_dirs()
    with pytest.raises(RuntimeError, match="no sockets"):
        asyncio.run(warmup.warm_up(1.0, SchedulerShell))  # returns: a stop before run() still stops it
    assert _warm_up_dirs() == before
