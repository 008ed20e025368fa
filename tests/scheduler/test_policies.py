"""Task policies in the scheduler core (issue 16): resources, priorities, retries. The harness validates the core's
invariants after every step (a ready task queued once, in its requirement's queue; no task on a worker whose offer
does not meet its requirement); seeded interleavings are in test_simulation.py."""

from __future__ import annotations

import logging
import math
from typing import Dict, List

import pytest

from scaler.protocol import (
    PROTOCOL_VERSION,
    BalanceRequest,
    BalanceResponse,
    ClientHeartbeat,
    Hello,
    HelloReply,
    Resource,
    Role,
    Task,
    TaskCancel,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerHeartbeat,
    WorkerRetire,
    encode,
)
from scaler.scheduler import core as core_module
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, WORKER_B, Harness, of_type, result

GPU_WORKER = b"W|test|7|gpu"
OTHER_GPU_WORKER = b"W|test|8|gpu2"
_TASK_LOCK = 4  # WorkerHeartbeat.flags bit: the worker's processor is busy


def needs(**amounts: float) -> List[Resource]:
    return [Resource(name=name, amount=amount) for name, amount in amounts.items()]


def sent_tasks(out: Dict[bytes, List[object]], peer: bytes) -> List[Task]:
    return of_type(out.get(peer, []), Task)


def test_the_scheduler_says_it_honours_task_policies() -> None:
    harness = Harness()
    assert harness.connect_client().task_policies
    assert harness.connect_worker().task_policies


def test_a_worker_without_task_policies_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    harness = Harness()
    hello = Hello(protocol_version=PROTOCOL_VERSION, role=Role.worker, name="old", capacity=2)
    with caplog.at_level(logging.WARNING, logger="scaler.scheduler.core"):
        harness.send(WORKER_A, hello)
        harness.tick(advance=1.0)
    assert [r.getMessage() for r in caplog.records if "older version" in r.getMessage()] == [
        "worker old is of an older version: it runs its queue in arrival order, not by priority, and does not "
        "enforce task timeouts"
    ]


def test_a_task_needing_resources_goes_only_to_a_worker_offering_them() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=100)  # offers nothing
    harness.connect_worker(GPU_WORKER, capacity=100, resources={"gpu": 2, "mem": 64e9})
    gpu_tasks = [harness.task(resources=needs(gpu=1)) for _ in range(20)]
    both = [harness.task(resources=needs(gpu=2, mem=32e9)) for _ in range(5)]
    plain = [harness.task() for _ in range(20)]
    out = harness.send(CLIENT, *gpu_tasks, *both, *plain)
    on_gpu = {task.task_id for task in sent_tasks(out, GPU_WORKER)}
    on_other = {task.task_id for task in sent_tasks(out, WORKER_A)}
    assert {task.task_id for task in gpu_tasks + both} <= on_gpu
    assert on_other and on_other <= {task.task_id for task in plain}, "plain tasks spread over both, gpu ones never"
    assert harness.core.tasks_needing_resources() == 0


def test_more_than_offered_waits_then_runs_when_a_worker_offering_it_connects(caplog: pytest.LogCaptureFixture) -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(GPU_WORKER, resources={"gpu": 1})
    waiting = [harness.task(resources=needs(gpu=2)) for _ in range(3)]
    with caplog.at_level(logging.WARNING, logger="scaler.scheduler.core"):
        assert harness.send(CLIENT, *waiting) == {}
        harness.tick(advance=0.1)
        last = harness.task(resources=needs(gpu=2))
        harness.send(CLIENT, last)
        for _ in range(5):
            harness.tick(advance=1.0)
    assert harness.core.tasks_needing_resources() == 4
    assert harness.core.demand(harness.now).tasks_ready == 0, "more workers like the connected one would not help"
    logged = [r.getMessage() for r in caplog.records if "no connected worker offers" in r.getMessage()]
    assert logged == ["3 task(s) need gpu=2; no connected worker offers it: they wait until one connects"]
    harness.connect_worker(OTHER_GPU_WORKER, resources={"gpu": 4})  # the reply, then the tasks, in one frame
    assert list(harness.core.workers[OTHER_GPU_WORKER].assigned) == [t.task_id for t in waiting] + [last.task_id]
    assert harness.core.tasks_needing_resources() == 0


def test_tasks_needing_nothing_do_not_count_as_needing_resources_while_no_worker_is_connected(
    caplog: pytest.LogCaptureFixture,
) -> None:
    harness = Harness()
    harness.connect_client()
    with caplog.at_level(logging.WARNING, logger="scaler.scheduler.core"):
        harness.send(CLIENT, harness.task(), harness.task(resources=needs(gpu=1)))
        harness.tick(advance=1.0)
    assert harness.core.tasks_needing_resources() == 1 and harness.core.demand(harness.now).tasks_ready == 1
    assert [r.getMessage() for r in caplog.records] == [
        "1 task(s) need gpu=1; no connected worker offers it: they wait until one connects"
    ]


def test_tasks_waiting_for_resources_nobody_offers_are_not_ready_demand() -> None:
    """An autoscaler reads tasksReady and oldestReadyWaitUs as work more workers would start: workers like those it
    spawns (offering nothing, or what connected workers offer) would not start these, so they count apart."""
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=1)
    harness.send(CLIENT, *[harness.task(resources=needs(gpu=1)) for _ in range(4)])
    harness.tick(advance=2.0)
    harness.send(WORKER_A, WorkerHeartbeat())
    harness.tick(advance=2.0)
    harness.send(CLIENT, *[harness.task() for _ in range(3)])  # one runs, two wait for a free slot
    harness.tick(advance=1.0)
    demand = harness.core.demand(harness.now)
    assert (demand.tasks_waiting, demand.tasks_ready, demand.tasks_needing_resources) == (6, 2, 4)
    assert 0.99 < demand.oldest_ready_wait < 1.01, "the plain tasks' wait, not the gpu tasks' 5 s"
    harness.connect_worker(GPU_WORKER, capacity=1, resources={"gpu": 1})  # takes one; the other three can run now
    demand = harness.core.demand(harness.now)
    assert (demand.tasks_waiting, demand.tasks_ready, demand.tasks_needing_resources) == (5, 5, 0)
    assert 4.99 < demand.oldest_ready_wait < 5.01


def test_a_task_waiting_for_resources_can_be_canceled() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    task = harness.task(resources=needs(fpga=1))
    harness.send(CLIENT, task)
    out = harness.send(CLIENT, TaskCancel(task_ids=[task.task_id]))
    (answer,) = of_type(out[CLIENT], TaskResult)
    assert answer.task_id == task.task_id and answer.status == TaskStatus.canceled
    assert not harness.core.tasks and harness.core.tasks_needing_resources() == 0
    assert list(harness.core.ready_queues) == [()], "the queue of a requirement nobody uses any more is dropped"


def test_tasks_waiting_again_when_their_only_eligible_worker_dies_and_never_land_elsewhere() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=10)
    harness.connect_worker(GPU_WORKER, capacity=10, resources={"gpu": 1})
    tasks = [harness.task(resources=needs(gpu=1)) for _ in range(4)]
    harness.send(CLIENT, *tasks)
    assert len(harness.core.workers[GPU_WORKER].assigned) == 4
    out = harness.send(GPU_WORKER, WorkerDisconnect(reason="killed"))
    assert not sent_tasks(out, WORKER_A) and not harness.core.workers[WORKER_A].assigned
    assert harness.core.tasks_needing_resources() == 4
    harness.tick(advance=2.0)  # balancing has nothing to say about tasks nobody can take
    harness.connect_worker(OTHER_GPU_WORKER, resources={"gpu": 1})
    assert list(harness.core.workers[OTHER_GPU_WORKER].assigned) == [t.task_id for t in tasks]


def test_retirement_hands_tasks_back_only_to_eligible_workers() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(GPU_WORKER, capacity=10, resources={"gpu": 1})
    tasks = [harness.task(resources=needs(gpu=1)) for _ in range(4)]
    harness.send(CLIENT, *tasks)
    harness.connect_worker(WORKER_A, capacity=10)
    out = harness.send(GPU_WORKER, WorkerRetire(reason="SIGTERM", deadline_ms=60_000))
    assert of_type(out[GPU_WORKER], BalanceRequest) == [BalanceRequest(count=4)]
    queued = [t.task_id for t in tasks[1:]]  # the first one runs
    out = harness.send(GPU_WORKER, BalanceResponse(task_ids=queued))
    assert not sent_tasks(out, WORKER_A) and not harness.core.workers[WORKER_A].assigned
    out = harness.connect_worker(OTHER_GPU_WORKER, resources={"gpu": 1})
    assert list(harness.core.workers[OTHER_GPU_WORKER].assigned) == queued


def test_tasks_whose_only_eligible_workers_retire_need_resources_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=10)
    harness.connect_worker(GPU_WORKER, capacity=1, resources={"gpu": 1})
    tasks = [harness.task(resources=needs(gpu=1)) for _ in range(3)]
    harness.send(CLIENT, *tasks)  # one on the gpu worker, two ready
    with caplog.at_level(logging.WARNING, logger="scaler.scheduler.core"):
        harness.send(GPU_WORKER, WorkerRetire(reason="SIGTERM", deadline_ms=60_000))
        for _ in range(3):
            harness.send(WORKER_A, WorkerHeartbeat())
            harness.send(GPU_WORKER, WorkerHeartbeat(running=1, flags=_TASK_LOCK))
            harness.tick(advance=1.0)
    demand = harness.core.demand(harness.now)
    assert (demand.tasks_ready, demand.tasks_needing_resources, demand.tasks_assigned) == (0, 2, 1)
    assert [r.getMessage() for r in caplog.records if "need gpu=1" in r.getMessage()] == [
        "2 task(s) need gpu=1; only retiring workers offer it: they wait until another one connects"
    ]
    harness.connect_worker(OTHER_GPU_WORKER, capacity=10, resources={"gpu": 1})
    assert list(harness.core.workers[OTHER_GPU_WORKER].assigned) == [t.task_id for t in tasks[1:]]
    assert harness.core.tasks_needing_resources() == 0


def test_balancing_moves_tasks_only_between_workers_that_can_run_them() -> None:
    harness = Harness(balance_interval_seconds=0.5)
    harness.connect_client()
    harness.connect_worker(GPU_WORKER, capacity=100, resources={"gpu": 1})
    tasks = [harness.task(resources=needs(gpu=1)) for _ in range(12)]
    harness.send(CLIENT, *tasks)
    harness.connect_worker(WORKER_A, capacity=100)  # idle, but without a gpu: no balancing towards it
    out = harness.tick(advance=1.0)
    assert not of_type(out.get(GPU_WORKER, []), BalanceRequest)
    harness.connect_worker(OTHER_GPU_WORKER, capacity=100, resources={"gpu": 1})
    out = harness.tick(advance=1.0)
    (request,) = of_type(out[GPU_WORKER], BalanceRequest)
    assert request.count == 6
    moved = [t.task_id for t in tasks[-request.count :]]
    out = harness.send(GPU_WORKER, BalanceResponse(task_ids=moved))
    assert [t.task_id for t in sent_tasks(out, OTHER_GPU_WORKER)] == moved
    assert WORKER_A not in out and not harness.core.workers[WORKER_A].assigned


def test_ready_tasks_waiting_for_full_gpu_workers_do_not_stop_balancing_among_other_workers() -> None:
    harness = Harness(balance_interval_seconds=0.5)
    harness.connect_client()
    harness.connect_worker(GPU_WORKER, capacity=1, resources={"gpu": 1})
    harness.send(CLIENT, *[harness.task(resources=needs(gpu=1)) for _ in range(4)])  # one runs, three wait for it
    harness.connect_worker(WORKER_A, capacity=100)
    plain = [harness.task() for _ in range(12)]
    harness.send(CLIENT, *plain)
    harness.connect_worker(WORKER_B, capacity=100)  # idle: WORKER_A's queued tasks run as well here
    out = harness.tick(advance=1.0)
    (request,) = of_type(out[WORKER_A], BalanceRequest)
    assert request.count == 6 and not of_type(out.get(GPU_WORKER, []), BalanceRequest)
    moved = [t.task_id for t in plain[-request.count :]]
    out = harness.send(WORKER_A, BalanceResponse(task_ids=moved))
    assert [t.task_id for t in sent_tasks(out, WORKER_B)] == moved
    assert harness.core.demand(harness.now).tasks_ready == 3, "the gpu tasks still wait for the gpu worker"


def test_no_balancing_into_workers_while_ready_tasks_wait_that_they_can_take() -> None:
    """A worker found dead hands its tasks back in the tick that balances: those go to the idle worker first, rather
    than it asking busy workers for more."""
    harness = Harness(worker_timeout_seconds=5.0, balance_interval_seconds=5.5)
    harness.connect_client()
    silent = b"W|test|11|silent"
    harness.connect_worker(WORKER_A, capacity=100)
    harness.send(CLIENT, *[harness.task() for _ in range(12)])
    harness.connect_worker(silent, capacity=100)
    harness.send(CLIENT, *[harness.task() for _ in range(12)])
    assert len(harness.core.workers[silent].assigned) == 12
    harness.connect_worker(WORKER_B, capacity=100)  # idle; balancing is not due yet
    dies_at = harness.now + harness.core.workers[silent].clock.timeout
    while harness.now + 0.5 < dies_at:
        harness.now += 0.5
        harness.send(WORKER_A, WorkerHeartbeat())
        harness.send(WORKER_B, WorkerHeartbeat())
        harness.send(CLIENT, ClientHeartbeat())
    harness.now = max(dies_at + 0.01, harness.core._next_balance)
    out = harness.tick()  # the silent worker is dropped and balancing is due: its 12 tasks are ready
    assert silent not in harness.core.workers
    assert not of_type(out.get(WORKER_A, []), BalanceRequest)
    assert len(sent_tasks(out, WORKER_B)) >= 6


def test_balanced_tasks_never_land_on_a_worker_without_their_resources_when_the_receiver_dies() -> None:
    harness = Harness(balance_interval_seconds=0.5)
    harness.connect_client()
    harness.connect_worker(GPU_WORKER, capacity=12, resources={"gpu": 1})
    tasks = [harness.task(resources=needs(gpu=1)) for _ in range(12)]
    harness.send(CLIENT, *tasks)
    harness.connect_worker(OTHER_GPU_WORKER, capacity=100, resources={"gpu": 1})
    harness.connect_worker(WORKER_A, capacity=100)
    (request,) = of_type(harness.tick(advance=1.0)[GPU_WORKER], BalanceRequest)
    harness.send(OTHER_GPU_WORKER, WorkerDisconnect(reason="killed"))  # the idle receiver goes before the answer
    harness.send(GPU_WORKER, WorkerDisconnect(reason="killed"))  # and so does the donor, with nothing running
    assert not harness.core.workers[WORKER_A].assigned and harness.core.tasks_needing_resources() == 12
    harness.tick(advance=2.0)
    assert not harness.core.workers[WORKER_A].assigned


def test_idle_gpu_workers_take_queued_tasks_from_workers_offering_nothing() -> None:
    harness = Harness(balance_interval_seconds=0.5)
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=100)
    tasks = [harness.task() for _ in range(12)]
    harness.send(CLIENT, *tasks)
    harness.connect_worker(GPU_WORKER, capacity=100, resources={"gpu": 1})  # idle: any task of WORKER_A runs there
    out = harness.tick(advance=1.0)
    (request,) = of_type(out[WORKER_A], BalanceRequest)
    assert request.count == 6
    moved = [t.task_id for t in tasks[-request.count :]]
    out = harness.send(WORKER_A, BalanceResponse(task_ids=moved))
    assert [t.task_id for t in sent_tasks(out, GPU_WORKER)] == moved


def test_bad_resources_are_refused_with_a_reason() -> None:
    harness = Harness()
    harness.connect_client()
    for bad, why in (
        (needs(gpu=-1), "amount -1.0 is not a finite number >= 0"),
        (needs(gpu=math.nan), "amount nan is not a finite number >= 0"),
        (needs(gpu=math.inf), "amount inf is not a finite number >= 0"),
        ([Resource(name="", amount=1.0)], "a resource needs a name"),
        (needs(gpu=1) + needs(gpu=2), "resource 'gpu' given twice"),
    ):
        task = harness.task(resources=bad)
        (answer,) = of_type(harness.send(CLIENT, task)[CLIENT], TaskResult)
        assert answer.status == TaskStatus.refused and why in answer.error_text, answer.error_text
    hello = Hello(protocol_version=PROTOCOL_VERSION, role=Role.worker, name="w", capacity=1, resources=needs(gpu=-2))
    (reply,) = harness.send(WORKER_A, hello)[WORKER_A]
    assert isinstance(reply, HelloReply) and not reply.accepted and "gpu" in reply.reason
    assert not harness.core.workers and not harness.core.tasks


def test_distinct_requirements_at_once_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core_module, "MAX_REQUIREMENTS", 3)
    harness = Harness()
    harness.connect_client()
    out = harness.send(CLIENT, *[harness.task(resources=needs(mem=float(n + 1))) for n in range(5)])
    refused = [r for r in of_type(out[CLIENT], TaskResult) if r.status == TaskStatus.refused]
    assert [r.error_text for r in refused] == ["too many distinct resource requirements at once (3)"] * 2
    assert len(harness.core.tasks) == 3, "3 requirements waiting; a known requirement is still taken:"
    out = harness.send(CLIENT, harness.task(resources=needs(mem=1.0)))
    assert CLIENT not in out


def test_distinct_worker_offers_are_capped_and_the_refused_worker_is_told_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(core_module, "MAX_RESOURCE_CLASSES", 3)
    harness = Harness()
    harness.connect_worker(WORKER_A)  # offers nothing: a class too
    harness.connect_worker(GPU_WORKER, resources={"gpu": 1})
    harness.connect_worker(OTHER_GPU_WORKER, resources={"gpu": 2})
    hello = Hello(protocol_version=PROTOCOL_VERSION, role=Role.worker, name="fpga", capacity=1, resources=needs(fpga=1))
    with caplog.at_level(logging.WARNING, logger="scaler.scheduler.core"):
        (reply,) = harness.send(WORKER_B, hello)[WORKER_B]
    assert isinstance(reply, HelloReply) and not reply.accepted
    assert reply.reason == (
        "too many distinct resource offers: workers connected already offer 3 different sets of resources, the "
        "scheduler's limit; offer one of those (fpga=1 is new)"
    )
    assert WORKER_B not in harness.core.workers and len(harness.core.loads.classes) == 3
    assert [r.getMessage() for r in caplog.records] == [f"refused worker fpga ({WORKER_B!r}): {reply.reason}"]
    harness.connect_worker(b"W|test|10|gpu", resources={"gpu": 1})  # an offer already known is always welcome
    harness.send(OTHER_GPU_WORKER, WorkerDisconnect(reason="leaving"))  # its class goes: room for a new one
    (reply,) = harness.send(WORKER_B, hello)[WORKER_B]
    assert reply.accepted and len(harness.core.loads.classes) == 3


def test_zero_amounts_are_no_requirement() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    out = harness.send(CLIENT, harness.task(resources=needs(gpu=0)))
    assert len(sent_tasks(out, WORKER_A)) == 1


# ---- priorities ------------------------------------------------------------------------------------------------------


def test_ready_tasks_are_handed_out_highest_priority_first_fifo_within_a_priority() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=1)
    first = harness.task()
    harness.send(CLIENT, first)  # takes the only slot
    priorities = [0, 5, -1, 5, 1, 0, 5]
    waiting = [harness.task(priority=p) for p in priorities]
    harness.send(CLIENT, *waiting)
    order = []
    running = first
    for _ in waiting:
        (task,) = sent_tasks(harness.send(WORKER_A, result(running)), WORKER_A)
        order.append(task.task_id)
        running = task
    by_priority = sorted(range(len(waiting)), key=lambda i: -priorities[i])  # stable: FIFO within a priority
    assert order == [waiting[i].task_id for i in by_priority]


def test_priorities_hold_across_resource_requirements() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(GPU_WORKER, capacity=1, resources={"gpu": 1})
    blocker = harness.task()
    harness.send(CLIENT, blocker)
    low_gpu, high_plain, high_gpu = (
        harness.task(resources=needs(gpu=1), priority=1),
        harness.task(priority=3),
        harness.task(resources=needs(gpu=1), priority=2),
    )
    harness.send(CLIENT, low_gpu, high_plain, high_gpu)
    order = []
    running = blocker
    for _ in range(3):
        (task,) = sent_tasks(harness.send(GPU_WORKER, result(running)), GPU_WORKER)
        order.append(task.task_id)
        running = task
    assert order == [high_plain.task_id, high_gpu.task_id, low_gpu.task_id]


def test_a_nested_task_runs_above_its_parent_and_is_re_encoded_only_then() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=10)
    parent = harness.task(priority=3)
    harness.send(CLIENT, parent)
    child = harness.task(parent_task_id=parent.task_id)  # own priority 0: raised to 4
    (sent,) = sent_tasks(harness.send(CLIENT, child), WORKER_A)
    assert sent.priority == 4 and harness.core.tasks[child.task_id].priority == 4
    assert sent.args == child.args, "re-encoded with the arguments the scheduler had not read"
    grandchild = harness.task(parent_task_id=child.task_id)
    (sent,) = sent_tasks(harness.send(CLIENT, grandchild), WORKER_A)
    assert sent.priority == 5, "a nested task's nested task: above its parent's effective priority"
    urgent = harness.task(parent_task_id=parent.task_id, priority=10)  # already above: sent as the client encoded it
    harness.send(CLIENT, urgent)
    assert harness.core.tasks[urgent.task_id].priority == 10
    encoded_by_client = harness.core.tasks[urgent.task_id].raw
    orphan = harness.task(parent_task_id=b"gone" * 4)  # parent unknown here: its own priority stands
    harness.send(CLIENT, orphan)
    assert harness.core.tasks[orphan.task_id].priority == 0
    assert encoded_by_client == encode(urgent)


# ---- retries ---------------------------------------------------------------------------------------------------------


def run_to_result(harness: Harness, task: Task, statuses: List[TaskStatus]) -> TaskResult:
    """The worker holding `task` answers each status in turn, the task coming back after each retried one."""
    answer = None
    for status in statuses:
        holder = harness.core.tasks[task.task_id].worker
        out = harness.send(holder, result(task, status, payload=b"attempt:" + status.name.encode()))
        answers = of_type(out.get(CLIENT, []), TaskResult)
        if answers:
            (answer,) = answers
    assert answer is not None
    return answer


def test_a_failing_task_runs_again_up_to_its_retries_and_reports_its_attempts() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    harness.connect_worker(WORKER_B)
    task = harness.task(retries=3)
    harness.send(CLIENT, task)
    answer = run_to_result(harness, task, [TaskStatus.failed, TaskStatus.timed_out, TaskStatus.success])
    assert answer.status == TaskStatus.success and answer.payload == b"attempt:success" and answer.attempts == 3
    assert harness.core.retried_tasks == 2 and not harness.core.tasks


def test_retries_exhausted_forward_the_last_failure_with_its_attempts() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    task = harness.task(retries=2)
    harness.send(CLIENT, task)
    statuses = [TaskStatus.failed, TaskStatus.failed, TaskStatus.timed_out]
    for index, status in enumerate(statuses):
        out = harness.send(WORKER_A, result(task, status, payload=b"attempt:%d" % index))
        if index < 2:
            assert CLIENT not in out and [t.task_id for t in sent_tasks(out, WORKER_A)] == [task.task_id]
    (answer,) = of_type(out[CLIENT], TaskResult)
    assert (answer.status, answer.payload, answer.attempts) == (TaskStatus.timed_out, b"attempt:2", 3)
    assert harness.core.retried_tasks == 2


def test_a_task_without_retries_is_forwarded_as_its_worker_encoded_it() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    task = harness.task()
    harness.send(CLIENT, task)
    failure = result(task, TaskStatus.failed, payload=b"boom")
    (answer,) = of_type(harness.send(WORKER_A, failure)[CLIENT], TaskResult)
    assert answer == failure and answer.attempts == 0
    assert harness.core.retried_tasks == 0


def test_worker_deaths_count_as_attempts_but_do_not_use_up_retries() -> None:
    harness = Harness(task_retry_limit=3)
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    task = harness.task(retries=1)
    harness.send(CLIENT, task)
    harness.send(WORKER_A, WorkerHeartbeat(running=1, flags=_TASK_LOCK))
    harness.send(WORKER_A, WorkerDisconnect(reason="killed"))  # it was running there: one death
    harness.connect_worker(WORKER_B)
    assert harness.core.tasks[task.task_id].worker == WORKER_B
    answer = run_to_result(harness, task, [TaskStatus.failed, TaskStatus.failed])  # the one retry is still there
    assert (answer.status, answer.attempts) == (TaskStatus.failed, 3)


def test_worker_deaths_keep_their_own_limit_with_retries_left() -> None:
    harness = Harness(task_retry_limit=2)
    harness.connect_client()
    task = harness.task(retries=5)
    harness.send(CLIENT, task)
    answer = None
    for number in range(2):
        peer = b"W|test|9|%d" % number
        harness.connect_worker(peer)
        out = harness.send(peer, WorkerDisconnect(reason="killed"))
        answer = of_type(out.get(CLIENT, []), TaskResult)
    (answer,) = answer
    assert (answer.status, answer.attempts) == (TaskStatus.worker_died, 2)


def test_a_retried_task_keeps_its_resources_and_priority() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=1)
    harness.connect_worker(GPU_WORKER, capacity=1, resources={"gpu": 1})
    blocker = harness.task(resources=needs(gpu=1))
    task = harness.task(resources=needs(gpu=1), retries=1, priority=2)
    later = harness.task(resources=needs(gpu=1))
    harness.send(CLIENT, blocker, later)
    harness.send(CLIENT, task)  # waits behind blocker, ahead of later by priority
    (sent,) = sent_tasks(harness.send(GPU_WORKER, result(blocker)), GPU_WORKER)
    assert sent.task_id == task.task_id
    out = harness.send(GPU_WORKER, result(task, TaskStatus.failed))
    (again,) = sent_tasks(out, GPU_WORKER)
    assert again.task_id == task.task_id and not harness.core.workers[WORKER_A].assigned


# ---- attempts --------------------------------------------------------------------------------------------------------


def test_graph_nodes_report_their_own_attempts_never_their_dependencys() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    first = harness.task(retries=2)
    second = harness.task(dependencies=[first.task_id], retries=1)
    third = harness.task(dependencies=[second.task_id])
    harness.send(CLIENT, first, second, third)
    answer = run_to_result(harness, first, [TaskStatus.failed, TaskStatus.timed_out, TaskStatus.success])
    assert answer.attempts == 3
    assert harness.core.tasks[second.task_id].worker == WORKER_A, "ready once its dependency succeeded"
    answer = run_to_result(harness, second, [TaskStatus.success])
    assert answer.attempts == 0, "it ran once, whatever its dependency went through"
    answer = run_to_result(harness, third, [TaskStatus.success])
    assert answer.attempts == 0


def test_a_retried_graph_node_reports_its_attempts_and_its_dependents_fail_without_them() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    first = harness.task()
    second = harness.task(dependencies=[first.task_id], retries=1)
    third = harness.task(dependencies=[second.task_id], retries=3)
    harness.send(CLIENT, first, second, third)
    run_to_result(harness, first, [TaskStatus.success])
    holder = harness.core.tasks[second.task_id].worker
    harness.send(holder, result(second, TaskStatus.failed))  # retried
    out = harness.send(holder, result(second, TaskStatus.failed, payload=b"second failed"))
    answers = {answer.task_id: answer for answer in of_type(out[CLIENT], TaskResult)}
    assert (answers[second.task_id].status, answers[second.task_id].attempts) == (TaskStatus.failed, 2)
    failed_with = answers[third.task_id]
    assert (failed_with.status, failed_with.payload) == (TaskStatus.failed, b"second failed")
    assert failed_with.attempts == 0, "it never ran: its dependency's attempts are not its own"


def test_a_graph_node_blamed_for_a_worker_death_counts_it_its_dependents_do_not() -> None:
    harness = Harness(task_retry_limit=3)
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    first = harness.task()
    second = harness.task(dependencies=[first.task_id])
    harness.send(CLIENT, first, second)
    harness.send(WORKER_A, WorkerHeartbeat(running=1, flags=_TASK_LOCK))
    harness.send(WORKER_A, WorkerDisconnect(reason="killed"))
    harness.connect_worker(WORKER_B)
    assert run_to_result(harness, first, [TaskStatus.success]).attempts == 2
    assert run_to_result(harness, second, [TaskStatus.success]).attempts == 0


def test_a_nested_task_reports_its_own_attempts_not_its_parents() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=10)
    parent = harness.task(retries=1)
    harness.send(CLIENT, parent)
    abandoned = harness.task(parent_task_id=parent.task_id, retries=2)
    harness.send(CLIENT, abandoned)
    out = harness.send(WORKER_A, result(parent, TaskStatus.failed))  # retried: the child of that attempt is canceled
    assert of_type(out[WORKER_A], TaskCancel) == [TaskCancel(task_ids=[abandoned.task_id])]
    (canceled,) = of_type(harness.send(WORKER_A, result(abandoned, TaskStatus.canceled))[CLIENT], TaskResult)
    assert (canceled.status, canceled.attempts) == (TaskStatus.canceled, 0)
    child = harness.task(parent_task_id=parent.task_id)
    harness.send(CLIENT, child)
    assert run_to_result(harness, child, [TaskStatus.success]).attempts == 0
    assert run_to_result(harness, parent, [TaskStatus.success]).attempts == 2
