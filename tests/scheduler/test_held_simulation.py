"""Seeded random runs of the sans-IO core with results held on workers: holders die or retire while clients fetch and
graph nodes read, and every result is still delivered once, right, and nothing is left behind.

Simulated workers hold every result they make (TaskResult.heldBytes), serve a graph node's held inputs from their own
store or have them relayed by the scheduler (they do not fetch from holders), and upload on the scheduler's request.
The simulated client fetches from holders directly (it reads the holder's store, as a DataRequest would) or, when the
holder is gone, asks the scheduler to relay. Workers die at random, with what they hold; the scheduler makes lost
results again from their lineage. Workers retire at random too: they hand their queued tasks back, and what they hold
to other workers (which fetch it from the retiring one's store, as a DataRequest would), then leave on
Goodbye(retired). Every message is delivered late but in order per peer, and validate() runs after every step."""

from __future__ import annotations

import random
from collections import deque
from typing import Deque, Dict, List, Set

import pytest

from scaler.protocol import (
    PROTOCOL_VERSION,
    ArgumentKind,
    BalanceRequest,
    BalanceResponse,
    Goodbye,
    HeartbeatEcho,
    Hello,
    ObjectDelete,
    ObjectKind,
    ObjectPut,
    ObjectRequest,
    ObjectResponse,
    Role,
    Task,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerHeartbeat,
    WorkerRetire,
)
from scaler.testing.scheduler_harness import CLIENT, Harness


def value_of(task_id: bytes) -> bytes:
    return b"value:" + task_id


class Worker:
    def __init__(self, identity: bytes, by_address: Dict[str, Worker]) -> None:
        self.identity = identity
        self.address = "tcp://sim/" + identity.decode()
        self.inbox: Deque[object] = deque()
        self.outbox: Deque[object] = deque()
        self.held: List[Task] = []  # tasks received, in order
        self.store: Dict[bytes, bytes] = {}  # results it holds, and inputs relayed to it
        self.asked: Set[bytes] = set()  # inputs asked of the scheduler, not all here yet
        self.alive = True
        self.retiring = False
        self.by_address = by_address  # every worker's, by data address: where to fetch what a retiring one hands over

    def read_one(self) -> bool:
        """Read the next message; True if it says to leave (the end of a retirement)."""
        message = self.inbox.popleft()
        if isinstance(message, Task):
            self.held.append(message)
        elif isinstance(message, Goodbye):
            return message.retired
        elif isinstance(message, ObjectRequest) and message.take_from:  # fetch and hold a retiring worker's results
            giver = self.by_address[message.take_from]
            for object_id in message.object_ids:
                if giver.alive and object_id in giver.store:
                    data = self.store[object_id] = giver.store[object_id]
                    self.outbox.append(
                        ObjectResponse(
                            object_id=object_id,
                            found=True,
                            kind=ObjectKind.result,
                            chunk_count=0,
                            total_size=len(data),
                        )
                    )
                else:
                    self.outbox.append(ObjectResponse(object_id=object_id, found=False))
        elif isinstance(message, ObjectRequest):  # upload what we hold, for a relay
            for object_id in message.object_ids:
                if object_id in self.store:
                    data = self.store[object_id]
                    put = ObjectPut(object_id=object_id, kind=ObjectKind.result, payload=data, total_size=len(data))
                    self.outbox.append(put)
                else:
                    self.outbox.append(ObjectResponse(object_id=object_id, found=False))
        elif isinstance(message, ObjectResponse):
            if message.found and message.payload:
                self.store[message.object_id] = message.payload
            self.asked.discard(message.object_id)
        elif isinstance(message, ObjectDelete):
            for object_id in message.object_ids:
                self.store.pop(object_id, None)
        elif isinstance(message, BalanceRequest):  # none has started: a task runs to its end at once
            movable = self.held[-message.count :] if message.count else []
            for task in movable:
                self.held.remove(task)
            self.outbox.append(BalanceResponse(task_ids=[task.task_id for task in movable]))
        return False

    def run_one(self, ran: Dict[bytes, int]) -> bool:
        """Run the first of its tasks that has every input, as a worker's queue does; ask the scheduler for the inputs
        its tasks lack."""
        runnable = None
        for task in self.held:
            missing = [a.data for a in task.args if a.kind == ArgumentKind.task_ref and a.data not in self.store]
            wanted = [object_id for object_id in missing if object_id not in self.asked]
            if wanted:
                self.asked.update(wanted)
                self.outbox.append(ObjectRequest(object_ids=wanted))
            if not missing and runnable is None:
                runnable = task
        if runnable is None:
            return False
        for argument in runnable.args:  # what it read is what its inputs' tasks made
            if argument.kind == ArgumentKind.task_ref:
                assert self.store[argument.data] == value_of(argument.data)
            elif argument.data != b"arg":  # inlined by the scheduler
                assert argument.data.startswith(b"value:")
        self.held.remove(runnable)
        ran[runnable.task_id] = ran.get(runnable.task_id, 0) + 1
        data = value_of(runnable.task_id)
        self.store[runnable.task_id] = data
        self.outbox.append(TaskResult(task_id=runnable.task_id, in_object=True, held_bytes=len(data)))
        return True


def run(seed: int, steps: int, deaths: bool = True, retirements: bool = False) -> None:
    """`deaths`: workers are killed now and then; `retirements`: workers retire now and then (with deaths, some
    deadlines are short enough to pass)."""
    rng = random.Random(seed)
    # deaths here are not the tasks' fault: none may fail for killing its workers
    harness = Harness(worker_timeout_seconds=5.0, client_timeout_seconds=1e9, task_retry_limit=1000)
    harness.connect_client(fetches_from_holders=True)
    workers: Dict[bytes, Worker] = {}
    by_address: Dict[str, Worker] = {}
    client_inbox: Deque[object] = deque()
    fetching: Set[bytes] = set()
    got: Dict[bytes, List[bytes]] = {}
    reported: Set[bytes] = set()
    ran: Dict[bytes, int] = {}
    counter = 0

    def deliver(out: Dict[bytes, List[object]]) -> None:
        for peer, messages in out.items():
            if peer == CLIENT:
                client_inbox.extend(messages)
            elif peer in workers:
                workers[peer].inbox.extend(m for m in messages if not isinstance(m, HeartbeatEcho))

    def add_worker() -> None:
        nonlocal counter
        counter += 1
        worker = Worker(b"W|held|%d" % counter, by_address)
        workers[worker.identity] = by_address[worker.address] = worker
        hello = Hello(
            protocol_version=PROTOCOL_VERSION,
            role=Role.worker,
            name=worker.identity.decode(),
            capacity=3,
            task_policies=True,
            data_address=worker.address,
            takes_handoffs=True,
        )
        deliver(harness.send(worker.identity, hello))
        worker.inbox.popleft()  # the HelloReply

    def read(worker: Worker) -> None:
        if worker.read_one():  # retired: it leaves, with what it still holds
            worker.alive = False
            worker.outbox.clear()
            del workers[worker.identity]

    def client_reads_one() -> None:
        message = client_inbox.popleft()
        if isinstance(message, TaskResult):
            assert message.status == TaskStatus.success and message.in_object, message
            assert message.task_id not in reported, "a task answered twice"
            reported.add(message.task_id)
            fetching.add(message.task_id)
            deliver(harness.send(CLIENT, ObjectRequest(object_ids=[message.task_id])))
        elif isinstance(message, ObjectResponse) and message.object_id in fetching:
            object_id = message.object_id
            assert message.found, f"{object_id.hex()} was lost"
            if message.holder_address:
                holder = by_address[message.holder_address]
                if holder.alive and object_id in holder.store:  # fetched from the holder, as over its data address
                    received(object_id, holder.store[object_id])
                else:  # out of reach: relayed
                    deliver(harness.send(CLIENT, ObjectRequest(object_ids=[object_id], via_scheduler=True)))
            elif message.chunk_index + 1 == message.chunk_count:
                received(object_id, message.payload)

    def received(object_id: bytes, data: bytes) -> None:
        fetching.discard(object_id)
        got.setdefault(object_id, []).append(data)
        deliver(harness.send(CLIENT, ObjectDelete(object_ids=[object_id])))

    requested: Set[bytes] = set()
    for _ in range(3):
        add_worker()
    for _ in range(steps):
        action = rng.random()
        live = [w for w in workers.values() if w.alive]
        if action < 0.12:
            first = harness.task()
            batch = [first]
            if rng.random() < 0.6:  # a chain whose intermediates nobody asked for
                middle = harness.task(dependencies=[first.task_id], report_result=False)
                first.report_result = rng.random() < 0.5
                batch += [middle, harness.task(dependencies=[middle.task_id, first.task_id])]
            requested.update(task.task_id for task in batch if task.report_result)
            deliver(harness.send(CLIENT, *batch))
        elif action < 0.40 and live:
            worker = rng.choice(live)
            if worker.inbox:
                read(worker)
        elif action < 0.60 and live:
            worker = rng.choice(live)
            if worker.held:
                worker.run_one(ran)
        elif action < 0.80 and live:
            worker = rng.choice(live)
            if worker.outbox:
                deliver(harness.send(worker.identity, worker.outbox.popleft()))
        elif action < 0.92:
            if client_inbox:
                client_reads_one()
        elif action < 0.95:
            for worker in live:  # heartbeats: a worker waiting for others (to take what it holds) stays registered
                deliver(harness.send(worker.identity, WorkerHeartbeat()))
            deliver(harness.tick(advance=0.1))
        elif retirements and action < (0.975 if deaths else 1.0):
            staying = [w for w in live if not w.retiring]
            if len(staying) > 1:
                worker = rng.choice(staying)
                worker.retiring = True
                deadline_ms = rng.choice([300, 3_000, 10**9]) if deaths else 10**9
                deliver(harness.send(worker.identity, WorkerRetire(reason="SIGTERM", deadline_ms=deadline_ms)))
                add_worker()
        elif deaths and len(live) > 1:
            worker = rng.choice(live)  # killed, with what it holds and what it was about to send
            worker.alive = False
            worker.outbox.clear()
            deliver(harness.send(worker.identity, WorkerDisconnect(reason="killed")))
            del workers[worker.identity]
            add_worker()

    for _ in range(10_000):  # drain: no more deaths; everyone reads, runs and answers everything
        idle = not client_inbox
        for worker in list(workers.values()):
            while worker.inbox and worker.alive:
                read(worker)
                idle = False
            if not worker.alive:
                continue
            if worker.held and worker.run_one(ran):
                idle = False
            while worker.outbox:
                deliver(harness.send(worker.identity, worker.outbox.popleft()))
                idle = False
            deliver(harness.send(worker.identity, WorkerHeartbeat()))
        while client_inbox:
            client_reads_one()
        if idle and not harness.core.tasks and not fetching:
            break
    assert not harness.core.tasks and not fetching
    assert set(got) == requested and all(got[t] == [value_of(t)] for t in requested), "each result once, right"
    assert not harness.core.objects and not harness.core.lineage, "nothing left behind"
    assert all(not worker.store for worker in workers.values()), "every holder was told to drop what it held"
    assert not harness.core.retiring, "every retirement ended"
    if deaths:
        assert harness.core.recomputed_results > 0 or steps < 1000, "no holder died holding something needed"
    else:  # every retirement had the time to hand everything over
        assert harness.core.recomputed_results == 0, "a retiring holder's result was made again"
        assert set(ran.values()) == {1}, "a task ran twice"


@pytest.mark.parametrize("seed", range(10))
def test_holders_die_while_results_are_fetched_and_read(seed: int) -> None:
    run(seed, steps=2000)


@pytest.mark.parametrize("seed", range(10))
def test_retiring_holders_hand_everything_over_and_no_task_runs_twice(seed: int) -> None:
    run(seed, steps=2000, deaths=False, retirements=True)


@pytest.mark.parametrize("seed", range(6))
def test_holders_retire_and_die_while_results_are_fetched_and_read(seed: int) -> None:
    run(seed, steps=2000, retirements=True)
