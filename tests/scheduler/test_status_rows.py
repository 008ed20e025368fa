"""The workers' rows of the status, kept encoded by the core (scaler.scheduler.status): the same bytes as a status built
from scratch, at the cost of the rows that changed."""

from __future__ import annotations

import random
from typing import Dict, List

import pytest

from scaler.protocol import SchedulerStatus, Task, WorkerDisconnect, WorkerHeartbeat, WorkerRetire, decode_frame, encode
from scaler.scheduler import status as status_module
from scaler.testing.scheduler_harness import CLIENT, Harness, result


def _whole(harness: Harness) -> bytes:
    """The status with every row built from scratch, as the shell built it before rows were kept encoded."""
    rows = []
    for worker in harness.core.workers.values():
        row = worker.row
        row.free = worker.free_slots
        row.sent = len(worker.assigned)
        rows.append(row)
    return encode(SchedulerStatus(time_us=9, clients=1, workers=rows))


def _kept(harness: Harness) -> bytes:
    return harness.core.encode_status(SchedulerStatus(time_us=9, clients=1))


def _worker(index: int) -> bytes:
    return f"W|status|{index}".encode()


def test_rows_kept_encoded_match_a_status_built_from_scratch_through_a_busy_cluster() -> None:
    """Statuses read now and then, as the shell's once a second, between many changes of every kind: tasks placed
    and finished, heartbeats, retirements, workers leaving and joining."""
    rng = random.Random(12)
    harness = Harness(validate=False)
    harness.connect_client()
    connected: List[bytes] = []
    next_worker = 0
    for _ in range(30):
        harness.connect_worker(_worker(next_worker), capacity=rng.randint(1, 4))
        connected.append(_worker(next_worker))
        next_worker += 1
    held: Dict[bytes, List[Task]] = {}  # tasks each worker was sent and has not answered
    for step in range(600):
        action = rng.random()
        if action < 0.35:
            out = harness.send(CLIENT, *[harness.task() for _ in range(rng.randint(1, 8))])
            for peer, messages in out.items():
                held.setdefault(peer, []).extend(m for m in messages if type(m) is Task)
        elif action < 0.65:
            peer = rng.choice(connected)
            if held.get(peer):
                out = harness.send(peer, result(held[peer].pop(0)))
                for other, messages in out.items():
                    held.setdefault(other, []).extend(m for m in messages if type(m) is Task)
        elif action < 0.85:
            peer = rng.choice(connected)
            harness.send(peer, WorkerHeartbeat(sent_at_us=step, queued=rng.randint(0, 9), agent_rss=rng.randint(1, 99)))
        elif action < 0.9 and len(connected) > 5:
            peer = connected.pop(rng.randrange(len(connected)))
            harness.send(peer, WorkerDisconnect(reason="gone"))
            held.pop(peer, None)
        elif action < 0.93 and len(connected) > 5:
            harness.send(rng.choice(connected), WorkerRetire(deadline_ms=60_000, reason="test"))
        else:
            harness.connect_worker(_worker(next_worker), capacity=rng.randint(1, 4))
            connected.append(_worker(next_worker))
            next_worker += 1
        if rng.random() < 0.2:  # a few changes since the last status (rows written over) or many (laid out anew)
            assert _kept(harness) == _whole(harness), f"step {step}"
    harness.core.validate()
    (status,) = decode_frame(_kept(harness))
    assert [row.name for row in status.workers] == [w.name for w in harness.core.workers.values()]


def test_an_idle_status_encodes_only_the_rows_whose_heartbeats_arrived(monkeypatch: pytest.MonkeyPatch) -> None:
    harness = Harness(validate=False)
    for index in range(200):
        harness.connect_worker(_worker(index))
    encoded_rows: List[int] = []
    real_section = status_module._section

    def counting_section(layout, rows):
        encoded_rows.append(len(rows))
        return real_section(layout, rows)

    monkeypatch.setattr(status_module, "_section", counting_section)
    assert _kept(harness) == _whole(harness)
    assert encoded_rows == [200]  # the workers came: every row laid out once
    encoded_rows.clear()
    harness.tick(5.0)  # timers of an idle cluster (liveness, balancing) write no row
    assert _kept(harness) == _whole(harness)
    assert encoded_rows == []
    for index in (3, 50, 199):
        harness.send(_worker(index), WorkerHeartbeat(sent_at_us=1, queued=index, lag_us=7))
    assert _kept(harness) == _whole(harness)
    assert encoded_rows == [3]
