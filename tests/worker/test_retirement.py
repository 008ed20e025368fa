"""A worker's side of graceful retirement (docs/protocol.md, "Retiring a worker"), on the sans-IO core: it asks
(WorkerRetire), hands back queued tasks when the scheduler asks, finishes the running one, and exits on
Goodbye(retired); it also leaves at its own deadline, or when the scheduler is lost, and never registers again."""

from __future__ import annotations

from scaler.protocol import (
    BalanceRequest,
    BalanceResponse,
    Goodbye,
    HeartbeatEcho,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerRetire,
)
from scaler.worker.core import EXIT_OK, RETIRE_GRACE_SECONDS
from tests.worker.core_harness import Harness, of_type
from tests.worker.test_core import connected


def running_one(**settings):
    """A registered worker whose processor runs one task: (harness, its task, the processor)."""
    harness = connected(**settings)
    task = harness.task()
    harness.send(task)
    sim = harness.active
    sim.read_orders()
    assert sim.start_next().task_id == task.task_id
    return harness, task, sim


def test_an_idle_worker_asks_once_then_exits_on_the_schedulers_go_ahead() -> None:
    harness = connected()
    out = harness.retire(deadline_seconds=12.5)
    assert of_type(out, WorkerRetire) == [WorkerRetire(reason="received SIGTERM", deadline_ms=12_500)]
    assert harness.exit is None
    assert harness.retire() == [], "asked again (a second SIGTERM from the same process group): nothing new"
    harness.tick(1)
    assert harness.heartbeats and harness.exit is None, "it stays registered and alive while retiring"
    harness.send(Goodbye(reason="retired: every task you held is settled", retired=True))
    assert harness.exit.code == EXIT_OK and not harness.exit.disconnect
    assert "settled" in harness.exit.reason


def test_queued_tasks_are_handed_back_and_the_running_one_reports_its_result() -> None:
    harness = connected()
    running, *queued = [harness.task() for _ in range(3)]
    harness.send(running, *queued)
    sim = harness.active
    sim.read_orders()
    assert sim.start_next().task_id == running.task_id  # unknown run time: one handed at a time, the rest queued
    harness.retire()
    (answer,) = of_type(harness.send(BalanceRequest(count=3)), BalanceResponse)
    assert sorted(answer.task_ids) == sorted(t.task_id for t in queued)
    sim.finish()
    out = harness.report(sim.number)
    assert [(r.task_id, r.status) for r in of_type(out, TaskResult)] == [(running.task_id, TaskStatus.success)]
    assert not harness.core.tasks and harness.exit is None
    harness.send(Goodbye(reason="retired", retired=True))
    assert harness.exit.code == EXIT_OK
    assert sim.ran == [running.task_id], "the handed-back tasks never ran here"


def test_past_its_own_deadline_it_leaves_with_a_disconnect() -> None:
    """The scheduler's Goodbye normally comes at the deadline; the worker's own, a little later, covers a scheduler
    that stopped answering."""
    harness, _, _ = running_one(death_timeout_seconds=300)
    harness.retire(deadline_seconds=5)
    for _ in range(int(5 + RETIRE_GRACE_SECONDS) - 1):
        harness.tick(1)
        harness.send(HeartbeatEcho(sent_at_us=0))  # the scheduler answers heartbeats, but never says Goodbye
    harness.tick(0.9)
    assert harness.exit is None
    assert harness.core.next_deadline() <= harness.now + 0.1
    harness.tick(0.1)
    assert harness.exit.code == EXIT_OK and harness.exit.disconnect
    assert of_type(harness.sent, WorkerDisconnect)


def test_a_worker_not_registered_or_with_no_deadline_leaves_at_once() -> None:
    harness = Harness()
    harness.retire()
    assert harness.exit.code == EXIT_OK and not of_type(harness.sent, WorkerRetire)
    harness = connected()
    harness.retire(deadline_seconds=0)
    assert harness.exit.code == EXIT_OK and harness.exit.disconnect and of_type(harness.sent, WorkerDisconnect)


def test_a_scheduler_lost_mid_retirement_ends_it_without_registering_again() -> None:
    harness, _, _ = running_one()
    harness.retire()
    harness.core.connection_dropped(harness.now)
    harness._step()
    assert harness.exit.code == EXIT_OK and harness.connections == 1, "no new connection, no Hello again"
    assert "while retiring" in harness.exit.reason and not harness.exit.disconnect


def test_a_restarted_scheduler_that_does_not_know_the_worker_ends_the_retirement() -> None:
    harness = connected()
    harness.retire()
    harness.send(Goodbye(reason="not registered: send Hello first", reconnect=True))
    assert harness.exit.code == EXIT_OK and harness.connections == 1


def test_past_the_schedulers_deadline_the_running_task_is_abandoned() -> None:
    """The scheduler reruns it elsewhere and says Goodbye(retired): the worker exits at once (the shell kills the
    processor running it, and reads nothing more from it)."""
    harness, _, _ = running_one()
    harness.retire(deadline_seconds=1)
    harness.send(Goodbye(reason="retired: the deadline passed, your unfinished tasks run elsewhere", retired=True))
    assert harness.exit.code == EXIT_OK and "deadline" in harness.exit.reason
    assert not of_type(harness.sent, TaskResult) and not of_type(harness.sent, WorkerDisconnect)
