"""A scheduler SIGKILLed and a new one started on the same address: the workers do not exit, keep their processors,
register again as new workers and run new tasks. Real scheduler, workers and client processes."""

from __future__ import annotations

import os
import signal
import sys

import cloudpickle
import psutil

from scaler import Client
from scaler.testing.processes import ScalerProcess, free_tcp_address
from tests.e2e.monitor import wait_for_status
from tests.worker.helpers import processor_pids

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def agent_pid(value: int) -> int:
    """The pid of the worker agent running this task: the processor's grandparent (agent, fork server, processor)."""
    return psutil.Process(os.getppid()).ppid()


def test_workers_register_again_with_a_restarted_scheduler(tmp_path):
    address = free_tcp_address()
    monitor = f"ipc://{tmp_path / 'monitor'}"
    arguments = [address, "--monitor-address", monitor, "--worker-timeout", "1.5", "--heartbeat-interval", "0.25"]
    arguments += ["--status-interval", "0.2"]
    schedulers = [ScalerProcess("scaler.scheduler", arguments, str(tmp_path / "scheduler0.log"))]
    cluster = None
    try:
        schedulers[0].wait_for_output("Scheduler: listening on")
        cluster = ScalerProcess("scaler.cluster", ["-n", "2", address], str(tmp_path / "cluster.log"))
        wait_for_status(monitor, lambda status: len(status.workers) == 2, 30)
        with Client(address) as client:
            agents = set(client.map(agent_pid, [(index,) for index in range(20)]))
        processors = processor_pids(cluster)
        assert len(processors) == 2

        os.kill(schedulers[0].pid, signal.SIGKILL)
        schedulers[0].popen.wait(10)
        schedulers.append(ScalerProcess("scaler.scheduler", arguments, str(tmp_path / "scheduler1.log")))
        schedulers[1].wait_for_output("Scheduler: listening on")
        status = wait_for_status(monitor, lambda status: len(status.workers) == 2, 30)
        assert len({worker.name for worker in status.workers}) == 2

        with Client(address) as client:
            assert client.map(pow, [(index, 2) for index in range(200)]) == [index * index for index in range(200)]
            assert set(client.map(agent_pid, [(index,) for index in range(20)])) <= agents, "the same worker agents"
        assert cluster.popen.poll() is None
        assert processor_pids(cluster) == processors, "idle processors are kept, not forked again"
        assert cluster.output().count("registered again, as a new worker") == 2
    finally:
        if cluster is not None:
            cluster.stop()
        for scheduler in schedulers:
            scheduler.stop()
