"""The heartbeat cadence stretched by the scheduler (docs/protocol.md, Heartbeat cadence), end to end: the real
scheduler, real workers and a real client follow the longer interval and are not timed out, and a peer that goes
silent is still dropped, after its stretched timeout."""

from __future__ import annotations

import operator
import time
from pathlib import Path

import pytest
import zmq

from scaler import Client
from scaler.protocol import PROTOCOL_VERSION, Hello, HelloReply, Role, decode_frame, encode
from tests.e2e.live_cluster import LiveCluster
from tests.e2e.monitor import counters

pytestmark = pytest.mark.timeout(120)

# Three peers heartbeating every 0.1 s would send 30 a second; the scheduler takes 10: it names 0.4 s (scale 4), and
# a worker timeout of 4 x 0.5 s.
INTERVAL_SECONDS, WORKER_TIMEOUT_SECONDS, BUDGET = 0.1, 0.5, 10
STRETCHED_INTERVAL_MS, STRETCHED_TIMEOUT_MS = 400, 2000


def test_peers_follow_a_stretched_cadence_and_a_silent_one_is_dropped_after_its_stretched_timeout(
    tmp_path: Path,
) -> None:
    cluster = LiveCluster(
        tmp_path,
        worker_timeout_seconds=WORKER_TIMEOUT_SECONDS,
        heartbeat_interval_seconds=INTERVAL_SECONDS,
        extra_args=["--heartbeats-per-second", str(BUDGET)],
    )
    context = zmq.Context()
    silent = context.socket(zmq.DEALER)
    silent.setsockopt(zmq.LINGER, 0)
    try:
        cluster.add_worker()
        cluster.add_worker()
        with Client(cluster.address) as client:
            cluster.wait_workers(2)
            assert client.submit(operator.add, 1, 2).result(timeout=30) == 3

            # a worker that says Hello and nothing more
            silent.setsockopt(zmq.ROUTING_ID, b"W|silent|1")
            silent.connect(cluster.address)
            hello = Hello(protocol_version=PROTOCOL_VERSION, role=Role.worker, name="silent", capacity=1)
            sent = time.monotonic()  # the scheduler hears it later: its silence cannot start before this
            silent.send(encode(hello))
            assert silent.poll(20_000), "no HelloReply"
            (reply,) = decode_frame(silent.recv())
            assert isinstance(reply, HelloReply) and reply.accepted
            assert (reply.heartbeat_interval_ms, reply.peer_timeout_ms) == (STRETCHED_INTERVAL_MS, STRETCHED_TIMEOUT_MS)

            # the live peers heartbeat at the stretched interval: about 2 / 0.4 s, not 2 / 0.1 s
            first = cluster.status(lambda status: len(status.workers) == 3)
            second = cluster.status(lambda status: status.time_us - first.time_us >= 2_000_000)
            received = counters(second.received)["WorkerHeartbeat"] - counters(first.received)["WorkerHeartbeat"]
            rate = received / ((second.time_us - first.time_us) / 1e6)
            assert rate < 2 * 1000 / STRETCHED_INTERVAL_MS * 1.5, f"{rate:.1f} worker heartbeats a second"

            # the silent one is dropped, though not before its stretched timeout (4 times the configured one)
            after = cluster.status(lambda status: len(status.workers) == 2, timeout=30)
            assert time.monotonic() - sent >= STRETCHED_TIMEOUT_MS / 1000
            assert "silent" not in {row.name for row in after.workers}
            output = cluster.scheduler.output()
            assert output.count("removed (no heartbeat") == 1, output  # only the silent one, never a live peer
            assert "heartbeat interval now 0.4s, worker timeout 2s" in output

            assert client.submit(operator.mul, 6, 7).result(timeout=30) == 42
    finally:
        silent.close()
        context.term()
        cluster.close()
