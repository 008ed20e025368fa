"""Seeded random runs of the sans-IO core against simulated workers and a client whose messages cross in flight.

Submits (plain tasks, graph chains, nested children), cancels, results, balancing, worker deaths and retirements
(WorkerRetire, with deadlines that pass or not) are interleaved at random, with each peer's messages delivered late but
in order, as ZeroMQ does. After every step the core's invariants hold (the harness asserts SchedulerCore.validate: a
task is in exactly one place, workers filed at their load, retiring ones never open); at the end every task the client
submitted was answered exactly once, with the value its worker computed, and the core holds nothing.

With task policies, workers offer resources from a few classes and tasks ask for resources, priorities and retries at
random: no worker is ever sent a task it does not offer the resources for (through balancing, deaths and retirements),
and a task that failed for good was started once per retry, plus once per worker death it was blamed for."""

from __future__ import annotations

import random
from collections import deque
from typing import Deque, Dict, List, Optional, Set

import pytest

from scaler.protocol import (
    PROTOCOL_VERSION,
    ArgumentKind,
    BalanceRequest,
    BalanceResponse,
    Goodbye,
    HeartbeatEcho,
    Hello,
    Resource,
    Role,
    Task,
    TaskCancel,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerHeartbeat,
    WorkerRetire,
)
from scaler.testing.scheduler_harness import CLIENT, Harness, result

SUCCESS, FAILED, CANCELED = TaskStatus.success, TaskStatus.failed, TaskStatus.canceled
# what workers offer and tasks need when the run plays task policies; every requirement is met by some offer
OFFERS = ({}, {"gpu": 1.0}, {"gpu": 2.0, "mem": 64.0})
REQUIREMENTS = ({}, {}, {"gpu": 1.0}, {"gpu": 2.0}, {"mem": 32.0})


def offers(offer: Dict[str, float], requirement: List[Resource]) -> bool:
    return all(offer.get(resource.name, 0.0) >= resource.amount for resource in requirement)


class SimulatedWorker:
    """Holds tasks in order, runs the first ("started"), hands back only unstarted ones, answers each task once."""

    def __init__(self, identity: bytes, offer: Dict[str, float]) -> None:
        self.identity = identity
        self.offer = offer
        self.inbox: Deque[object] = deque()  # sent by the scheduler, not yet read
        self.outbox: Deque[object] = deque()  # sent to the scheduler, not yet delivered
        self.held: List[Task] = []
        self.alive = True
        self.rerun: Set[bytes] = set()  # tasks it ran, or may have, when its retirement ended: they may run again
        self.told_to_go = False  # a Goodbye(retired) is on its way: what it runs until it reads it may run elsewhere

    def read_one(self, started_on: Dict[bytes, int]) -> None:
        message = self.inbox.popleft()
        if isinstance(message, Task):
            self.held.append(message)
        elif isinstance(message, TaskCancel):
            for task_id in message.task_ids:
                found = next((t for t in self.held if t.task_id == task_id), None)
                if found is None:
                    self.outbox.append(TaskResult(task_id=task_id, status=TaskStatus.not_found))
                else:
                    self.held.remove(found)
                    self.outbox.append(result(found, CANCELED, payload=b""))
        elif isinstance(message, BalanceRequest):
            movable = self.held[1:][-message.count :] if message.count else []
            for task in movable:
                self.held.remove(task)
            self.outbox.append(BalanceResponse(task_ids=[t.task_id for t in movable]))
        elif isinstance(message, Goodbye):
            self.alive = False

    def finish_first(self, rng: random.Random, started_on: Dict[bytes, int], failed: Set[bytes]) -> None:
        task = self.held.pop(0)
        started_on[task.task_id] = started_on.get(task.task_id, 0) + 1
        if self.told_to_go:
            self.rerun.add(task.task_id)
        status = FAILED if rng.random() < 0.1 else SUCCESS
        if status == FAILED:
            failed.add(task.task_id)
        self.outbox.append(result(task, status, payload=b"value:" + task.task_id))


def check_graph_arguments(harness: Harness, submitted: Task, sent: Task) -> None:
    """What a worker receives reads every dependency: as the result itself (inlined by the scheduler) or as a
    taskRef to a result the scheduler holds."""
    assert len(sent.args) == len(submitted.args)
    for original, argument in zip(submitted.args, sent.args):
        if original.kind != ArgumentKind.task_ref:
            assert argument == original
        elif argument.kind == ArgumentKind.task_ref:
            assert argument == original and argument.data in harness.core.objects
        else:
            assert argument.kind == ArgumentKind.inline and argument.data == b"value:" + original.data


def run(seed: int, steps: int, policies: bool = False) -> None:
    rng = random.Random(seed)
    harness = Harness(worker_timeout_seconds=5.0, client_timeout_seconds=1e9, balance_interval_seconds=0.5)
    harness.connect_client()
    workers: Dict[bytes, SimulatedWorker] = {}
    retired: List[SimulatedWorker] = []
    answers: Dict[bytes, List[TaskResult]] = {}
    submitted: Dict[bytes, Task] = {}
    started_on: Dict[bytes, int] = {}
    died_holding: Set[bytes] = set()
    failed: Set[bytes] = set()  # tasks a worker failed at least once
    cancel_asked: Set[bytes] = set()  # a task whose cancel crosses its failure is not retried
    retire_delivered: Set[bytes] = set()  # workers whose WorkerRetire reached the core
    counter = 0

    def deliver(out: Dict[bytes, List[object]]) -> None:
        for peer, messages in out.items():
            if peer == CLIENT:
                for message in messages:
                    if isinstance(message, TaskResult):
                        answers.setdefault(message.task_id, []).append(message)
            elif peer in workers:
                if peer in retire_delivered:
                    assert not any(isinstance(m, Task) for m in messages), "a retiring worker was sent a task"
                    if any(isinstance(m, Goodbye) and m.retired for m in messages):
                        # From now on its results reach nobody: the one it runs and those not delivered yet are lost
                        worker = workers[peer]
                        worker.told_to_go = True
                        worker.rerun.update(t.task_id for t in worker.held[:1])
                        worker.rerun.update(m.task_id for m in worker.outbox if isinstance(m, TaskResult))
                for message in messages:
                    if isinstance(message, Task):
                        check_graph_arguments(harness, submitted[message.task_id], message)
                        assert offers(workers[peer].offer, message.resources), (
                            "a task went to a worker without its resources"
                        )
                workers[peer].inbox.extend(m for m in messages if not isinstance(m, HeartbeatEcho))

    def send_from(worker: SimulatedWorker) -> None:
        message = worker.outbox.popleft()
        if isinstance(message, WorkerRetire):
            retire_delivered.add(worker.identity)
        deliver(harness.send(worker.identity, message))

    def replace_retired() -> None:
        for worker in [w for w in workers.values() if not w.alive and w.identity in retire_delivered]:
            died_holding.update(worker.rerun)
            retired.append(workers.pop(worker.identity))
            add_worker()

    def add_worker(offer: Optional[Dict[str, float]] = None) -> None:
        nonlocal counter
        counter += 1
        identity = b"W|sim|%d" % counter
        if offer is None:
            offer = rng.choice(OFFERS) if policies else {}
        workers[identity] = SimulatedWorker(identity, offer)
        hello = Hello(
            protocol_version=PROTOCOL_VERSION,
            role=Role.worker,
            name=identity.decode(),
            capacity=4,
            resources=[Resource(name=name, amount=amount) for name, amount in offer.items()],
            task_policies=True,
        )
        deliver(harness.send(identity, hello))
        workers[identity].inbox.popleft()  # the HelloReply

    def new_task(dependencies: Optional[List[bytes]] = None, parent: bytes = b"") -> Task:
        fields = {}
        if policies:
            fields = dict(
                resources=[Resource(name=name, amount=amount) for name, amount in rng.choice(REQUIREMENTS).items()],
                priority=rng.choice([0, 0, 0, 1, 5, -2]),
                retries=rng.choice([0, 0, 1, 2]),
            )
        task = harness.task(dependencies=dependencies, parent_task_id=parent, **fields)
        submitted[task.task_id] = task
        return task

    for _ in range(3):
        add_worker()
    for _ in range(steps):
        action = rng.random()
        live = [w for w in workers.values() if w.alive]
        if action < 0.15:
            batch = [new_task() for _ in range(rng.randint(1, 6))]
            if rng.random() < 0.4:  # a graph chain hanging off the batch
                batch.append(new_task(dependencies=[batch[-1].task_id]))
                batch.append(new_task(dependencies=[batch[-1].task_id, batch[0].task_id]))
            if rng.random() < 0.2:
                running = [t.task_id for w in live for t in w.held[:1]]
                if running:
                    batch.append(new_task(parent=rng.choice(running)))
            deliver(harness.send(CLIENT, *batch))
        elif action < 0.22 and submitted:
            victims = rng.sample(list(submitted), min(len(submitted), rng.randint(1, 3)))
            cancel_asked.update(victims)
            deliver(harness.send(CLIENT, TaskCancel(task_ids=victims)))
        elif action < 0.50 and live:
            worker = rng.choice(live)
            if worker.inbox:
                worker.read_one(started_on)
        elif action < 0.70 and live:
            worker = rng.choice(live)
            if worker.held:
                worker.finish_first(rng, started_on, failed)
        elif action < 0.85 and live:
            worker = rng.choice(live)
            if worker.outbox:
                send_from(worker)
        elif action < 0.90:
            deliver(harness.tick(advance=rng.choice([0.1, 0.6])))
        elif action < 0.93 and len(live) > 1:
            worker = rng.choice(live)  # killed: what it held and what it was about to send are lost
            worker.alive = False
            died_holding.update(t.task_id for t in worker.held[:1])  # running
            died_holding.update(m.task_id for m in worker.outbox if isinstance(m, TaskResult))  # ran, result lost
            died_holding.update(worker.rerun)  # it may have been retiring, past its deadline
            worker.outbox.clear()
            deliver(harness.send(worker.identity, WorkerDisconnect(reason="killed")))
            retired.append(workers.pop(worker.identity))
            add_worker()
        elif action < 0.95 and len(live) > 1:
            worker = rng.choice(live)  # its scaler_cluster got SIGTERM; a short deadline passes while tasks run
            deadline_ms = rng.choice([0, 1000, 60_000])
            worker.outbox.append(WorkerRetire(reason="SIGTERM", deadline_ms=deadline_ms))
        replace_retired()

    # Drain: no more chaos, every worker reads, runs and answers everything; every class of offer is present.
    for offer in OFFERS if policies else ():
        add_worker(offer)
    for _ in range(100_000):
        busy = [w for w in workers.values() if w.alive and (w.inbox or w.held or w.outbox)]
        if not busy and not harness.core.tasks:
            break
        for worker in busy:
            while worker.inbox:
                worker.read_one(started_on)
            if worker.held:
                worker.finish_first(rng, started_on, failed)
            while worker.outbox and worker.alive:
                send_from(worker)
        replace_retired()
        for worker in workers.values():
            deliver(harness.send(worker.identity, WorkerHeartbeat()))
        deliver(harness.tick(advance=0.6))
        replace_retired()
    assert not harness.core.tasks, "every task finished"
    assert not harness.core.objects, "no graph result left behind"
    for task_id in submitted:
        got = answers.get(task_id, [])
        # notFound answers a cancel that arrived after the task finished: it settles nothing
        assert got and all(late.status == TaskStatus.not_found for late in got[1:]), f"{task_id.hex()}: {got}"
        answer = got[0]
        assert answer.status != TaskStatus.not_found
        if answer.status == SUCCESS:
            assert answer.payload == b"value:" + task_id
            assert started_on.get(task_id, 0) >= 1
        if started_on.get(task_id, 0) > 1:
            assert task_id in died_holding or (task_id in failed and submitted[task_id].retries), (
                "only a task whose worker died, or whose retirement deadline passed, while running it, or that failed"
                " with retries left, may run twice"
            )
        if answer.status == FAILED and answer.payload == b"value:" + task_id and task_id not in cancel_asked:
            # it failed for good itself (not a dependency): started once per retry, plus the deaths it was blamed for
            assert max(1, answer.attempts) >= 1 + submitted[task_id].retries
    assert sum(1 for w in retired if w.identity in retire_delivered) >= 1 or steps < 500, "no retirement was played"


@pytest.mark.parametrize("seed", range(12))
def test_random_interleavings_answer_every_task_exactly_once(seed: int) -> None:
    run(seed, steps=1500)


@pytest.mark.parametrize("seed", range(8))
def test_random_interleavings_with_resources_priorities_and_retries(seed: int) -> None:
    run(seed, steps=1500, policies=True)
