"""demand.py, the one reader of SchedulerStatus for the autoscaler, on statuses as the scheduler encodes them."""

from __future__ import annotations

from scaler.autoscale.demand import demand_from_status, worker_host_pid
from scaler.protocol import Counter, SchedulerStatus, WorkerStatus, decode_frame, encode


def _status(states: dict, sent: list) -> SchedulerStatus:
    status = SchedulerStatus(
        time_us=1,
        task_states=[Counter(name=name, value=value) for name, value in states.items()],
        workers=[
            WorkerStatus(name=f"W|node{i}|{100 + i}|abcdef012345", sent=n, free=10 - n) for i, n in enumerate(sent)
        ],
    )
    (decoded,) = decode_frame(encode(status))  # what the autoscaler reads is what went over the wire
    return decoded


def test_tasks_held_or_queued_behind_a_running_one_wait() -> None:
    # 3 held in the scheduler; worker 0 runs one and queues 4; worker 1 runs one; worker 2 is idle
    demand = demand_from_status(_status({"waiting": 7, "ready": 3, "assigned": 6, "success": 50}, [5, 1, 0]))
    assert (demand.tasks_waiting, demand.tasks_running, demand.tasks_unfinished) == (7, 2, 9)
    assert [(w.host, w.pid, w.tasks, w.idle) for w in demand.workers] == [
        ("node0", 100, 5, False),
        ("node1", 101, 1, False),
        ("node2", 102, 0, True),
    ]


def test_an_empty_scheduler_has_no_demand() -> None:
    demand = demand_from_status(_status({}, []))
    assert (demand.tasks_waiting, demand.tasks_running, demand.workers) == (0, 0, ())


def test_worker_names_of_another_form_give_no_host() -> None:
    assert worker_host_pid("W|host.example|42|0123456789ab") == ("host.example", 42)
    assert worker_host_pid("some-worker") == ("", 0)
    assert worker_host_pid("W|host|notapid|x") == ("", 0)
