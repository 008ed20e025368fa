"""Internal: what scaler_ui's page is fed: the newest status as JSON, and a bounded history of rates for its charts.

Plain data in and out, no web server, so it is tested on its own; the numbers are formatted by scaler.monitor.model,
as scaler_top's are.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Deque, Dict, List, Optional

from scaler.monitor.actors import ACTOR_COLUMNS, actor_rows, actors_total
from scaler.monitor.model import (
    DEFAULT_SORT_KEY,
    ITL_HEADER,
    WORKER_COLUMNS,
    RateMeter,
    format_flags,
    format_rate,
    no_status_message,
    status_sections,
    worker_state,
)
from scaler.protocol import SchedulerStatus

DEFAULT_MAX_SAMPLES = 600  # ten minutes of charts at the scheduler's default status interval of one second

COLUMNS_JSON = {
    "columns": [{"key": column.key, "header": column.header} for column in WORKER_COLUMNS],
    "itl_header": ITL_HEADER,
    "default_sort": DEFAULT_SORT_KEY,
    "actor_headers": [header for header, _ in ACTOR_COLUMNS],
}


def status_json(status: SchedulerStatus, rates: RateMeter) -> Dict[str, Any]:
    """The newest status as the page shows it: sections, worker and actor cells as text, sort values as numbers."""
    workers = []
    for worker in status.workers:
        tasks_per_second = rates.worker_tasks_per_second.get(worker.name)
        workers.append(
            {
                "name": worker.name,
                "values": {column.key: column.value(worker) for column in WORKER_COLUMNS},
                "text": {column.key: column.text(worker) for column in WORKER_COLUMNS},
                "itl": format_flags(worker.flags),
                "state": worker_state(worker),  # shown beside its name: "paused (memory)", "retiring"
                "processed": worker.processed,
                "tasks_per_second": format_rate(tasks_per_second),
            }
        )
    return {
        "time": status.time_us / 1_000_000,
        "completed_tasks": status.completed_tasks,
        "tasks_per_second": format_rate(rates.tasks_per_second),
        "sections": [
            {"title": section.title, "rows": [list(row) for row in section.rows]}
            for section in status_sections(status, rates.tasks_per_second)
        ],
        "workers": workers,
        "actors_total": actors_total(status.actors),
        "actors": [list(row) for row in actor_rows(status.actors, rates.actor_calls_per_second)],  # as actor_headers
    }


class StatusHistory:
    """The statuses seen so far, kept as one sample per status: time, tasks per second, and per worker its rate and
    its tasks in flight. Samples are numbered so a page asks only for those it has not seen yet."""

    def __init__(self, max_samples: int = DEFAULT_MAX_SAMPLES) -> None:
        if isinstance(max_samples, bool) or not isinstance(max_samples, int):
            raise TypeError(f"max_samples must be an int, got {type(max_samples).__name__}")
        if max_samples < 1:
            raise ValueError(f"max_samples must be at least 1, got {max_samples}")
        self._samples: Deque[Dict[str, Any]] = deque(maxlen=max_samples)
        self._rates = RateMeter()
        self._latest: Optional[SchedulerStatus] = None
        self._latest_json: Optional[Dict[str, Any]] = None
        self.sequence = 0

    def add(self, status: SchedulerStatus) -> None:
        if self._latest is not None and status.time_us == self._latest.time_us:
            return  # the same status again (a reconnect can replay it): no new interval to measure
        self._rates.update(status)
        self._latest = status
        self._latest_json = status_json(status, self._rates)
        self.sequence += 1
        self._samples.append(
            {
                "seq": self.sequence,
                "time": status.time_us / 1_000_000,
                "completed_tasks": status.completed_tasks,
                "tasks_per_second": self._rates.tasks_per_second,
                "workers": {
                    worker.name: {
                        "tasks_per_second": self._rates.worker_tasks_per_second.get(worker.name),
                        "sent": worker.sent,
                    }
                    for worker in status.workers
                },
            }
        )

    @property
    def latest(self) -> Optional[SchedulerStatus]:
        return self._latest

    @property
    def tasks_per_second(self) -> Optional[float]:
        """Over the interval between the two newest statuses; None before two, or across a restart."""
        return self._rates.tasks_per_second

    def samples_after(self, sequence: int) -> List[Dict[str, Any]]:
        return [sample for sample in self._samples if sample["seq"] > sequence]

    def state(self, since: int, address: str, silence_seconds: float, timeout_seconds: float) -> Dict[str, Any]:
        """One answer to the page's poll: the newest status, the samples after `since`, and whether the feed is live."""
        live = silence_seconds <= timeout_seconds
        return {
            "address": address,
            "live": live,
            "message": None
            if live
            else no_status_message(address, silence_seconds, timeout_seconds, self.sequence > 0),
            "silence_seconds": round(silence_seconds, 1),
            "timeout_seconds": timeout_seconds,
            "sequence": self.sequence,
            "status": self._latest_json,
            "samples": self.samples_after(since),
        }
