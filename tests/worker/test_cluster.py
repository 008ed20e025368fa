"""The launcher: its CLI, the Cluster API, and no process outliving the cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from scaler import config
from scaler.cluster import Cluster
from scaler.protocol import WorkerDisconnect
from scaler.settings_spec import CLUSTER, WORKER
from scaler.testing.processes import ROOT, ScalerProcess, all_exited, wait_for
from tests.worker.helpers import wait_exit


def run_cli(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scaler.cluster", *arguments], cwd=ROOT, capture_output=True, text=True, timeout=20
    )


def test_help_lists_every_option_with_its_default():
    completed = run_cli("-h")
    assert completed.returncode == 0
    text = " ".join(completed.stdout.split())  # argparse wraps lines
    for setting in config.SETTINGS.of(CLUSTER, WORKER):
        assert f"{setting.flags[0]}" in text
        assert f"(default: {setting.default_text(WORKER)})" in text
    assert "(default: 1000)" in text and "(default: 30 s)" in text


@pytest.mark.parametrize(
    "arguments, message",
    [
        ((), "the following arguments are required: address"),
        (("-n", "0", "tcp://127.0.0.1:1"), "--num-workers/-n: must be >= 1"),
        (("-n", "two", "tcp://127.0.0.1:1"), "invalid int value: 'two'"),
        (("--death-timeout", "-1", "tcp://127.0.0.1:1"), "--death-timeout/-dt: must be a positive number, got -1.0"),
        (("--queue-size", "0", "tcp://127.0.0.1:1"), "--queue-size: must be >= 1, got 0"),
        (("127.0.0.1:2345",), "address must start with tcp:// or ipc://"),
        (("--logging-level", "LOUD", "tcp://127.0.0.1:1"), "invalid choice: 'LOUD'"),
    ],
)
def test_wrong_arguments_give_a_clear_error(arguments, message):
    completed = run_cli(*arguments)
    assert completed.returncode == 2
    assert message in completed.stderr and "usage: scaler_cluster" in completed.stderr


def test_cluster_logs_as_documented(peer, start_cluster):
    process = start_cluster("--heartbeat-interval", "2", workers=2)
    process.wait_for_output("Worker[1] started")
    assert (
        "ClusterProcess: starting 2 workers, heartbeat_interval_seconds=2, object_retention_seconds=3600"
        in process.output()
    )
    assert "Worker[0] started" in process.output()


def test_cluster_api_start_and_shutdown_leave_no_process(peer, tmp_path):
    cluster = Cluster(
        peer.address,
        n_workers=2,
        heartbeat_interval_seconds=0.1,
        death_timeout_seconds=15,
        logging_paths=[str(tmp_path / "cluster.log")],
    )
    cluster.start()
    try:
        peer.accept()
        peer.accept()
        wait_for(lambda: len(cluster.pids()) == 7, 10, "launcher, 2 agents, 2 fork servers, 2 processors")
        pids = cluster.pids()
        assert cluster.is_alive()
    finally:
        exit_code = cluster.shutdown(timeout=10)
    assert exit_code == 0
    wait_for(lambda: all_exited(pids), 10, "every process of the cluster to end")

    def disconnects() -> int:
        return sum(type(message) is WorkerDisconnect for _, message in peer.inbox)

    wait_for(lambda: peer.pump(0.02) or disconnects() >= 2, 10, "a WorkerDisconnect from each worker", interval=0)
    assert disconnects() == 2


def test_cluster_api_rejects_bad_settings():
    with pytest.raises(ValueError, match="n_workers"):
        Cluster("tcp://127.0.0.1:1", n_workers=0)
    with pytest.raises(ValueError, match="address must start with"):
        Cluster("localhost:1")
    with pytest.raises(ValueError, match="per_worker_queue_size must be >= 1"):
        Cluster("tcp://127.0.0.1:1", per_worker_queue_size=0)
    with pytest.warns(DeprecationWarning, match="per_worker_queue_size"):  # its name before 1.1, still accepted
        assert Cluster("tcp://127.0.0.1:1", queue_size=7).settings.per_worker_queue_size == 7


def test_sigkill_of_the_launcher_kills_workers_and_processors(peer, start_cluster):
    process = start_cluster(workers=2)
    peer.accept()
    peer.accept()
    wait_for(lambda: len(process.descendants()) == 6, 10, "2 agents, 2 fork servers and 2 processors")
    tree = [child.pid for child in process.descendants()]
    os.kill(process.pid, signal.SIGKILL)
    process.popen.wait(10)
    wait_for(lambda: all_exited(tree), 10, "the whole tree to die with its launcher")


def test_cluster_started_from_python_stops_when_its_caller_dies(peer, tmp_path):
    caller_script = textwrap.dedent(f"""
        import time
        from scaler.cluster import Cluster
        Cluster({peer.address!r}, n_workers=1, heartbeat_interval_seconds=0.1, death_timeout_seconds=15).start()
        time.sleep(60)
    """)
    caller = ScalerProcess("tests.worker.run_script", [caller_script], str(tmp_path / "caller.log"))
    try:
        peer.accept()
        wait_for(lambda: len(caller.descendants()) == 4, 10, "launcher, agent, fork server and processor")
        tree = [child.pid for child in caller.descendants()]
        os.kill(caller.pid, signal.SIGKILL)
        caller.popen.wait(10)
        wait_for(lambda: peer.pump(0.02) or all_exited(tree), 10, "the cluster to stop after its caller died")
    finally:
        caller.stop()
    assert "parent" in caller.output() and "is gone, stopping workers" in caller.output()


def test_workers_exit_on_their_own_then_the_launcher_exits(peer, start_cluster):
    process = start_cluster("--death-timeout", "1", workers=2)
    assert wait_exit(process, peer, timeout=10) != 0
    assert process.output().count("exited with exit code 1") == 2
    assert "ClusterProcess: all workers exited" in process.output()
