"""client.shutdown(): refused with ValueError by a protected scheduler; on an unprotected one it stops the scheduler and
every worker cleanly, the call returns, and no process is left."""

from __future__ import annotations

import sys

import cloudpickle
import psutil
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.testing.processes import all_exited, wait_for
from tests.e2e.live_cluster import LiveCluster

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def double(value: int) -> int:
    return 2 * value


def test_protected_scheduler_refuses_shutdown_and_the_client_stays_usable(tmp_path) -> None:
    live = LiveCluster(tmp_path, protected=True)
    try:
        live.add_worker()
        with Client(live.address) as client:
            with pytest.raises(ValueError, match="protected"):
                client.shutdown()
            assert client.submit(double, 4).result(timeout=20) == 8
        assert live.scheduler.popen.poll() is None and len(live.agents()) == 1
    finally:
        live.close()


def test_combo_is_protected_by_default() -> None:
    combo = SchedulerClusterCombo(n_workers=1)
    try:
        with Client(combo.get_address()) as client:
            with pytest.raises(ValueError):
                client.shutdown()
            assert client.submit(double, 5).result(timeout=30) == 10
    finally:
        combo.shutdown()


def test_unprotected_shutdown_stops_scheduler_and_workers_cleanly(tmp_path) -> None:
    live = LiveCluster(tmp_path, protected=False)
    try:
        launchers = [live.add_worker(), live.add_worker()]
        live.wait_workers(2)
        tree = [psutil.Process(p.pid) for p in [live.scheduler, *launchers]]
        tree += [child for p in [live.scheduler, *launchers] for child in p.descendants()]
        client = Client(live.address)
        assert client.submit(double, 1).result(timeout=20) == 2
        client.shutdown()  # returns
        assert live.scheduler.popen.wait(10) == 0
        for launcher in launchers:
            assert launcher.popen.wait(15) == 0, launcher.output()
        wait_for(lambda: all_exited(tree), 10, "no orphan")
        assert "scheduler said goodbye" in launchers[0].output()
    finally:
        live.close()
