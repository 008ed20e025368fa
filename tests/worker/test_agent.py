"""The worker's conversation with the scheduler: handshake, heartbeats, Goodbye, death timeout, disconnect."""

from __future__ import annotations

import os
import signal

import psutil

from scaler import config
from scaler.drop_streak import DROPS_BEFORE_STOPPING
from scaler.protocol import PROTOCOL_VERSION, Goodbye, Role, WorkerDisconnect, WorkerRetire, heartbeat_flags
from scaler.testing.processes import ScalerProcess, wait_for
from tests.worker.helpers import wait_exit, wait_heartbeat
from tests.worker.peer import SchedulerPeer


def test_hello_describes_the_worker(worker):
    hello = worker.hello
    assert hello.protocol_version == PROTOCOL_VERSION
    assert hello.role == Role.worker
    assert hello.capacity == 1000
    assert worker.identity.startswith(b"W|")
    assert hello.name == worker.identity.decode()
    agent_pid = psutil.Process(worker.process.pid).children()[0].pid
    assert hello.pid == agent_pid


def test_queue_size_is_the_capacity(peer, start_cluster):
    start_cluster("--queue-size", "7")
    _, hello = peer.accept()
    assert hello.capacity == 7


def test_heartbeats_follow_the_schedulers_interval_and_measure_lag(peer, worker):
    first = wait_heartbeat(peer, lambda hb: True)
    assert first.agent_rss > 0 and first.processor_rss > 0
    assert first.flags & heartbeat_flags.PROCESSOR_INITIALIZED
    assert first.queued == 0 and first.running == 0
    echoed = wait_heartbeat(peer, lambda hb: hb.lag_us > 0, what="a heartbeat carrying the measured lag")
    assert echoed.lag_us < 2_000_000
    start = len(peer.heartbeats)
    wait_for(lambda: peer.pump(0.02) or len(peer.heartbeats) - start > 10, 10, "eleven heartbeats", interval=0)
    # the agent's own send times, median gap: neither this process's pauses nor one late beat on a loaded machine count
    sent_at_us = [hb.sent_at_us for _, _, hb in peer.heartbeats[start : start + 11]]
    gaps = sorted(later - earlier for earlier, later in zip(sent_at_us, sent_at_us[1:]))
    assert 50_000 <= gaps[len(gaps) // 2] <= 500_000, f"the scheduler asked for one every 100 ms; gaps {gaps}"


def test_refused_worker_logs_the_reason_and_exits_non_zero(peer, start_cluster):
    process = start_cluster()
    peer.accept(accepted=False, reason="protocol version 9 is not 1")
    assert wait_exit(process, peer) != 0
    assert "scheduler refused this worker: protocol version 9 is not 1" in process.output()


def test_goodbye_stops_the_worker_cleanly(peer, worker):
    peer.send(worker.identity, Goodbye(reason="scheduler is stopping"))
    assert wait_exit(worker.process, peer) == 0
    assert "scheduler said goodbye: scheduler is stopping" in worker.process.output()


def test_worker_exits_when_the_scheduler_goes_silent(peer, start_cluster):
    peer.echo_heartbeats = False
    process = start_cluster("--death-timeout", "1")
    peer.accept()
    assert wait_exit(process, peer, timeout=10) != 0
    assert "nothing heard from the scheduler for 1s" in process.output()


def test_worker_gives_up_when_nobody_answers_hello(peer, start_cluster):
    process = start_cluster("--death-timeout", "1")
    assert wait_exit(process, peer, timeout=10) != 0
    assert f"no answer from {peer.address} within 1s" in process.output()


def test_sigint_sends_worker_disconnect(peer, worker):
    wait_heartbeat(peer, lambda hb: True, what="a heartbeat: the worker read our HelloReply and is registered")
    agent = psutil.Process(worker.process.pid).children()[0]
    os.kill(agent.pid, signal.SIGINT)
    (identity, message) = peer.wait_for(lambda received: type(received[1]) is WorkerDisconnect)
    assert identity == worker.identity and "SIGINT" in message.reason
    assert wait_exit(worker.process, peer) == 0


def test_sigterm_asks_to_retire_and_the_worker_exits_on_the_go_ahead(peer, worker):
    wait_heartbeat(peer, lambda hb: True, what="a heartbeat: the worker read our HelloReply and is registered")
    agent = psutil.Process(worker.process.pid).children()[0]
    os.kill(agent.pid, signal.SIGTERM)
    os.kill(agent.pid, signal.SIGTERM)  # a manager signalling every process, and scaler_cluster passing it on
    (identity, message) = peer.wait_for(lambda received: type(received[1]) is WorkerRetire)
    assert identity == worker.identity and message.reason == "received SIGTERM"
    assert message.deadline_ms == int(config.RETIRE_TIMEOUT.default * 1000)
    peer.pump_for(0.3)
    assert worker.process.popen.poll() is None, "retiring: it waits for the scheduler"
    peer.send(identity, Goodbye(reason="retired: every task you held is settled", retired=True))
    assert wait_exit(worker.process, peer) == 0
    assert not any(type(received[1]) is WorkerDisconnect for received in peer.inbox)


def test_stopping_the_cluster_disconnects_every_worker(peer, start_cluster):
    process = start_cluster(workers=2)
    identities = {peer.accept()[0], peer.accept()[0]}
    wait_for(lambda: len(process.descendants()) == 6, 10, "2 agents, 2 fork servers and 2 processors")
    process.popen.send_signal(signal.SIGINT)
    for _ in range(2):
        identity, _ = peer.wait_for(lambda received: type(received[1]) is WorkerDisconnect)
        identities.remove(identity)
    assert wait_exit(process, peer) == 0


def make_bytes(size: int) -> bytes:
    return b"x" * size


def test_a_worker_dropped_again_and_again_for_a_large_frame_stops_and_says_why(tmp_path) -> None:
    """An older scheduler (it announces no frame limit) drops a worker whose result frame is over its limit; given the
    task again each time the worker registers again, the worker would loop forever. It stops after a few, saying
    why."""
    peer = SchedulerPeer(max_frame_bytes=2 * 1024 * 1024)
    process = ScalerProcess(
        "scaler.cluster", ["-n", "1", "--heartbeat-interval", "0.1", peer.address], str(tmp_path / "c.log")
    )
    try:
        for _ in range(DROPS_BEFORE_STOPPING):
            identity, _ = peer.accept()
            peer.send(identity, peer.task(make_bytes, 4 * 1024 * 1024))  # its result frame is over the limit
        process.wait_for_output("closed the connection 3 times in a row", timeout=30)
        log = process.output()
        assert "--max-frame-bytes" in log and "Stopping rather than sending it again" in log, log
        assert process.popen.wait(20) != 0
        assert "Worker[0] lost" in process.output()
    finally:
        process.stop()
        peer.close()
