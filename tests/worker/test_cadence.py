"""The worker follows the heartbeat cadence the scheduler names in its echoes (docs/protocol.md, Heartbeat cadence):
sans-IO, through the worker core's harness."""

from __future__ import annotations

from scaler.protocol import HeartbeatEcho, HelloReply
from scaler.worker.core import PARK_HEARTBEAT_FLOOR_SECONDS
from scaler.worker.state import CONNECTED, CONNECTING
from tests.worker.core_harness import FUNCTION, Harness


def _registered(interval_ms: int = 1000, timeout_ms: int = 5000) -> Harness:
    harness = Harness()
    harness.send(
        HelloReply(protocol_version=1, accepted=True, heartbeat_interval_ms=interval_ms, peer_timeout_ms=timeout_ms)
    )
    harness.tick(0)
    return harness


def _heartbeats_within(harness: Harness, seconds: float) -> int:
    before = len(harness.heartbeats)
    for _ in range(int(seconds / 0.1)):
        harness.tick(0.1)
    return len(harness.heartbeats) - before


def test_heartbeats_state_their_interval_and_stretch_as_the_echo_says() -> None:
    harness = _registered()
    heartbeat = harness.heartbeats[-1].heartbeat
    assert heartbeat.interval_ms == 1000
    harness.send(HeartbeatEcho(sent_at_us=heartbeat.sent_at_us, heartbeat_interval_ms=4000, peer_timeout_ms=20_000))
    assert (harness.core.heartbeat_interval, harness.core.lost_after) == (4.0, 20.0)
    assert _heartbeats_within(harness, 7.95) == 2  # at 1 s (already due), then 4 s later
    assert harness.heartbeats[-1].heartbeat.interval_ms == 4000
    harness.tick(10)  # 18 s without a word from the scheduler: within the 20 s it named, still registered
    assert harness.core.connection == CONNECTED
    harness.tick(2.1)  # past it: the scheduler has dropped us, register again
    assert harness.core.connection == CONNECTING


def test_a_shorter_interval_takes_effect_at_once() -> None:
    harness = _registered(interval_ms=8000, timeout_ms=40_000)
    heartbeat = harness.heartbeats[-1].heartbeat
    harness.send(HeartbeatEcho(sent_at_us=heartbeat.sent_at_us, heartbeat_interval_ms=1000, peer_timeout_ms=5000))
    assert _heartbeats_within(harness, 3.05) == 3  # not 8 s after the last one
    assert harness.heartbeats[-1].heartbeat.interval_ms == 1000 and harness.core.lost_after == 5.0


def test_an_echo_of_an_older_scheduler_changes_nothing() -> None:
    harness = _registered(interval_ms=200, timeout_ms=2000)
    heartbeat = harness.heartbeats[-1].heartbeat
    harness.send(HeartbeatEcho(sent_at_us=heartbeat.sent_at_us))  # no cadence in it
    assert (harness.core.heartbeat_interval, harness.core.lost_after) == (0.2, 2.0)


def test_a_parked_task_is_reported_at_once_not_an_interval_later() -> None:
    """A parked task lends its slot at the scheduler, which learns of it from a heartbeat: with a stretched interval
    the worker sends one as soon as a processor parks or resumes (PARK_HEARTBEAT_FLOOR_SECONDS after the last one at
    the earliest)."""
    harness = _registered(interval_ms=16_000, timeout_ms=80_000)
    harness.serve(FUNCTION)
    parent = harness.task()
    harness.send(parent)
    harness.active.read_orders()
    harness.active.start_next()
    sent = len(harness.heartbeats)
    harness.block(1)  # just after registering: the floor since that heartbeat delays it a few milliseconds
    assert harness.core.next_deadline() <= harness.now + PARK_HEARTBEAT_FLOOR_SECONDS
    harness.tick(PARK_HEARTBEAT_FLOOR_SECONDS)
    assert len(harness.heartbeats) == sent + 1 and harness.heartbeats[-1].heartbeat.running == 1
    harness.tick(0.1)
    assert len(harness.heartbeats) == sent + 1, "one heartbeat per change"
