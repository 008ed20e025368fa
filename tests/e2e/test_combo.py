"""SchedulerClusterCombo with real processes: it works, it checks its arguments, and it leaves no process behind."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
import textwrap
from typing import List

import psutil
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.testing.processes import ROOT, all_exited, free_tcp_address, wait_for


def _tree(pid: int) -> List[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def test_combo_runs_tasks_and_shutdown_leaves_no_process() -> None:
    before = {p.pid for p in _tree(psutil.Process().pid)}
    combo = SchedulerClusterCombo(n_workers=2, logging_level="WARNING")
    try:
        with Client(combo.get_address(), timeout_seconds=20) as client:
            assert client.map(pow, [(2, n) for n in range(10)]) == [2**n for n in range(10)]
        started = [p for p in _tree(psutil.Process().pid) if p.pid not in before]
        assert len(started) >= 4  # scheduler, launcher, two workers (and their processors)
    finally:
        combo.shutdown()
    combo.shutdown()  # idempotent
    wait_for(lambda: all_exited(started), 10, "every process of the combo to exit")


def test_combo_as_context_manager_with_explicit_address() -> None:
    address = free_tcp_address()
    with SchedulerClusterCombo(address=address, n_workers=1, logging_level="WARNING") as combo:
        assert combo.get_address() == address
        assert combo.get_monitor_address().startswith("ipc://")
        with Client(address, timeout_seconds=20) as client:
            assert client.submit(divmod, 7, 2).result(timeout=20) == (3, 1)


def test_combo_refuses_an_address_in_use() -> None:
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as first:
        with pytest.raises(RuntimeError, match="did not start"):
            SchedulerClusterCombo(address=first.get_address(), n_workers=1, logging_level="WARNING")


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"n_workers": 0}, ValueError, "n_workers"),
        ({"n_workers": "2"}, TypeError, "n_workers must be an int"),
        ({"per_worker_queue_size": 0}, ValueError, "per_worker_queue_size must be >= 1"),
        ({"status_interval_secs": 1.0}, TypeError, "unexpected keyword argument 'status_interval_secs'"),
        ({"curve_secret_key_file": "x"}, TypeError, "unexpected keyword argument 'curve_secret_key_file'"),
        ({"event_loop": "trio"}, ValueError, "event_loop"),
        ({"protected": "yes"}, TypeError, "protected"),
        ({"address": 2345}, TypeError, "address"),
        ({"address": "http://127.0.0.1:2345"}, ValueError, "tcp://"),
        ({"worker_timeout_seconds": 0}, ValueError, "worker_timeout_seconds"),
        ({"logging_paths": "/dev/stdout"}, TypeError, "logging_paths"),
    ],
)
def test_combo_checks_arguments_before_starting_anything(kwargs: dict, error: type, match: str) -> None:
    before = {p.pid for p in _tree(psutil.Process().pid)}
    with pytest.raises(error, match=match):
        SchedulerClusterCombo(**kwargs)
    assert {p.pid for p in _tree(psutil.Process().pid)} == before


def test_protected_combo_refuses_client_shutdown() -> None:
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as combo:
        with Client(combo.get_address(), timeout_seconds=20) as client:
            with pytest.raises(ValueError, match="protected"):
                client.shutdown()
            assert client.submit(len, "still works").result(timeout=20) == 11


def test_unprotected_combo_is_stopped_by_client_shutdown() -> None:
    combo = SchedulerClusterCombo(n_workers=1, protected=False, logging_level="WARNING")
    try:
        scheduler = combo._scheduler
        client = Client(combo.get_address(), timeout_seconds=20)
        client.shutdown()
        scheduler.wait(10)  # the scheduler exits on its own
    finally:
        combo.shutdown()


def test_no_orphan_after_the_parent_is_killed(tmp_path) -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from scaler import SchedulerClusterCombo
        combo = SchedulerClusterCombo(n_workers=2, logging_level="WARNING")
        print("ready", flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert select.select([parent.stdout], [], [], 30)[0], "the parent did not start its combo within 30 s"
        assert parent.stdout.readline().strip() == "ready"
        # scheduler, launcher, then two workers, each with its fork server and processor
        wait_for(lambda: len(_tree(parent.pid)) >= 8, 20, "the workers and their processors to start")
        tree = _tree(parent.pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        wait_for(lambda: all_exited(tree), 15, "the combo's processes to exit after its parent was SIGKILLed")
    finally:
        if parent.poll() is None:
            parent.kill()
