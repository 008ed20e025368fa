"""Seeded, time-bounded chaos: workers are SIGKILLed and added while tasks and graphs stream in. Every future must
resolve, with the right value, exactly once (a task may run twice when its worker dies; its future never settles
twice). SCALER_CHAOS_SEED and SCALER_CHAOS_SECONDS replay or lengthen a run."""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from typing import Dict, List, Tuple

import cloudpickle

from scaler import Client
from scaler.client.future import ScalerFuture
from scaler.testing.processes import wait_for
from tests.e2e.live_cluster import LiveCluster

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SEED = int(os.environ.get("SCALER_CHAOS_SEED", "20261122"))
SECONDS = float(os.environ.get("SCALER_CHAOS_SECONDS", "15"))
MAX_IN_FLIGHT = 40  # short queues: a task sits on few workers, so only a task that kills workers hits the retry cap


def triple_after(seconds: float, value: int) -> int:
    time.sleep(seconds)
    return 3 * value


def increment(value: int) -> int:
    return value + 1


def add(a: int, b: int) -> int:
    return a + b


def test_chaos_every_future_resolves_once_with_the_right_value(tmp_path) -> None:
    rng = random.Random(SEED)  # what is submitted
    chaos = random.Random(SEED + 1)  # what happens to workers: its own stream, so timing does not change it
    print(f"chaos seed {SEED}, {SECONDS}s")
    live = LiveCluster(tmp_path, worker_timeout_seconds=1.5)
    expected: List[Tuple[ScalerFuture, int]] = []
    settled: Dict[int, int] = {}
    lock = threading.Lock()

    def count_settlement(future: ScalerFuture) -> None:
        with lock:
            settled[id(future)] = settled.get(id(future), 0) + 1

    try:
        for _ in range(3):
            live.add_worker()
        live.wait_workers(3)
        kills = additions = 0
        with Client(live.address) as client:
            deadline = time.monotonic() + SECONDS
            next_chaos = time.monotonic() + chaos.uniform(1.0, 2.5)
            counter = 0
            while time.monotonic() < deadline:
                in_flight = sum(1 for future, _ in expected[-4 * MAX_IN_FLIGHT :] if not future.done())
                if in_flight < MAX_IN_FLIGHT:
                    counter += 1
                    if rng.random() < 0.25:  # a small graph: c = (x + 1) + x
                        graph = {"x": counter, "b": (increment, "x"), "c": (add, "b", "x")}
                        (future,) = client.submit_graph(graph, keys=["c"])
                        wanted = 2 * counter + 1
                    else:
                        future = client.submit(triple_after, rng.choice([0.0, 0.01, 0.05, 0.2]), counter)
                        wanted = 3 * counter
                    future.add_done_callback(count_settlement)
                    expected.append((future, wanted))
                else:
                    time.sleep(0.01)
                if time.monotonic() >= next_chaos:
                    next_chaos = time.monotonic() + chaos.uniform(1.0, 2.5)
                    agents = live.agents()
                    if len(agents) > 1 and chaos.random() < 0.7:
                        live.kill_worker(chaos.choice(agents))
                        kills += 1
                    if len(agents) < 4:
                        live.add_worker()
                        additions += 1
            for future, wanted in expected:
                assert future.result(timeout=60) == wanted
        wait_for(lambda: len(settled) == len(expected), 10, "every done callback")
        assert set(settled.values()) == {1}, "a future settled more than once"
        assert kills >= 3 and additions >= 3, (kills, additions)
        print(f"{len(expected)} futures, {kills} workers killed, {additions} added")
        live.wait_idle()
    finally:
        live.close()
