"""demand.py, the one reader of SchedulerStatus for the autoscaler, on statuses as the scheduler encodes them."""

from __future__ import annotations

from scaler.autoscale.demand import demand_from_status, worker_host_pid
from scaler.protocol import Counter, SchedulerStatus, WorkerStatus, decode_frame, encode


def _status(states: dict, sent: list, **demand: int) -> SchedulerStatus:
    status = SchedulerStatus(
        **demand,
        time_us=1,
        task_states=[Counter(name=name, value=value) for name, value in states.items()],
        workers=[
            WorkerStatus(name=f"W|node{i}|{100 + i}|abcdef012345", sent=n, free=10 - n) for i, n in enumerate(sent)
        ],
    )
    (decoded,) = decode_frame(encode(status))  # what the autoscaler reads is what went over the wire
    return decoded


def test_the_schedulers_own_demand_fields_are_read() -> None:
    # 3 ready and 4 on dependencies in the scheduler; 6 at workers of which 2 run, so 4 queue behind them
    status = _status(
        {"waiting": 4, "ready": 3, "assigned": 6},
        [5, 1, 0],
        tasks_waiting=7,
        tasks_ready=3,
        tasks_assigned=6,
        tasks_running=2,
        worker_count=3,
        idle_workers=1,
        worker_slots=30,
        free_slots=24,
        oldest_ready_wait_us=1_500_000,
    )
    demand = demand_from_status(status)
    assert (demand.tasks_waiting, demand.tasks_running, demand.tasks_unfinished) == (7, 2, 9)
    assert (demand.free_slots, demand.oldest_wait_seconds) == (24, 1.5)
    assert [w.tasks for w in demand.workers] == [5, 1, 0]


def test_running_tasks_come_from_the_heartbeats_not_from_one_per_worker() -> None:
    # workers of capacity 4 run 4 tasks each: the per-worker rows alone would say 2 running and 6 queued
    status = _status({"assigned": 8}, [4, 4], tasks_assigned=8, tasks_running=8, worker_count=2, worker_slots=8)
    demand = demand_from_status(status)
    assert (demand.tasks_waiting, demand.tasks_running, demand.free_slots) == (0, 8, 0)


def test_tasks_held_or_queued_behind_a_running_one_wait_with_an_older_scheduler() -> None:
    # 3 held in the scheduler; worker 0 runs one and queues 4; worker 1 runs one; worker 2 is idle
    demand = demand_from_status(_status({"waiting": 7, "ready": 3, "assigned": 6, "success": 50}, [5, 1, 0]))
    assert (demand.tasks_waiting, demand.tasks_running, demand.tasks_unfinished) == (7, 2, 9)
    assert [(w.host, w.pid, w.tasks, w.idle) for w in demand.workers] == [
        ("node0", 100, 5, False),
        ("node1", 101, 1, False),
        ("node2", 102, 0, True),
    ]
    assert (demand.free_slots, demand.oldest_wait_seconds) == (None, None), "an older scheduler does not say"


def test_an_empty_scheduler_has_no_demand() -> None:
    demand = demand_from_status(_status({}, []))
    assert (demand.tasks_waiting, demand.tasks_running, demand.workers) == (0, 0, ())


def test_worker_names_of_another_form_give_no_host() -> None:
    assert worker_host_pid("W|host.example|42|0123456789ab") == ("host.example", 42)
    assert worker_host_pid("some-worker") == ("", 0)
    assert worker_host_pid("W|host|notapid|x") == ("", 0)
