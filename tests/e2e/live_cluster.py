"""A scheduler and workers started from their CLIs, with workers added and SIGKILLed one by one: the failure, cancel,
nested and chaos end-to-end tests drive it. Worker death is noticed fast (short timeouts) so tests stay short."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import psutil

from scaler.protocol import SchedulerStatus
from scaler.testing.processes import ScalerProcess, all_exited, free_tcp_address, still_running, wait_for
from tests.e2e.monitor import counters, wait_for_status

UNFINISHED_STATES = ("waiting", "ready", "assigned", "canceling")


class LiveCluster:
    def __init__(
        self,
        directory: Path,
        protected: bool = False,
        worker_timeout_seconds: float = 1.5,
        heartbeat_interval_seconds: float = 0.25,
        client_timeout_seconds: float = 30.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        self._directory = directory
        self.address = free_tcp_address()
        self.monitor_address = "ipc://{}".format(directory / "monitor")
        arguments = [
            self.address,
            "--monitor-address",
            self.monitor_address,
            "--protected" if protected else "--no-protected",
            "--worker-timeout",
            str(worker_timeout_seconds),
            "--heartbeat-interval",
            str(heartbeat_interval_seconds),
            "--client-timeout",
            str(client_timeout_seconds),
            "--status-interval",
            "0.2",
            "--balance-interval",
            "0.2",
            *extra_args,
        ]
        self.scheduler = ScalerProcess("scaler.scheduler", arguments, str(directory / "scheduler.log"))
        try:
            self.scheduler.wait_for_output("Scheduler: listening on")
        except BaseException:  # nobody gets a LiveCluster to close
            self.scheduler.stop()
            raise
        self.launchers: List[ScalerProcess] = []
        self._seen_pids: Dict[int, psutil.Process] = {}

    # ---- workers -----------------------------------------------------------------------------------------------------

    def add_worker(self) -> ScalerProcess:
        """One more worker, under a launcher of its own so it can be killed alone."""
        return self.add_cluster(1)

    def add_cluster(self, workers: int, *options: str, prefix: Sequence[str] = ()) -> ScalerProcess:
        """A `scaler_cluster -n WORKERS OPTIONS...` of its own, once its workers started; `prefix` goes before its
        command (`prlimit ...`)."""
        log = str(self._directory / f"cluster{len(self.launchers)}.log")
        launcher = ScalerProcess("scaler.cluster", ["-n", str(workers), *options, self.address], log, prefix=prefix)
        self.launchers.append(launcher)
        launcher.wait_for_output(f"Worker[{workers - 1}] started", timeout=60.0)  # a loaded machine starts slowly
        return launcher

    def agents(self) -> List[psutil.Process]:
        """The live worker agents (each launcher's child)."""
        agents = []
        for launcher in self.launchers:
            try:
                agents += [child for child in psutil.Process(launcher.pid).children() if child.is_running()]
            except psutil.NoSuchProcess:
                pass
        return [agent for agent in agents if still_running(agent)]

    def kill_worker(self, agent: Optional[psutil.Process] = None) -> int:
        """SIGKILL a worker agent (its fork server and processors die with it); returns its pid."""
        agent = agent or self.agents()[0]
        self._remember()
        os.kill(agent.pid, signal.SIGKILL)
        return agent.pid

    # ---- the scheduler -----------------------------------------------------------------------------------------------

    def status(self, condition, timeout: float = 20.0) -> SchedulerStatus:
        return wait_for_status(self.monitor_address, condition, timeout)

    def wait_workers(self, count: int, timeout: float = 20.0) -> SchedulerStatus:
        return self.status(lambda status: len(status.workers) == count, timeout)

    def wait_idle(self, timeout: float = 20.0) -> SchedulerStatus:
        """Wait until the scheduler holds no unfinished task."""
        return self.status(lambda status: unfinished(status) == 0, timeout)

    # ---- the end -----------------------------------------------------------------------------------------------------

    def _remember(self) -> None:
        for process in [self.scheduler, *self.launchers]:
            for child in [psutil.Process(process.pid)] + process.descendants() if _alive(process.pid) else []:
                self._seen_pids.setdefault(child.pid, child)

    def close(self) -> None:
        """Stop everything and check that no process of this cluster is left."""
        self._remember()
        for launcher in self.launchers:
            launcher.stop()
        self.scheduler.stop()
        wait_for(lambda: all_exited(self._seen_pids.values()), 10, "no process left of the cluster")


def unfinished(status: SchedulerStatus) -> int:
    states = counters(status.task_states)
    return sum(states.get(name, 0) for name in UNFINISHED_STATES)


def _alive(pid: int) -> bool:
    return psutil.pid_exists(pid)
