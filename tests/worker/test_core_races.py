"""Seeded random interleavings of everything that can happen to a worker: the scheduler's messages, each processor's
steps (reading orders, starting, finishing, reporting, blocking on a future, dying) and time. core.validate() runs
after every step (see core_harness.py); at the end every task the scheduler sent was answered exactly once or handed
back by a balance, whatever the order things happened in."""

from __future__ import annotations

import random
from collections import Counter
from typing import Dict, List, Set

import pytest

from scaler.protocol import (
    BalanceRequest,
    BalanceResponse,
    HeartbeatEcho,
    ObjectDelete,
    ObjectRequest,
    ObjectResponse,
    Task,
    TaskCancel,
    TaskResult,
    TaskStatus,
)
from tests.worker.core_harness import Harness, SimProcessor, of_type

FUNCTIONS = [b"f" * 32, b"g" * 32]
OBJECTS = [bytes([65 + index]) * 32 for index in range(3)]
STEPS = 400


class Walk:
    def __init__(self, seed: int, lose_scheduler: bool) -> None:
        self.rng = random.Random(seed)
        self.harness = Harness(death_timeout_seconds=1e9)
        self.harness.connect(peer_timeout_ms=3_600_000)
        self.lose_at = self.rng.randrange(STEPS) if lose_scheduler else -1
        self.tasks: Dict[bytes, Task] = {}
        self.before_loss: Set[bytes] = set()  # sent to the scheduler the worker lost: answered at most once
        self.served_upto = 0  # ObjectRequests in harness.sent already answered

    def alive(self) -> List[SimProcessor]:
        return [sim for sim in self.harness.processors.values() if sim.alive]

    def step(self, index: int) -> None:
        rng, harness = self.rng, self.harness
        if index == self.lose_at:
            self.before_loss.update(self.tasks)
            harness.tick(3600)  # silent for the peer timeout: registers again
            harness.connect(peer_timeout_ms=3_600_000)
            return
        action = rng.choice(
            ["tasks", "tasks", "serve", "serve", "cancel", "balance", "read", "start", "start", "finish", "finish"]
            + ["report", "report", "block", "die", "tick", "delete"]
        )
        sims = self.alive()
        if action == "tasks":
            new = []
            for _ in range(rng.randint(1, 5)):
                refs = rng.sample(OBJECTS, rng.randint(0, 2))
                parent = rng.choice([b"", *list(self.tasks)[-3:]]) if self.tasks else b""
                task = harness.task(*refs, parent=parent, function_id=rng.choice(FUNCTIONS))
                self.tasks[task.task_id] = task
                new.append(task)
            harness.send(*new)
        elif action == "serve":
            self.serve(found=rng.random() > 0.05)
        elif action == "cancel" and self.tasks:
            harness.send(TaskCancel(task_ids=rng.sample(list(self.tasks), min(2, len(self.tasks)))))
        elif action == "balance":
            harness.send(BalanceRequest(count=rng.randint(1, 4)))
        elif action == "read" and sims:
            rng.choice(sims).read_orders()
        elif action == "start" and sims:
            rng.choice(sims).start_next()
        elif action == "finish":
            running = [sim for sim in sims if sim.running is not None]
            if running:
                sim = rng.choice(running)
                sim.finish(succeeded=rng.random() > 0.1, duration_us=rng.choice([10, 100, 50_000]))
        elif action == "report" and sims:
            harness.report(rng.choice(sims).number)
        elif action == "block":
            active = harness.core.active
            sim = harness.processors.get(active.number) if active is not None else None
            if sim is not None and sim.alive and sim.running is not None and not sim.parked:
                harness.block(sim.number)
        elif action == "die" and sims and rng.random() < 0.3:
            harness.die(rng.choice(sims).number)
        elif action == "tick":
            harness.send(HeartbeatEcho(sent_at_us=0))
            harness.tick(rng.choice([0.001, 0.05, 2.0, 11.0]))
        elif action == "delete":
            harness.send(ObjectDelete(object_ids=[rng.choice(OBJECTS)]))

    def serve(self, found: bool = True) -> None:
        harness = self.harness
        requests = [m for m in harness.sent if type(m) is ObjectRequest]
        wanted = [object_id for request in requests[self.served_upto :] for object_id in request.object_ids]
        self.served_upto = len(requests)
        for object_id in wanted:
            if found:
                harness.serve(object_id, payload=b"object " + object_id[:1])
            else:
                harness.send(ObjectResponse(object_id=object_id, found=False))

    def drain(self) -> None:
        """Let everything finish: serve objects, run and report every processor, end parked tasks."""
        harness = self.harness
        for _ in range(200):
            if not harness.core.tasks:
                return
            self.serve()
            for sim in self.alive():
                sim.read_orders()
                if sim.running is None:
                    sim.start_next()
                if sim.running is not None:
                    sim.finish()
                harness.report(sim.number)
            harness.send(HeartbeatEcho(sent_at_us=0))
            harness.tick(0.05)
        raise AssertionError(f"tasks never finished: {[(t.stimuli(), t.state) for t in harness.core.tasks.values()]}")

    def check(self) -> None:
        answers: Counter = Counter()
        for message in of_type(self.harness.sent, TaskResult):
            if message.status != TaskStatus.not_found:
                answers[message.task_id] += 1
        balanced = Counter(
            task_id for response in of_type(self.harness.sent, BalanceResponse) for task_id in response.task_ids
        )
        for task_id in self.tasks:
            settled = answers[task_id] + balanced[task_id]
            if task_id in self.before_loss:
                assert settled <= 1, (task_id, answers[task_id], balanced[task_id])
            else:
                assert settled == 1, (task_id, answers[task_id], balanced[task_id])


@pytest.mark.parametrize("seed", range(40))
def test_random_interleavings_answer_every_task_exactly_once(seed):
    walk = Walk(seed, lose_scheduler=seed % 4 == 3)
    for index in range(STEPS):
        walk.step(index)
        if walk.harness.exit is not None:
            raise AssertionError(f"the worker exited: {walk.harness.exit}")
    walk.drain()
    walk.check()
    assert not walk.harness.core.tasks
