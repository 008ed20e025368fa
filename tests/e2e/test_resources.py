"""Resources end to end: a scheduler and two `scaler_cluster`s from their CLIs, one started with `--resources gpu=1`,
one without. Tasks needing a gpu wait while no worker offers one (the status counts them), then run on the gpu
cluster's workers only; tasks needing nothing run anywhere. Each task says which cluster ran it: the launchers among
its processor's ancestors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Iterator, List

import cloudpickle
import psutil
import pytest

from scaler import Client
from scaler.testing.processes import ROOT
from tests.e2e.live_cluster import LiveCluster

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WAIT = 60  # seconds any result may take on a loaded machine; the test takes far less when all is well


def ancestors() -> List[int]:
    return [process.pid for process in psutil.Process().parents()]


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveCluster]:
    cluster = LiveCluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.close()


def test_gpu_tasks_wait_for_a_gpu_worker_then_run_only_on_the_cluster_offering_gpus(live: LiveCluster) -> None:
    plain = live.add_cluster(2)
    live.wait_workers(2, WAIT)
    with Client(live.address, timeout_seconds=30) as client:
        gpu_view = client.options(resources={"gpu": 1})
        waiting = [gpu_view.submit(ancestors) for _ in range(10)]
        anywhere = [client.submit(ancestors) for _ in range(10)]
        assert all(plain.pid in future.result(WAIT) for future in anywhere)
        status = live.status(lambda status: status.tasks_needing_resources == 10, WAIT)
        assert not any(future.done() for future in waiting), "no worker offers a gpu yet"
        assert all(not worker.resources for worker in status.workers)

        gpu = live.add_cluster(2, "--resources", "gpu=1,mem=64e9")
        ran_on = [future.result(WAIT) for future in waiting]
        assert all(gpu.pid in pids and plain.pid not in pids for pids in ran_on)
        status = live.status(lambda status: len(status.workers) == 4 and status.tasks_needing_resources == 0, WAIT)
        offers = sorted(tuple((r.name, r.amount) for r in worker.resources) for worker in status.workers)
        assert offers == [(), (), (("gpu", 1.0), ("mem", 64e9)), (("gpu", 1.0), ("mem", 64e9))]

        # both clusters up: a mixed burst, the gpu tasks never on the plain cluster, the others spread over both
        more = client.options(resources={"gpu": 1, "mem": 32e9})
        mixed = [(more.submit(ancestors), True) for _ in range(40)] + [
            (client.submit(ancestors), False) for _ in range(40)
        ]
        clusters = set()
        for future, needs_gpu in mixed:
            pids = future.result(WAIT)
            assert gpu.pid in pids or (plain.pid in pids and not needs_gpu), "a gpu task ran where no gpu is offered"
            clusters.add(gpu.pid if gpu.pid in pids else plain.pid)
        assert clusters == {gpu.pid, plain.pid}


def test_bad_resources_syntax_is_a_clear_error() -> None:
    command = [sys.executable, "-m", "scaler.cluster", "--resources", "gpu", "tcp://127.0.0.1:1"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert finished.returncode == 2
    assert "--resources" in finished.stderr and "'gpu' is not NAME=AMOUNT" in finished.stderr, finished.stderr
