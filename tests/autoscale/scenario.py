"""The elastic-pool scenario, shared by the local and Slurm tests: a scheduler, `scaler_autoscale` with a backend, a
burst of tasks from a client, and a sampler that records the pool (workers connected, jobs) over time.

Every wait has a deadline; whatever is started is stopped in `close()`, which the tests call in `finally`."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter as Tally
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import zmq

from scaler import Client
from scaler.io.sockets import create_subscriber
from scaler.protocol import SchedulerStatus, decode_frame
from scaler.testing.processes import ScalerProcess, free_tcp_address, wait_for
from tests.autoscale.tasks import record_and_square


@dataclass
class Sample:
    time: float  # wall clock
    workers: int  # connected to the scheduler
    busy: int  # of them with a task
    jobs: Optional[Dict[str, str]]  # job id -> state, as the cluster manager says (None where not sampled)


@dataclass
class Scenario:
    directory: Path
    status_interval: float
    count_jobs: Optional[Callable[[], Dict[str, str]]] = None  # e.g. squeue
    more_logs: Optional[Callable[[], str]] = None  # printed with the scenario's own when a test fails
    samples: List[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.address = free_tcp_address()
        self.monitor_address = f"ipc://{self.directory / 'monitor'}"
        self.journal = self.directory / "journal.txt"
        self.timeline_path = self.directory / "autoscale-timeline.jsonl"
        self.autoscaler: Optional[ScalerProcess] = None
        self.scheduler = ScalerProcess(
            "scaler.scheduler",
            [
                self.address,
                "--monitor-address",
                self.monitor_address,
                "--no-protected",
                "--status-interval",
                str(self.status_interval),
                "--heartbeat-interval",
                "0.5",
                "--worker-timeout",
                "5",
            ],
            str(self.directory / "scheduler.log"),
        )
        self._stop = threading.Event()
        self._latest: Optional[SchedulerStatus] = None
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        try:
            self.scheduler.wait_for_output("Scheduler: listening on")
        except BaseException:
            self.scheduler.stop()
            raise
        self._sampler.start()

    # --- processes ---

    def start_autoscaler(
        self, arguments: List[str], worker_arguments: Optional[List[str]] = ("--heartbeat-interval", "0.5")
    ) -> ScalerProcess:
        """`scaler_autoscale` for this scheduler; `worker_arguments` go to its scaler_cluster jobs (None: no `--`)."""
        self.autoscaler = ScalerProcess(
            "scaler.autoscale",
            [
                self.address,
                "--monitor-address",
                self.monitor_address,
                "--interval",
                str(self.status_interval),
                "--timeline",
                str(self.timeline_path),
                *arguments,
                *(() if worker_arguments is None else ("--", *worker_arguments)),
            ],
            str(self.directory / "autoscale.log"),
        )
        self.autoscaler.wait_for_output("scaler_autoscale: backend")
        return self.autoscaler

    def stop_autoscaler(self, timeout: float) -> int:
        """SIGTERM, as a user's Ctrl-C or a service manager: it retires its jobs, waits for them, and exits."""
        assert self.autoscaler is not None
        return self.autoscaler.stop(timeout)

    def __enter__(self) -> Scenario:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if exc_type is not None:
            print(self.logs())
            if self.more_logs is not None:
                print(self.more_logs())
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._sampler.join(10)
        if self.autoscaler is not None and self.autoscaler.popen.poll() is None:
            self.autoscaler.stop(30)
        self.scheduler.stop()

    # --- the pool over time ---

    def _sample(self) -> None:
        context = zmq.Context()
        socket = create_subscriber(context, self.monitor_address)
        try:
            while not self._stop.is_set():
                if socket.poll(100):
                    for message in decode_frame(socket.recv()):
                        if isinstance(message, SchedulerStatus):
                            self._latest = message
                if self._latest is not None:
                    workers = self._latest.workers
                    jobs = self.count_jobs() if self.count_jobs is not None else None
                    busy = sum(1 for worker in workers if worker.sent)
                    self.samples.append(Sample(time.time(), len(workers), busy, jobs))
                    self._stop.wait(0.2)
        finally:
            socket.close(linger=0)
            context.term()

    def workers(self) -> int:
        return len(self._latest.workers) if self._latest is not None else -1

    def wait_for_workers(self, count: int, timeout: float) -> float:
        """Wait until exactly `count` workers are connected; returns the wall time it was seen."""
        wait_for(lambda: self.workers() == count, timeout, f"{count} worker(s) connected (now {self.workers()})")
        return time.time()

    # --- the work ---

    def burst(self, tasks: int, seconds: float, meanwhile: Optional[Callable[[], None]] = None) -> float:
        """Submit `tasks` tasks at once, wait for all results and check them; returns when the burst was sent.
        `meanwhile` runs once the tasks are submitted, before their results are awaited."""
        with Client(address=self.address, timeout_seconds=30) as client:
            sent_at = time.time()
            futures = [client.submit(record_and_square, i, str(self.journal), seconds) for i in range(tasks)]
            if meanwhile is not None:
                meanwhile()
            results = [future.result(timeout=120) for future in futures]
        assert results == [i * i for i in range(tasks)]
        return sent_at

    def runs(self) -> Tally:
        """How many times each task started, from the journal the tasks write."""
        lines = self.journal.read_text().splitlines()
        return Tally(int(line.split()[1]) for line in lines if line.startswith("start "))

    def last_task_end(self) -> float:
        lines = self.journal.read_text().splitlines()
        return max(float(line.split()[2]) for line in lines if line.startswith("end "))

    def timeline(self) -> List[dict]:
        """The autoscaler's own record: one entry per decision step."""
        if not self.timeline_path.exists():
            return []
        return [json.loads(line) for line in self.timeline_path.read_text().splitlines()]

    def wait_for_steps(self, count: int, timeout: float = 20.0) -> None:
        wait_for(lambda: len(self.timeline()) >= count, timeout, f"{count} decision steps of the autoscaler")

    def statuses_until(self, after: float, entry: dict) -> int:
        """How many statuses the autoscaler acted on that the scheduler published after wall time `after`, up to and
        including the one of timeline `entry`: a delay counted in status intervals, which a stalled machine (a
        scheduler that did not run for seconds) does not turn into a false failure."""
        return sum(1 for other in self.timeline() if after < other["status_time"] <= entry["status_time"])

    def logs(self) -> str:
        parts = []
        for process in (self.autoscaler, self.scheduler):
            if process is not None:
                parts.append(f"--- {process.log_path}\n{process.output()[-6000:]}")
        return "\n".join(parts)
