"""The heartbeat cadence as peers grow in number (scaler/scheduler/cadence.py), and the liveness bookkeeping the core
does with it: the rule alone, then the core without sockets (peers that follow the cadence, older ones that do not)."""

from __future__ import annotations

from scaler.protocol import ClientHeartbeat, HeartbeatEcho, WorkerDisconnect, WorkerHeartbeat
from scaler.scheduler.cadence import Cadence
from scaler.testing.scheduler_harness import CLIENT, Harness

# --- the rule ---------------------------------------------------------------------------------------------------------


def test_the_interval_doubles_past_the_budget_and_timeouts_follow() -> None:
    cadence = Cadence(1.0, 5.0, 30.0, budget=256)
    assert not cadence.fit(256)  # 256 heartbeats a second: within the budget
    assert (cadence.interval_ms, cadence.timeout_ms(worker=True), cadence.timeout_ms(worker=False)) == (
        1000,
        5000,
        30_000,
    )
    assert cadence.fit(257)
    assert (cadence.scale, cadence.interval_ms, cadence.timeout_ms(True), cadence.timeout_ms(False)) == (
        2,
        2000,
        10_000,
        60_000,
    )
    assert cadence.fit(4096)  # one call jumps as far as needed
    assert (cadence.scale, cadence.interval_ms, cadence.timeout_ms(True)) == (16, 16_000, 80_000)
    for peers in (2048, 4096):  # 4,096 peers every 16 s is exactly the budget; so is 2,048 at 8 s
        assert 1000 * peers / cadence.interval_ms <= 256


def test_the_interval_halves_only_well_under_the_budget() -> None:
    """Hysteresis: a peer joining and leaving at a threshold does not make the cadence flap."""
    cadence = Cadence(1.0, 5.0, 30.0, budget=256)
    cadence.fit(257)
    assert cadence.scale == 2
    assert not cadence.fit(256) and not cadence.fit(193) and cadence.scale == 2  # at 1 s: over 3/4 of the budget
    assert cadence.fit(192) and cadence.scale == 1  # at 1 s: 192 a second, three quarters of the budget
    cadence.fit(5000)
    assert cadence.scale == 32
    assert cadence.fit(1) and cadence.scale == 1  # one call comes all the way down


def test_the_rule_is_per_second_whatever_the_configured_interval() -> None:
    cadence = Cadence(0.1, 0.5, 3.0, budget=100)  # ten peers at 0.1 s already make 100 heartbeats a second
    assert not cadence.fit(10) and cadence.interval_ms == 100
    assert cadence.fit(11) and cadence.interval_ms == 200 and cadence.timeout_ms(worker=True) == 1000


def test_the_interval_stretches_to_a_minute_at_most() -> None:
    cadence = Cadence(1.0, 5.0, 30.0, budget=1)
    cadence.fit(10**6)
    assert (cadence.scale, cadence.interval_ms) == (32, 32_000)  # 64 s would pass the limit
    assert not cadence.fit(10**7)
    assert Cadence(90.0, 450.0, 900.0, budget=1).max_scale == 1  # configured beyond it: never stretched


def test_told_timeouts_are_capped_for_the_wire_but_kept_in_full() -> None:
    cadence = Cadence(1.0, 5.0, 1e9, budget=1)
    cadence.fit(4)
    assert cadence.timeout_ms(worker=False) == 2**32 - 1
    assert cadence.clock(worker=False).timeout == 4e9


def test_a_clock_is_raised_when_told_and_lowered_only_once_the_peer_follows() -> None:
    cadence = Cadence(1.0, 5.0, 30.0, budget=10)
    clock = cadence.clock(worker=True)  # told 1 s at Hello
    assert (clock.allowed_ms, clock.timeout) == (1000, 5.0)
    cadence.fit(40)  # 4 s now
    cadence.heartbeat(clock, 1000, worker=True)  # its echo names 4 s: it may switch at once
    assert (clock.allowed_ms, clock.timeout) == (4000, 20.0)
    cadence.heartbeat(clock, 4000, worker=True)
    assert clock.allowed_ms == 4000
    cadence.fit(1)  # back to 1 s
    cadence.heartbeat(clock, 4000, worker=True)  # sent before it heard: it still heartbeats every 4 s
    assert (clock.allowed_ms, clock.timeout) == (4000, 20.0)
    cadence.heartbeat(clock, 1000, worker=True)  # it switched
    assert (clock.allowed_ms, clock.timeout) == (1000, 5.0)
    cadence.heartbeat(clock, 60_000, worker=True)  # never longer than it was told
    assert clock.allowed_ms == 1000


def test_an_older_peer_keeps_its_hello_cadence() -> None:
    cadence = Cadence(1.0, 5.0, 30.0, budget=10)
    cadence.fit(40)
    clock = cadence.clock(worker=False)  # told 4 s at Hello
    cadence.fit(1)
    cadence.heartbeat(clock, 0, worker=False)  # states no interval: it ignores what the echoes name
    assert (clock.allowed_ms, clock.timeout) == (4000, 120.0)


# --- the core ---------------------------------------------------------------------------------------------------------


def _worker(harness: Harness, index: int) -> bytes:
    peer = f"W|sim|{index}".encode()
    harness.connect_worker(peer)
    return peer


def test_echoes_name_the_stretched_cadence_and_hello_replies_too() -> None:
    harness = Harness(heartbeats_per_second=4, heartbeat_interval_seconds=1.0, worker_timeout_seconds=5.0)
    peers = [_worker(harness, index) for index in range(4)]
    assert harness.connect_worker(b"W|sim|late").heartbeat_interval_ms == 2000  # five peers: 2.5 a second at 2 s
    (echo,) = harness.send(peers[0], WorkerHeartbeat(sent_at_us=9, interval_ms=1000))[peers[0]]
    assert echo == HeartbeatEcho(sent_at_us=9, heartbeat_interval_ms=2000, peer_timeout_ms=10_000)
    assert harness.core.workers[peers[0]].clock.timeout == 10.0


def test_a_peer_following_a_stretched_cadence_is_not_timed_out_and_a_silent_one_is() -> None:
    harness = Harness(heartbeats_per_second=4, heartbeat_interval_seconds=1.0, worker_timeout_seconds=5.0)
    peers = [_worker(harness, index) for index in range(8)]
    silent = _worker(harness, 8)  # the ninth: told 4 s and 20 s at Hello, and never heard of again
    assert harness.core.cadence.interval_ms == 4000
    follower = peers[0]  # told 1 s at Hello: learns 4 s from its first echo
    harness.send(follower, WorkerHeartbeat(sent_at_us=1, interval_ms=1000))
    for _ in range(4):  # 16 s: far beyond the configured 5 s, within the stretched 20 s
        harness.tick(advance=4.0)
        for peer in peers:
            harness.send(peer, WorkerHeartbeat(sent_at_us=2, interval_ms=4000))
    assert silent in harness.core.workers and follower in harness.core.workers
    harness.tick(advance=4.5)  # 20.5 s of silence
    assert silent not in harness.core.workers
    assert follower in harness.core.workers and harness.core.workers[follower].clock.timeout == 20.0


def test_an_older_worker_is_held_to_the_cadence_of_its_hello_only() -> None:
    """An older worker never states an interval: it keeps heartbeating at its HelloReply's, and is judged by it."""
    harness = Harness(heartbeats_per_second=4, heartbeat_interval_seconds=1.0, worker_timeout_seconds=5.0)
    old = _worker(harness, 0)  # told 1 s, 5 s
    for index in range(1, 12):
        _worker(harness, index)
    assert harness.core.cadence.interval_ms == 4000
    harness.send(old, WorkerHeartbeat(sent_at_us=1))  # the echo names 4 s; it does not read it
    assert harness.core.workers[old].clock.timeout == 5.0
    harness.tick(advance=5.5)
    assert old not in harness.core.workers  # 5 s of silence was its limit, as it was told


def test_an_older_worker_told_a_long_cadence_at_hello_is_not_timed_out_when_it_shrinks() -> None:
    harness = Harness(heartbeats_per_second=4, heartbeat_interval_seconds=1.0, worker_timeout_seconds=5.0)
    others = [_worker(harness, index) for index in range(12)]
    old = _worker(harness, 12)  # told 4 s, 20 s at Hello
    for peer in others:  # they leave: one peer is far under the budget
        harness.send(peer, WorkerDisconnect(reason="done"))
    harness.send(old, WorkerHeartbeat(sent_at_us=1))  # the echo names 1 s; it keeps 4 s
    assert harness.core.cadence.interval_ms == 1000
    harness.tick(advance=16.0)
    assert old in harness.core.workers  # within the 20 s it was told at Hello
    harness.tick(advance=5.0)
    assert old not in harness.core.workers


def test_a_client_follows_the_cadence_too() -> None:
    harness = Harness(heartbeats_per_second=1, heartbeat_interval_seconds=1.0, client_timeout_seconds=10.0)
    harness.connect_client()
    _worker(harness, 0)
    (echo,) = harness.send(CLIENT, ClientHeartbeat(sent_at_us=3, interval_ms=1000))[CLIENT]
    assert (echo.heartbeat_interval_ms, echo.peer_timeout_ms) == (2000, 20_000)
    harness.tick(advance=15.0)
    assert CLIENT in harness.core.clients  # beyond its configured 10 s
    harness.tick(advance=6.0)
    assert CLIENT not in harness.core.clients
