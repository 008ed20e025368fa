"""Actors on the worker core (worker/actors.py), without sockets or processes: a process of its own per actor, calls
in order, loss, freeing, cancels, and a lost scheduler. The harness validates the core's invariants after every step."""

from __future__ import annotations

import random
from typing import Dict, List

import cloudpickle
import pytest

from scaler.errors import ActorAnswerLostError
from scaler.protocol import ActorRelease, Goodbye, Hello, TaskCancel, TaskResult, TaskStatus
from scaler.worker.actors import ACTOR_PIPE
from tests.worker.core_harness import FUNCTION, Harness, of_type

ACTOR = b"actor-one-000000"
LOST = TaskStatus.actor_lost


def results(sent: List[object]) -> List[tuple]:
    return [(result.task_id, result.status) for result in of_type(sent, TaskResult)]


def hosting(**settings) -> Harness:
    harness = Harness(actor_slots=2, **settings)
    harness.connect()
    harness.serve(FUNCTION)
    return harness


def create(harness: Harness, actor: bytes = ACTOR) -> tuple:
    """Send the creation: (its task, the number of the processor started for the actor)."""
    before = set(harness.processors)
    made = harness.task(actor_id=actor, creates_actor=True)
    harness.send(made)
    (number,) = set(harness.processors) - before
    return made, number


def test_an_actor_runs_its_calls_in_its_own_process_in_order() -> None:
    harness = hosting()
    made, number = create(harness)
    assert number != harness.core.active.number
    calls = [harness.task(actor_id=ACTOR) for _ in range(ACTOR_PIPE + 5)]
    hands = len(harness.hands)
    harness.send(*calls)
    assert len(harness.hands) == hands + 1  # handed in one order, up to ACTOR_PIPE ahead
    assert len(harness.core.actors[ACTOR].processor.pipe) == ACTOR_PIPE  # the rest wait their turn
    assert len(harness.core.actors[ACTOR].waiting) == 6
    plain = harness.task()
    harness.send(plain)
    assert results(harness.run(harness.core.active.number)) == [(plain.task_id, TaskStatus.success)]
    answered: List[tuple] = []
    while len(answered) < len(calls) + 1:
        answered += results(harness.run(number, count=100))
    assert answered == [(task.task_id, TaskStatus.success) for task in [made, *calls]]
    assert harness.processors[number].ran == [task.task_id for task in [made, *calls]]


def test_a_constructor_that_raises_ends_the_actor() -> None:
    harness = hosting()
    made, number = create(harness)
    later = harness.task(actor_id=ACTOR)
    harness.send(later)
    sent = harness.run(number, count=2, succeeded=False)
    assert results(sent) == [(made.task_id, TaskStatus.failed), (later.task_id, LOST)]
    (release,) = of_type(sent, ActorRelease)
    assert release.actor_ids == [ACTOR] and "constructor raised" in release.reason
    assert number in harness.killed and not harness.core.actors
    again = harness.task(actor_id=ACTOR)
    (lost,) = of_type(harness.send(again), TaskResult)
    assert lost.status == LOST and "constructor raised" in lost.error_text


def test_its_process_dying_loses_the_actor_and_answers_its_calls() -> None:
    harness = hosting()
    made, number = create(harness)
    harness.run(number)
    calls = [harness.task(actor_id=ACTOR) for _ in range(ACTOR_PIPE + 2)]
    harness.send(*calls)
    sent = harness.die(number)
    assert sorted(results(sent)) == sorted((task.task_id, LOST) for task in calls)
    assert "died" in of_type(sent, ActorRelease)[0].reason
    assert harness.core.active is not None and len(harness.core.processors) == 1  # no new process for it


def test_past_the_memory_limit_the_actor_is_lost_not_restarted() -> None:
    harness = hosting(memory_limit="100MB", memory_enforcement="watchdog")
    made, number = create(harness)
    harness.run(number)
    harness.tick(advance=1.0)
    sent = harness.memory({harness.core.active.number: 1_000_000, number: 99_000_000})
    assert number in harness.killed and not harness.core.actors
    assert "memory limit" in of_type(sent, ActorRelease)[0].reason


def test_freed_once_the_calls_before_have_run() -> None:
    harness = hosting()
    made, number = create(harness)
    call = harness.task(actor_id=ACTOR)
    harness.send(call, ActorRelease(actor_ids=[ACTOR]))
    assert number not in harness.killed
    sent = harness.run(number, count=2)
    assert results(sent) == [(made.task_id, TaskStatus.success), (call.task_id, TaskStatus.success)]
    assert number in harness.killed and of_type(sent, ActorRelease)[0].reason == "it was freed"


def test_a_cancel_drops_a_waiting_call_but_never_stops_a_running_one() -> None:
    harness = hosting()
    made, number = create(harness)
    calls = [harness.task(actor_id=ACTOR) for _ in range(ACTOR_PIPE + 2)]
    harness.send(*calls)
    sim = harness.processors[number]
    sim.read_orders()
    sim.start_next()  # the creation runs
    sent = harness.send(TaskCancel(task_ids=[made.task_id, calls[-1].task_id, calls[0].task_id]))
    assert sorted(results(sent)) == sorted(
        [(calls[-1].task_id, TaskStatus.canceled), (calls[0].task_id, TaskStatus.canceled)]
    )
    assert number not in harness.killed
    sim.finish()
    sent = harness.report(number)
    assert results(sent) == [(made.task_id, TaskStatus.success)]


def test_too_many_actors_for_the_slots_are_refused() -> None:
    harness = hosting()
    create(harness, b"a" * 16)
    create(harness, b"b" * 16)
    third = harness.task(actor_id=b"c" * 16, creates_actor=True)
    (refused,) = of_type(harness.send(third), TaskResult)
    assert refused.status == LOST and "actor-slots" in refused.error_text


def test_a_lost_scheduler_keeps_the_actor_and_never_runs_a_call_twice() -> None:
    harness = hosting()
    made, number = create(harness)
    harness.run(number)
    running, waiting = harness.task(actor_id=ACTOR), harness.task(actor_id=ACTOR)
    harness.send(running)
    harness.processors[number].read_orders()
    harness.processors[number].start_next()
    harness.send(Goodbye(reason="restarting", reconnect=True))
    assert number not in harness.killed and ACTOR in harness.core.actors
    (hello,) = [m for m in harness.sent if type(m) is Hello][-1:]
    assert hello.actors == [ACTOR]  # the new scheduler hears of it
    harness.processors[number].finish(payload=cloudpickle.dumps("once"))
    assert not results(harness.report(number))  # nobody to tell yet: kept
    harness.connect()
    sent = harness.send(running, waiting)  # the client resubmits both
    assert results(sent) == [(running.task_id, TaskStatus.success)]  # answered again, not run again
    assert harness.processors[number].ran.count(running.task_id) == 1
    assert results(harness.run(number)) == [(waiting.task_id, TaskStatus.success)]


@pytest.mark.parametrize("seed", range(10))
def test_seeded_walks_answer_each_call_once_in_order(seed: int) -> None:
    rng = random.Random(seed)
    harness = hosting()
    made, number = create(harness)
    sent_ids = [made.task_id]
    answered: Dict[bytes, int] = {}
    alive = True
    for _ in range(80):
        move = rng.random()
        if move < 0.4:
            call = harness.task(actor_id=ACTOR)
            sent_ids.append(call.task_id)
            out = harness.send(call)
        elif move < 0.75 and alive:
            out = harness.run(number, count=rng.randint(1, 3), succeeded=rng.random() < 0.9 or len(sent_ids) > 1)
        elif move < 0.85:
            out = harness.send(TaskCancel(task_ids=[rng.choice(sent_ids)]))
        elif move < 0.9 and alive:
            out = harness.die(number)
            alive = False
        else:
            out = harness.tick(advance=0.1)
        for task_id, status in results(out):
            if status != TaskStatus.not_found:
                answered[task_id] = answered.get(task_id, 0) + 1
    assert all(count == 1 for count in answered.values()), answered
    if alive and ACTOR in harness.core.actors:
        ran = harness.processors[number].ran
        assert ran == [task_id for task_id in sent_ids if task_id in set(ran)]  # in the order received


def test_a_creation_resubmitted_after_its_answer_was_dropped_succeeds_without_running_again() -> None:
    harness = hosting()
    made, number = create(harness)
    harness.run(number)
    actor = harness.core.actors[ACTOR]
    actor.answered.clear()  # as after ACTOR_ANSWERS_KEPT later calls
    actor.answered_bytes = 0
    (again,) = of_type(harness.send(made), TaskResult)
    assert again.status == TaskStatus.success and cloudpickle.loads(again.payload) is None
    assert harness.processors[number].ran.count(made.task_id) == 1


def call_of(harness: Harness, caller: bytes, number: int) -> object:
    """Call `number` of `caller`: its task id is the caller's prefix and the number, as clients make them."""
    call = harness.task(actor_id=ACTOR)
    call.task_id = caller + number.to_bytes(8, "little")
    return call


def restart(harness: Harness) -> None:
    harness.send(Goodbye(reason="restarting", reconnect=True))
    harness.connect()


def test_a_call_that_ran_is_not_run_again_once_its_answer_is_no_longer_kept() -> None:
    harness = hosting()
    made, number = create(harness)
    harness.run(number)
    first, second = call_of(harness, b"caller-a", 1), call_of(harness, b"caller-a", 2)
    harness.send(first)
    assert results(harness.run(number)) == [(first.task_id, TaskStatus.success)]
    restart(harness)
    actor = harness.core.actors[ACTOR]
    actor.answered.clear()  # as after ACTOR_ANSWERS_KEPT later calls
    actor.answered_bytes = 0
    (again,) = of_type(harness.send(first, second), TaskResult)  # the client resubmits its unanswered call
    assert again.task_id == first.task_id and again.status == TaskStatus.failed
    assert type(cloudpickle.loads(again.payload)) is ActorAnswerLostError
    assert "never run twice" in again.error_text
    assert results(harness.run(number)) == [(second.task_id, TaskStatus.success)]
    assert harness.processors[number].ran.count(first.task_id) == 1


def test_each_caller_has_its_own_sequence() -> None:
    harness = hosting()
    made, number = create(harness)
    harness.run(number)
    late = call_of(harness, b"caller-a", 9)
    harness.send(late)
    harness.run(number)
    early_of_another = call_of(harness, b"caller-b", 1)
    harness.send(early_of_another)
    assert results(harness.run(number)) == [(early_of_another.task_id, TaskStatus.success)]


def test_calls_cancelled_ahead_do_not_stop_earlier_ones_after_a_restart() -> None:
    harness = hosting()
    made, number = create(harness)
    harness.run(number)
    calls = [call_of(harness, b"caller-a", n) for n in range(1, ACTOR_PIPE + 4)]
    harness.send(*calls)  # the last ones wait in the actor's line: more than ACTOR_PIPE
    cancelled = harness.send(TaskCancel(task_ids=[calls[-1].task_id]))
    assert results(cancelled) == [(calls[-1].task_id, TaskStatus.canceled)]
    harness.run(number)  # the first call ran
    restart(harness)  # the calls not handed are forgotten: the client resubmits its unanswered ones
    unhanded = [call for call in calls[1:-1] if call.task_id not in harness.core.tasks]
    assert unhanded
    harness.send(*unhanded)
    answered = results(harness.run(number, count=len(calls))) + results(harness.run(number, count=len(calls)))
    assert set((call.task_id, TaskStatus.success) for call in unhanded) <= set(answered)


@pytest.mark.parametrize("seed", range(10))
def test_seeded_restarts_run_each_call_at_most_once_in_each_callers_order(seed: int) -> None:
    rng = random.Random(seed)
    harness = hosting()
    made, number = create(harness)
    harness.run(number)
    callers = {b"caller-a": 0, b"caller-b": 0}
    calls: Dict[bytes, object] = {}
    unanswered: Dict[bytes, object] = {}
    delivered: List[bytes] = []  # answers the client got since the last restart: the last ones may be lost with it
    order: List[bytes] = []  # every call, in the order first sent
    answers: Dict[bytes, List[int]] = {}
    for _ in range(120):
        start = len(harness.sent)
        move = rng.random()
        if move < 0.45:
            caller = rng.choice(list(callers))
            callers[caller] += 1
            call = call_of(harness, caller, callers[caller])
            unanswered[call.task_id] = calls[call.task_id] = call
            order.append(call.task_id)
            harness.send(call)
        elif move < 0.8:
            harness.run(number, count=rng.randint(1, 4))
        elif move < 0.9:
            actor = harness.core.actors[ACTOR]
            if rng.random() < 0.5:  # answers pushed out by later calls
                actor.answered.clear()
                actor.answered_bytes = 0
            harness.send(Goodbye(reason="restarting", reconnect=True))
            harness.connect()
            for task_id in delivered[-rng.randint(0, 6) :]:  # answered, but the answers died with the scheduler
                unanswered[task_id] = calls[task_id]
            delivered.clear()
            resubmitted = [unanswered[task_id] for task_id in order if task_id in unanswered]
            if resubmitted:
                harness.send(*resubmitted)
        else:
            harness.tick(advance=0.1)
        for result in of_type(harness.sent[start:], TaskResult):
            answers.setdefault(result.task_id, []).append(result.status)
            if unanswered.pop(result.task_id, None) is not None:
                delivered.append(result.task_id)
        harness.core.validate()
    ran = harness.processors[number].ran
    assert len(ran) == len(set(ran)), "an actor call ran twice"
    for caller in callers:
        mine = [task_id for task_id in ran if task_id.startswith(caller)]
        assert mine == sorted(mine, key=lambda task_id: int.from_bytes(task_id[8:], "little"))
    for statuses in answers.values():  # answered again, with its answer or, once not kept, a failure
        assert statuses[0] in (TaskStatus.success, TaskStatus.canceled), statuses
