"""Internal: the autoscaler's loop: the newest status and the backend's jobs in, the policy's decisions out to the
backend.

All the deciding is in policy.py; this file is the edge: clocks, the status subscription, the backend's commands, the
log and the timeline. Every log line it writes is driven by a change (a decision, the pool's size, an error that
differs from the last one), never by each status, so the log stays short however long it runs.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Callable, List, Optional, TextIO, Tuple

from scaler.autoscale.backends.base import Backend, BackendError
from scaler.autoscale.demand import demand_from_status
from scaler.autoscale.policy import ScalingPolicy
from scaler.autoscale.records import Decision, Demand, Job, Retire, Start
from scaler.monitor.subscriber import StatusSubscriber
from scaler.protocol import SchedulerStatus

logger = logging.getLogger(__name__)

_ERROR_REPEAT_SECONDS = 60.0  # the same backend error is logged again at most this often


class Autoscaler:
    def __init__(
        self,
        policy: ScalingPolicy,
        backend: Backend,
        timeline: Optional[TextIO] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self.backend = backend
        self._timeline = timeline
        self._clock = clock
        self._started = clock()
        self._pool: Optional[Tuple[int, ...]] = None
        self._notes: List[str] = []
        self._error: Optional[str] = None
        self._error_at = -_ERROR_REPEAT_SECONDS

    def act(self, now: float, status: SchedulerStatus) -> List[Decision]:
        """One step: read the demand and the jobs, decide, and carry the decisions out."""
        demand = demand_from_status(status)
        try:
            jobs = self.backend.poll(now)
        except BackendError as error:
            self._backend_error(now, f"cannot list jobs, deciding nothing: {error}")
            return []
        if self._error is not None:
            logger.info("the %s backend answers again", self.backend.name)
            self._error = None
        decisions = self.policy.step(now, demand, jobs)
        for warning in self.policy.warnings:
            logger.warning("%s", warning)
        if self.policy.notes != self._notes:
            for note in self.policy.notes:
                logger.info("%s", note)
            self._notes = self.policy.notes
        self._log_pool(demand, jobs)
        for decision in decisions:
            self._apply(now, decision)
        self._record(now, status, demand, jobs, decisions)
        return decisions

    def _apply(self, now: float, decision: Decision) -> None:
        if isinstance(decision, Start):
            logger.info("scale up: %s", decision.reason)
            try:
                started = self.backend.start(decision.count, now)
            except BackendError as error:
                self._backend_error(now, f"cannot start jobs: {error}")
                self.policy.start_failed(now)
                return
            self.policy.jobs_started(now, started)
            logger.info("started job(s) %s", ", ".join(started))
            if len(started) < decision.count:
                self.policy.start_failed(now)
        elif isinstance(decision, Retire):
            logger.log(logging.WARNING if decision.failed else logging.INFO, "retire: %s", decision.reason)
            try:
                self.backend.retire(decision.job_id, now)
            except BackendError as error:
                self._backend_error(now, f"cannot retire job {decision.job_id}: {error}")
                self.policy.retire_failed(decision.job_id)

    def _backend_error(self, now: float, message: str) -> None:
        if message != self._error or now - self._error_at >= _ERROR_REPEAT_SECONDS:
            logger.error("%s", message)
            self._error, self._error_at = message, now

    def _log_pool(self, demand: Demand, jobs: List[Job]) -> None:
        live = [job for job in jobs if not job.retiring]
        pool = (len(demand.workers), len(live), sum(1 for job in live if not job.running), len(jobs) - len(live))
        if pool != self._pool:
            self._pool = pool
            logger.info(
                "pool: %d worker(s) connected; %d job(s) (%d queued) and %d retiring; tasks: %d waiting, %d running",
                pool[0],
                pool[1],
                pool[2],
                pool[3],
                demand.tasks_waiting,
                demand.tasks_running,
            )

    def _record(
        self, now: float, status: SchedulerStatus, demand: Demand, jobs: List[Job], decisions: List[Decision]
    ) -> None:
        if self._timeline is None:
            return
        live = [job for job in jobs if not job.retiring]
        entry = {
            "t": round(now - self._started, 3),
            "status_time": status.time_us / 1_000_000,
            "time": time.time(),
            "workers": len(demand.workers),
            "busy_workers": sum(1 for worker in demand.workers if not worker.idle),
            "tasks_waiting": demand.tasks_waiting,
            "tasks_running": demand.tasks_running,
            "free_slots": demand.free_slots,
            "oldest_wait": demand.oldest_wait_seconds,
            "jobs": len(live),
            "jobs_queued": sum(1 for job in live if not job.running),
            "jobs_retiring": len(jobs) - len(live),
            "started": sum(d.count for d in decisions if isinstance(d, Start)),
            "retired": [d.job_id for d in decisions if isinstance(d, Retire)],
            **self.policy.describe(),
        }
        self._timeline.write(json.dumps(entry) + "\n")
        self._timeline.flush()

    def run(self, subscriber: StatusSubscriber, interval_seconds: float, should_stop: Callable[[], bool]) -> None:
        """Act on each new status, at most once per `interval_seconds`, until `should_stop()`; then close the backend"""
        next_step = self._clock()
        last_status_time = -1
        silent = False
        try:
            while not should_stop():
                subscriber.receive(wait_seconds=min(0.2, max(0.0, next_step - self._clock())))
                now = self._clock()
                if subscriber.timed_out():
                    if not silent:
                        logger.warning("%s; deciding nothing until it comes back", subscriber.no_status_message())
                        silent = True
                    continue
                status = subscriber.latest
                if now < next_step or status is None or status.time_us == last_status_time:
                    continue
                if silent:
                    logger.info("status from %s is back", subscriber.address)
                    silent = False
                last_status_time = status.time_us
                next_step = now + interval_seconds
                self.act(now, status)
        finally:
            logger.info("stopping")
            self.backend.close()
