"""SchedulerStatus messages for the monitor's unit tests, passed through the real codec as a monitor receives them."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from scaler.protocol import Counter, SchedulerStatus, WorkerStatus, decode_frame, encode

# the demand fields of SchedulerStatus (appended in protocol version 1, after completedTasks): 0 unless a test gives
# them, as from an older scheduler
_SLOTS = SchedulerStatus.__slots__
_DEMAND = tuple(name for name in _SLOTS[_SLOTS.index("completed_tasks") + 1 :] if name != "raw")


def worker(name: str, **fields: float) -> WorkerStatus:
    values: Dict[str, float] = dict(
        agent_cpu=0.0, agent_rss=0, cpu=0.0, rss=0, free=1000, sent=0, queued=0, lag_us=0, flags=0, processed=0
    )
    values.update(fields)
    return WorkerStatus(name=name, **values)


def counters(**values: int) -> List[Counter]:
    return [Counter(name=name, value=value) for name, value in values.items()]


def status(
    workers: Sequence[WorkerStatus] = (),
    time_us: int = 1_700_000_000_000_000,
    completed_tasks: int = 0,
    function_tasks: Optional[List[Counter]] = None,
    **fields: object,
) -> SchedulerStatus:
    message = SchedulerStatus(
        time_us=time_us,
        cpu=fields.pop("cpu", 12.5),
        rss=fields.pop("rss", 37 * 1024 * 1024),
        task_states=fields.pop("task_states", counters(waiting=3, ready=0, assigned=2, success=200_000, failed=14)),
        sent=fields.pop("sent", counters(HeartbeatEcho=283_701, Task=54_660, TaskResult=53_766)),
        received=fields.pop("received", counters(WorkerHeartbeat=283_701, Task=53_764, TaskResult=53_794)),
        function_tasks=function_tasks if function_tasks is not None else counters(calculate=5),
        workers=list(workers),
        clients=fields.pop("clients", 1),
        malformed=fields.pop("malformed", 0),
        completed_tasks=completed_tasks,
        registered_again=fields.pop("registered_again", 0),
        **{name: fields.pop(name) for name in _DEMAND if name in fields},
    )
    assert not fields, f"unknown fields {sorted(fields)}"
    (decoded,) = decode_frame(encode(message))
    return decoded
