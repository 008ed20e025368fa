"""The cluster's watchdog on real processes: a worker whose agent stops turning its loop is replaced, with its stacks
in the log and the loss counted by the scheduler; and a cluster stops within seconds of SIGTERM even then."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Iterator

import cloudpickle
import psutil
import pytest

from scaler import Client
from scaler.monitor.model import status_sections
from scaler.testing.processes import wait_for
from tests.e2e.live_cluster import LiveCluster

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def live(tmp_path) -> Iterator[LiveCluster]:
    cluster = LiveCluster(tmp_path)
    yield cluster
    cluster.close()


def hang_the_fork_server_once(marker: str) -> str:
    """The first time: stop the fork server (this processor's parent), then end this processor. The agent asks the
    stopped fork server for a new processor and waits for its answer: a real wedge of the agent's loop (a hung fork
    server). Run again on the replacement, it returns."""
    if os.path.exists(marker):
        return "ran again"
    open(marker, "w").close()
    os.kill(os.getppid(), signal.SIGSTOP)
    os._exit(7)


def agent_pid() -> int:
    return psutil.Process(os.getppid()).ppid()


def test_a_wedged_agent_is_replaced_with_its_stacks_logged_and_counted(live, tmp_path) -> None:
    launcher = live.add_cluster(1, "--agent-stall-timeout", "2")
    live.wait_workers(1)
    with Client(live.address) as client:
        first = client.submit(agent_pid).result(timeout=20)
        wedging = client.submit(hang_the_fork_server_once, str(tmp_path / "wedged-once"))
        launcher.wait_for_output("in place of Worker[0]", timeout=30)
        log = launcher.output()
        assert f"Worker[0] (pid {first}) is wedged: its agent has not turned its loop" in log, log
        assert "fork_processor" in log, "the agent's stacks, where it waited for the fork server, are in the log"
        assert "1 worker(s) lost since start, 1 replaced" in log, log
        status = live.status(lambda status: status.workers_replaced == 1 and status.workers_lost == 1, 20)
        rows = dict(row for section in status_sections(status, None) for row in section.rows)
        assert rows["workers lost"] == "1" and rows["replaced"] == "1", rows
        assert "in place of a lost worker (Worker[0] pid" in live.scheduler.output()
        assert wedging.result(timeout=20) == "ran again", "its task ran again, on the new worker"
        live.wait_workers(1)
        second = client.submit(agent_pid).result(timeout=20)
        assert second != first and psutil.pid_exists(second) and not psutil.pid_exists(first)
        assert client.map(abs, [(x,) for x in range(-50, 0)]) == list(range(50, 0, -1)), "the new worker runs tasks"


def test_sigterm_stops_a_cluster_within_seconds_even_with_a_wedged_agent(live) -> None:
    launcher = live.add_cluster(2, "--agent-stall-timeout", "60")  # the watchdog would not replace it in this test
    live.wait_workers(2)
    agents = live.agents()
    os.kill(agents[0].pid, signal.SIGSTOP)  # wedged: it will never turn its loop for the SIGTERM
    try:
        started = time.monotonic()
        launcher.popen.send_signal(signal.SIGTERM)
        launcher.popen.wait(20)  # the retirement deadline is 45 s: waiting that long means the wedge held it
        elapsed = time.monotonic() - started
        assert elapsed < 15, f"the cluster took {elapsed:.1f}s to stop"
        log = launcher.output()
        assert f"(pid {agents[0].pid}) is wedged" in log and "the other workers retired" in log, log
        wait_for(lambda: not psutil.pid_exists(agents[1].pid), 10, "the healthy worker to retire and exit")
    finally:
        for agent in agents:
            try:
                os.kill(agent.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
