"""Parking and unparking a processor changes what the scheduler may place on the worker (parked tasks lend their
slots), so the worker heartbeats at once on such a change, yet at most once per PARK_HEARTBEAT_FLOOR_SECONDS: a burst
of parks is one heartbeat, and the state the burst ends in is always sent once the floor has passed."""

from __future__ import annotations

from scaler.worker import core as core_module
from scaler.worker.core import PARK_HEARTBEAT_FLOOR_SECONDS
from tests.worker.core_harness import Harness
from tests.worker.test_core import connected, teach_short

FLOOR = PARK_HEARTBEAT_FLOOR_SECONDS


def park_one(harness: Harness) -> None:
    """A task starts on the active processor and waits on a future: that processor parks."""
    harness.send(harness.task())
    sim = harness.active
    sim.read_orders()
    sim.start_next()
    harness.block(sim.number)


def settled() -> Harness:
    harness = connected()
    teach_short(harness)
    harness.tick(1.0)  # the heartbeat of the interval...
    harness.heartbeats.clear()
    harness.now += 0.1  # ...is long past
    return harness


def test_the_floor_is_a_few_milliseconds_from_the_heartbeat_settings() -> None:
    assert 0.001 <= FLOOR <= 0.01 and FLOOR == core_module.config.DEFAULT_HEARTBEAT_INTERVAL_SECONDS / 200


def test_a_burst_of_parks_sends_one_heartbeat_then_the_final_state_once_the_floor_passes() -> None:
    harness = settled()
    park_one(harness)
    harness.tick()
    assert [h.heartbeat.running for h in harness.heartbeats] == [1], "the first change goes at once"
    for _ in range(5):
        park_one(harness)
        harness.tick(FLOOR / 10)
    assert len(harness.heartbeats) == 1, "none within the floor"
    assert harness.core.next_deadline() <= harness.heartbeats[0].heartbeat.sent_at_us / 1e6 + FLOOR + 1e-6
    harness.tick(FLOOR)
    assert [h.heartbeat.running for h in harness.heartbeats] == [1, 6], "the burst's end, once"
    harness.tick(FLOOR)
    assert len(harness.heartbeats) == 2, "nothing changed since"


def test_unparks_are_floored_alike_and_a_change_undone_within_the_floor_sends_nothing() -> None:
    harness = settled()
    park_one(harness)
    park_one(harness)
    harness.tick()
    assert [h.heartbeat.running for h in harness.heartbeats] == [2]
    parked = [processor.number for processor in harness.core.parked]
    for number in parked:
        harness.processors[number].finish()
        harness.report(number)
        harness.tick()
    assert [h.heartbeat.running for h in harness.heartbeats] == [2], "within the floor of the last one"
    harness.tick(FLOOR)
    assert [h.heartbeat.running for h in harness.heartbeats] == [2, 0]
    harness.tick(FLOOR)
    park_one(harness)
    harness.tick()
    assert [h.heartbeat.running for h in harness.heartbeats] == [2, 0, 1]
