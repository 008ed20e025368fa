"""The worker core with a preload (scaler/worker/preload.py), without sockets or processes: it registers only once its
first processor ran the preload, stops when a preload fails, and lets tasks wait for a new processor's preload (one
that replaces a dead one, takes over from a parked one, or hosts an actor)."""

from __future__ import annotations

from typing import List, Optional, Tuple

import pytest

from scaler.protocol import ActorRelease, Hello, Task, TaskResult, TaskStatus, WorkerDisconnect
from scaler.worker.core import EXIT_BROKEN, EXIT_PRELOAD_FAILED
from scaler.worker.processor_messages import ProcessorReport, ProcessorResult
from tests.worker.core_harness import FUNCTION, Harness, of_type

PRELOAD = "pricing.setup:load_curves"
TRACEBACK = 'Traceback (most recent call last):\n  File "pricing/setup.py"\nOSError: no curves\n'


def preloaded(harness: Harness, number: int, failure: Optional[str] = None) -> List[object]:
    """What processor `number` sends once it ran the preload: an empty report, or its traceback (preload.py)."""
    results = [] if failure is None else [ProcessorResult(b"", False, b"", failure, 0, 0, 0)]
    harness.core.processor_report(number, ProcessorReport(results, []), harness.now)
    return harness._step()


def registered(harness: Harness) -> None:
    harness.connect()
    harness.serve(FUNCTION)  # the function every test task calls, fetched once


def ready(**settings) -> Harness:
    """A worker with the preload, registered once its first processor ran it."""
    harness = Harness(preload=PRELOAD, **settings)
    preloaded(harness, 1)
    registered(harness)
    return harness


def started(harness: Harness, *tasks: Task) -> None:
    """Send `tasks`; the processor tasks are handed to starts the first."""
    harness.send(*tasks)
    harness.active.read_orders()
    harness.active.start_next()


def test_without_a_preload_the_worker_connects_at_once() -> None:
    harness = Harness()
    assert harness.connections == 1
    assert not harness.core.preloading


def test_the_worker_registers_once_its_first_processor_ran_the_preload() -> None:
    harness = Harness(preload=PRELOAD)
    assert harness.connections == 0 and not harness.sent
    assert list(harness.processors) == [1] and harness.core.preloading == {1}
    sent = preloaded(harness, 1)
    assert harness.connections == 1 and of_type(sent, Hello)
    assert not harness.core.preloading
    registered(harness)
    task = harness.task()
    harness.send(task)
    sent = harness.run(1)
    assert [result.status for result in of_type(sent, TaskResult)] == [TaskStatus.success]


def test_a_long_preload_is_not_a_silent_scheduler() -> None:
    """The death timeout counts from the first Hello: a preload may take longer than it."""
    harness = Harness(preload=PRELOAD, death_timeout_seconds=30.0)
    for _ in range(10):
        harness.tick(advance=10.0)
    assert harness.exit is None and harness.connections == 0
    preloaded(harness, 1)
    assert harness.connections == 1
    harness.tick(advance=29.0)
    assert harness.exit is None
    harness.tick(advance=2.0)
    assert harness.exit is not None and "no answer" in harness.exit.reason


def test_a_preload_that_raises_at_start_stops_the_worker_with_its_traceback() -> None:
    harness = Harness(preload=PRELOAD)
    preloaded(harness, 1, TRACEBACK)
    assert harness.exit is not None and harness.exit.code == EXIT_PRELOAD_FAILED
    assert PRELOAD in harness.exit.reason and "OSError: no curves" in harness.exit.reason
    assert harness.connections == 0 and not harness.sent


def test_a_processor_that_dies_while_preloading_at_start_stops_the_worker() -> None:
    harness = Harness(preload=PRELOAD)
    harness.die(1)
    assert harness.exit is not None and harness.exit.code == EXIT_PRELOAD_FAILED
    assert "died with signal SIGKILL while running the preload" in harness.exit.reason
    assert harness.connections == 0


def test_a_preload_past_the_memory_stop_threshold_at_start_stops_the_worker() -> None:
    harness = Harness(preload=PRELOAD, memory_limit="100MB", memory_enforcement="watchdog")
    harness.tick()
    assert harness.samples, "a preloading processor's memory is sampled like any other's"
    harness.memory({1: 99_000_000})
    assert harness.exit is not None and harness.exit.code == EXIT_PRELOAD_FAILED
    assert "past the memory stop threshold" in harness.exit.reason
    assert harness.killed == [] and len(harness.processors) == 1, "no other processor forked to load it again"


def test_tasks_wait_for_a_replacement_processors_preload() -> None:
    harness = ready()
    first, second = harness.task(), harness.task()
    started(harness, first, second)
    harness.die(1)  # its task fails; the next goes to processor 2, which preloads first
    assert harness.core.preloading == {2}
    assert [task.task_id for task in harness.hands[-1].tasks] == [second.task_id]
    preloaded(harness, 2)
    sent = harness.run(2)
    assert [result.task_id for result in of_type(sent, TaskResult)] == [second.task_id]
    assert harness.exit is None


@pytest.mark.parametrize("forked_by", ["die", "block"])  # in place of a dead processor, or of a parked one
def test_a_preload_that_fails_after_registering_makes_the_worker_leave(forked_by: str) -> None:
    harness = ready()
    started(harness, harness.task())
    getattr(harness, forked_by)(1)
    sent = preloaded(harness, 2, TRACEBACK)
    assert harness.exit is not None and harness.exit.code == EXIT_BROKEN and harness.exit.disconnect
    assert "OSError: no curves" in harness.exit.reason
    assert of_type(sent, WorkerDisconnect), "the scheduler gives its tasks to other workers at once"


def test_the_processor_that_takes_over_from_a_parked_one_runs_the_preload_first() -> None:
    harness = ready()
    parent, after = harness.task(), harness.task()
    started(harness, parent, after)
    harness.block(1)  # the parent waits on a child: processor 2 is forked to take over, and preloads first
    core = harness.core
    assert core.active.number == 2 and [processor.number for processor in core.parked] == [1]
    assert core.preloading == {2}, "its first report is the preload's, not results"
    handed = [task.task_id for hand in harness.hands if hand.number == 2 for task in hand.tasks]
    assert handed == [after.task_id], "handed at once: the process runs it once the preload returned"
    preloaded(harness, 2)
    assert not core.preloading
    assert [result.task_id for result in of_type(harness.run(2), TaskResult)] == [after.task_id]
    child = harness.task(parent=parent.task_id)
    harness.send(child)
    assert [result.task_id for result in of_type(harness.run(2), TaskResult)] == [child.task_id]
    harness.processors[1].finish()
    harness.report(1)
    assert [processor.number for processor in core.spares] == [1]
    # the next parking takes that spare, preloaded already: no fork, no second preload
    nested = harness.task()
    started(harness, nested)
    harness.block(2)
    assert core.active.number == 1 and not core.preloading and 3 not in harness.processors
    again = harness.task(parent=nested.task_id)
    harness.send(again)
    harness.run(1)  # its result may be held a moment, to leave with the parent's: what it ran is what counts
    assert harness.processors[1].ran[-1] == again.task_id and harness.exit is None


def create_actor(harness: Harness, actor_id: bytes) -> Tuple[bytes, int]:
    """Send an actor's creation: (its task id, the number of the processor started for the actor)."""
    before = set(harness.processors)
    creation = harness.task(actor_id=actor_id, creates_actor=True)
    harness.send(creation)
    (number,) = set(harness.processors) - before
    return creation.task_id, number


def test_an_actors_process_runs_the_preload_before_its_constructor() -> None:
    harness = ready(actor_slots=2)
    creation, number = create_actor(harness, b"actor-preloaded!")
    assert harness.core.preloading == {number}
    assert [task.task_id for task in harness.hands[-1].tasks] == [creation] and harness.hands[-1].number == number
    preloaded(harness, number)
    sent = harness.run(number)
    assert [(result.task_id, result.status) for result in of_type(sent, TaskResult)] == [(creation, TaskStatus.success)]


def test_a_preload_that_raises_in_an_actors_process_makes_the_worker_leave() -> None:
    """Its actors are then lost at the scheduler, which removes the worker (WorkerDisconnect)."""
    harness = ready(actor_slots=2)
    _, number = create_actor(harness, b"actor-preloaded!")
    sent = preloaded(harness, number, TRACEBACK)
    assert harness.exit is not None and harness.exit.code == EXIT_BROKEN and harness.exit.disconnect
    assert "OSError: no curves" in harness.exit.reason
    assert of_type(sent, WorkerDisconnect)


def test_an_actors_process_that_dies_while_preloading_loses_that_actor_only() -> None:
    harness = ready(actor_slots=2)
    creation, number = create_actor(harness, b"actor-preloaded!")
    sent = harness.die(number)
    assert [(result.task_id, result.status) for result in of_type(sent, TaskResult)] == [
        (creation, TaskStatus.actor_lost)
    ]
    (release,) = of_type(sent, ActorRelease)
    assert "while running the preload" in release.reason
    assert harness.exit is None and not harness.core.preloading
