"""Actors on the sans-IO scheduler core (scheduler/actors.py), message by message: placement, order, loss, freeing,
retirement and a restart; then a seeded walk of them all. The harness validates the core's invariants after every
step."""

from __future__ import annotations

import random
from typing import Dict, List

import pytest

from scaler.protocol import (
    PROTOCOL_VERSION,
    ActorRelease,
    BalanceRequest,
    ClientDisconnect,
    Hello,
    Resource,
    Role,
    Task,
    TaskCancel,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerRetire,
)
from scaler.scheduler.actors import ADOPTION_SECONDS
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, WORKER_B, Harness, of_type, result

CLIENT_2 = b"C|test|9|second"
LOST = TaskStatus.actor_lost


def actor_id(number: int) -> bytes:
    return b"actor" + number.to_bytes(11, "big")


def creation(harness: Harness, actor: bytes, **fields) -> Task:
    return harness.task(actor_id=actor, creates_actor=True, **fields)


def call(harness: Harness, actor: bytes) -> Task:
    return harness.task(actor_id=actor)


def statuses(out: Dict[bytes, List[object]], peer: bytes = CLIENT) -> List[tuple]:
    return [(r.task_id, r.status) for r in of_type(out.get(peer, []), TaskResult)]


def tasks_to(out: Dict[bytes, List[object]], peer: bytes) -> List[bytes]:
    return [task.task_id for task in of_type(out.get(peer, []), Task)]


def with_actor(harness: Harness, slots_a: int = 2, slots_b: int = 2) -> bytes:
    harness.connect_client()
    harness.connect_worker(WORKER_A, actor_slots=slots_a)
    harness.connect_worker(WORKER_B, actor_slots=slots_b)
    actor = actor_id(1)
    made = creation(harness, actor)
    harness.send(CLIENT, made)
    harness.send(harness.core.actors[actor].worker, result(made))  # created
    return actor


def test_calls_follow_their_actor_in_order_and_take_no_task_slot() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=1, actor_slots=2)
    actor = actor_id(1)
    made = creation(harness, actor)
    calls = [call(harness, actor) for _ in range(5)]
    out = harness.send(CLIENT, made, *calls)
    assert tasks_to(out, WORKER_A) == [made.task_id] + [c.task_id for c in calls]
    worker = harness.core.workers[WORKER_A]
    assert not worker.assigned and list(worker.actors) == [actor]
    plain = harness.task()  # the worker's one task slot is free: actor calls do not count
    assert tasks_to(harness.send(CLIENT, plain), WORKER_A) == [plain.task_id]
    out = harness.send(WORKER_A, result(made), *[result(c) for c in calls])
    assert statuses(out) == [(t.task_id, TaskStatus.success) for t in [made, *calls]]
    assert harness.core.actors[actor].calls == 5  # method calls: its creation aside


def test_an_actor_goes_to_the_worker_hosting_fewest_among_those_with_its_resources() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, actor_slots=4)
    harness.connect_worker(WORKER_B, actor_slots=4, resources={"gpu": 1})
    places = []
    for number in range(1, 4):
        made = creation(harness, actor_id(number))
        out = harness.send(CLIENT, made)
        places.append(WORKER_A if tasks_to(out, WORKER_A) else WORKER_B)
    assert sorted(places[:2]) == [WORKER_A, WORKER_B] and places[2] in (WORKER_A, WORKER_B)
    gpu = creation(harness, actor_id(9), resources=[Resource(name="gpu", amount=1)])
    assert tasks_to(harness.send(CLIENT, gpu), WORKER_B) == [gpu.task_id]


def test_with_no_free_slot_the_actor_and_its_calls_wait_in_order() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, actor_slots=1)
    harness.send(CLIENT, creation(harness, actor_id(1)))
    actor = actor_id(2)
    made, later = creation(harness, actor), call(harness, actor)
    out = harness.send(CLIENT, made, later)
    assert not tasks_to(out, WORKER_A)
    assert harness.core.actor_statuses()[1].worker == "" and harness.core.actor_statuses()[1].pending == 2
    harness.connect_worker(WORKER_B)  # hosts no actors: still waiting
    assert actor in harness.core._unplaced
    out = harness.send(WORKER_A, ActorRelease(actor_ids=[actor_id(1)], reason="it was freed"))  # a slot frees
    assert tasks_to(out, WORKER_A) == [made.task_id, later.task_id]


def test_a_removed_worker_loses_its_actors_and_their_calls_are_never_retried() -> None:
    harness = Harness(worker_timeout_seconds=60.0)
    actor = with_actor(harness)
    where = harness.core.actors[actor].worker
    pending = call(harness, actor)
    harness.send(CLIENT, pending)
    out = harness.send(where, WorkerDisconnect(reason="killed"))
    assert statuses(out) == [(pending.task_id, LOST)]
    (lost,) = of_type(out[CLIENT], TaskResult)
    assert "removed" in lost.error_text
    other = WORKER_B if where == WORKER_A else WORKER_A
    later = call(harness, actor)
    out = harness.send(CLIENT, later)
    assert statuses(out) == [(later.task_id, LOST)] and not tasks_to(out, other)


def test_the_owner_frees_its_actor_after_the_calls_it_sent_before() -> None:
    harness = Harness()
    actor = with_actor(harness)
    where = harness.core.actors[actor].worker
    before = call(harness, actor)
    out = harness.send(CLIENT, before, ActorRelease(actor_ids=[actor]))
    assert [type(m).__name__ for m in out[where]] == ["Task", "ActorRelease"]  # after the call, on one socket
    later = call(harness, actor)
    assert statuses(harness.send(CLIENT, later)) == [(later.task_id, LOST)]
    out = harness.send(where, result(before), ActorRelease(actor_ids=[actor], reason="it was freed"))
    assert statuses(out) == [(before.task_id, TaskStatus.success)]
    assert actor not in harness.core.actors and not harness.core.workers[where].actors


def test_only_its_owner_frees_an_actor() -> None:
    harness = Harness()
    actor = with_actor(harness)
    harness.connect_client(CLIENT_2)
    out = harness.send(CLIENT_2, ActorRelease(actor_ids=[actor]))
    assert not out and not harness.core.actors[actor].released


def test_a_client_leaving_frees_its_actors() -> None:
    harness = Harness()
    actor = with_actor(harness)
    where = harness.core.actors[actor].worker
    out = harness.send(CLIENT, ClientDisconnect())
    (release,) = of_type(out[where], ActorRelease)
    assert release.actor_ids == [actor] and "left" in release.reason


def test_freed_in_the_frame_that_created_it_the_actor_still_runs_what_came_before() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, actor_slots=1)
    actor = actor_id(1)
    made, first = creation(harness, actor), call(harness, actor)
    out = harness.send(CLIENT, made, first, ActorRelease(actor_ids=[actor]))
    assert [type(m).__name__ for m in out[WORKER_A]] == ["Task", "Task", "ActorRelease"]


def test_a_creation_canceled_while_it_waits_for_a_slot_ends_the_actor() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, actor_slots=0)
    actor = actor_id(1)
    made, later = creation(harness, actor), call(harness, actor)
    harness.send(CLIENT, made, later)
    out = harness.send(CLIENT, TaskCancel(task_ids=[made.task_id]))
    assert sorted(statuses(out)) == sorted([(made.task_id, TaskStatus.canceled), (later.task_id, LOST)])
    assert not harness.core.actors


def test_balancing_never_asks_for_actor_calls() -> None:
    harness = Harness(balance_interval_seconds=0.1)
    actor = with_actor(harness)
    where = harness.core.actors[actor].worker
    harness.send(CLIENT, *[call(harness, actor) for _ in range(20)])
    out = harness.tick(advance=1.0)
    assert not of_type(out.get(where, []), BalanceRequest)


def test_a_retiring_worker_keeps_its_actors_until_its_deadline_then_they_are_lost() -> None:
    harness = Harness(worker_timeout_seconds=60.0)
    actor = with_actor(harness, slots_b=0)
    assert harness.core.actors[actor].worker == WORKER_A
    harness.send(WORKER_A, WorkerRetire(reason="SIGTERM", deadline_ms=5000))
    harness.send(CLIENT, creation(harness, actor_id(2)))  # no new actor on a retiring worker
    assert actor_id(2) in harness.core._unplaced
    still = call(harness, actor)
    assert tasks_to(harness.send(CLIENT, still), WORKER_A) == [still.task_id]
    harness.send(WORKER_A, result(still))
    out = harness.tick(advance=5.1)
    assert WORKER_A not in harness.core.workers
    later = call(harness, actor)
    out = harness.send(CLIENT, later)
    assert statuses(out) == [(later.task_id, LOST)] and "retire" in of_type(out[CLIENT], TaskResult)[0].error_text


def test_after_a_restart_workers_report_their_actors_and_clients_claim_theirs() -> None:
    harness = Harness(worker_timeout_seconds=1000.0, client_timeout_seconds=1000.0)
    actor, orphan = actor_id(1), actor_id(2)
    harness.connect_client(actors=[actor])
    early = call(harness, actor)
    assert not harness.send(CLIENT, early).get(WORKER_A)  # its worker has not registered again yet: it waits
    harness.connect_worker(WORKER_A, actor_slots=2, actors=[actor, orphan])
    out = harness.outbox()
    assert harness.core.actors[actor].worker == WORKER_A and harness.core.actors[actor].owner == CLIENT
    # the call that waited went out with the worker's registration
    assert early.task_id in [t.task_id for t in harness.core.tasks.values() if t.worker == WORKER_A]
    out = harness.tick(advance=ADOPTION_SECONDS + 1)
    assert of_type(out[WORKER_A], ActorRelease)[0].actor_ids == [orphan]  # nobody claimed it


def test_calls_for_an_actor_nobody_reports_fail_after_the_adoption_time() -> None:
    harness = Harness(client_timeout_seconds=1000.0)
    harness.connect_client(actors=[])
    lonely = call(harness, actor_id(7))
    harness.send(CLIENT, lonely)
    out = harness.tick(advance=ADOPTION_SECONDS + 1)
    assert statuses(out) == [(lonely.task_id, LOST)]
    assert "no worker reported it" in of_type(out[CLIENT], TaskResult)[0].error_text


@pytest.mark.parametrize("seed", range(12))
def test_seeded_walks_answer_each_actor_task_once(seed: int) -> None:
    """Creations, calls, answers, cancels, frees, worker deaths and new workers in a random order: every actor task
    the client sent is answered exactly once, and calls reach their worker in the order they were sent."""
    rng = random.Random(seed)
    harness = Harness(worker_timeout_seconds=1000.0)
    harness.connect_client()
    workers = [WORKER_A, WORKER_B]
    for worker in workers:
        harness.connect_worker(worker, actor_slots=rng.randint(0, 2))
    sent: List[bytes] = []
    answers: Dict[bytes, int] = {}
    arrived: Dict[bytes, List[bytes]] = {}  # worker -> task ids in the order it received them
    in_flight: Dict[bytes, Task] = {}
    actors: List[bytes] = []
    actor_of: Dict[bytes, bytes] = {}
    number = 0

    def absorb(out: Dict[bytes, List[object]]) -> None:
        for peer, messages in out.items():
            for message in messages:
                if type(message) is TaskResult and message.status != TaskStatus.not_found:  # a cancel after the end
                    answers[message.task_id] = answers.get(message.task_id, 0) + 1
                    in_flight.pop(message.task_id, None)
                elif type(message) is Task and peer in arrived:
                    arrived[peer].append(message.task_id)
                    in_flight[message.task_id] = message

    for worker in workers:
        arrived[worker] = []
    for _ in range(150):
        move = rng.random()
        if move < 0.15 or not actors:
            number += 1
            actors.append(actor_id(number))
            task = creation(harness, actors[-1])
        elif move < 0.55:
            task = call(harness, rng.choice(actors))
        else:
            task = None
        if task is not None:
            sent.append(task.task_id)
            actor_of[task.task_id] = task.actor_id
            absorb(harness.send(CLIENT, task))
            continue
        if move < 0.75 and in_flight:
            task = in_flight[rng.choice(list(in_flight))]
            holder = harness.core.tasks[task.task_id].worker if task.task_id in harness.core.tasks else None
            if holder is not None:
                absorb(harness.send(holder, result(task)))
        elif move < 0.82:
            absorb(harness.send(CLIENT, TaskCancel(task_ids=[rng.choice(sent)])))
        elif move < 0.88:
            absorb(harness.send(CLIENT, ActorRelease(actor_ids=[rng.choice(actors)])))
        elif move < 0.94 and harness.core.workers:
            gone = rng.choice(list(harness.core.workers))
            absorb(harness.send(gone, WorkerDisconnect(reason="walk")))
        else:
            fresh = f"W|test|{number}|walk".encode()
            if fresh not in arrived:
                arrived[fresh] = []
                out = harness.send(fresh, _hello(fresh, rng.randint(1, 3)))
                absorb(out)
    # the workers answer what they hold, then every actor is freed and its workers confirm
    for task_id, task in list(in_flight.items()):
        state = harness.core.tasks.get(task_id)
        if state is not None and state.worker is not None:
            absorb(harness.send(state.worker, result(task)))
    for actor in list(harness.core.actors):
        record = harness.core.actors[actor]
        if record.worker is not None:
            absorb(harness.send(record.worker, ActorRelease(actor_ids=[actor], reason="end of walk")))
        else:
            assert record.owner == CLIENT  # waits for a slot
    assert all(count == 1 for count in answers.values()), answers
    unanswered = [task_id for task_id in sent if task_id not in answers]
    assert all(harness.core.tasks[task_id].actor.worker is None for task_id in unanswered)
    for task_ids in arrived.values():  # each actor's tasks reached its worker in the order they were sent
        for actor in actors:
            received = [task_id for task_id in task_ids if actor_of[task_id] == actor]
            assert received == [task_id for task_id in sent if task_id in set(received)]


def _hello(peer: bytes, slots: int) -> Hello:
    hello = Hello(protocol_version=PROTOCOL_VERSION, role=Role.worker, name=peer.decode(), capacity=10)
    hello.actor_slots = slots
    hello.task_policies = True
    return hello
