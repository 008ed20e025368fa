"""The kubernetes backend, through the official client, against a local server that speaks the two API calls it makes
(read and patch deployments/scale; fake_kubernetes.py). No Kubernetes cluster runs here: what a real API server,
the Deployment controller and the kubelet do (RBAC, TLS, in-cluster credentials, which pod goes, termination grace)
is not tested; README says so.

The last test runs `scaler_autoscale --backend kubernetes` against a real scheduler, with a stand-in for the kubelet
that runs one `scaler_cluster` per replica, so the count-based scale-down is exercised end to end.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator, List

import pytest

pytest.importorskip("kubernetes")

from scaler.autoscale.backends.base import BackendError  # noqa: E402
from scaler.autoscale.backends.kubernetes import KubernetesBackend  # noqa: E402
from scaler.testing.processes import ROOT, wait_for  # noqa: E402
from tests.autoscale.fake_kubernetes import FakeKubernetes  # noqa: E402
from tests.autoscale.scenario import Scenario  # noqa: E402

TOKEN = "scaler-autoscaler-token"
KEY = ("scaler", "scaler-workers")
SCALE_PATH = "/apis/apps/v1/namespaces/scaler/deployments/scaler-workers/scale"


@pytest.fixture
def api() -> Iterator[FakeKubernetes]:
    with FakeKubernetes(TOKEN, {KEY: 1}) as server:
        yield server


@pytest.fixture
def kubeconfig(api: FakeKubernetes, tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(api.kubeconfig())
    return str(path)


def test_reads_and_patches_the_deployment_scale(api: FakeKubernetes, kubeconfig: str) -> None:
    backend = KubernetesBackend("scaler-workers", "scaler", kubeconfig)
    assert [job.job_id for job in backend.poll(0.0)] == ["replica-1"]  # the replica already there is taken over
    assert backend.start(2, 1.0) == ["replica-2", "replica-3"]
    assert api.replicas[KEY] == 3
    backend.retire("replica-3", 2.0)
    backend.retire("replica-1", 3.0)
    assert api.replicas[KEY] == 1
    jobs = backend.poll(4.0)
    assert [job.job_id for job in jobs] == ["replica-2"]
    assert all(job.running and job.processes is None for job in jobs)  # which worker runs where is not known
    backend.close()
    assert api.replicas[KEY] == 1, "left as it is on exit"
    assert api.unexpected == []
    patches = [(kind, body) for method, path, kind, body in api.requests if method == "PATCH"]
    assert patches == [
        ("application/json-patch+json", [{"op": "add", "path": "/spec/replicas", "value": replicas}])
        for replicas in (3, 2, 1)
    ]
    assert {(method, path) for method, path, _, _ in api.requests} == {("GET", SCALE_PATH), ("PATCH", SCALE_PATH)}


def test_scales_from_and_to_zero(api: FakeKubernetes, kubeconfig: str) -> None:
    api.replicas[KEY] = 0  # a Scale of 0 replicas has no spec.replicas at all
    backend = KubernetesBackend("scaler-workers", "scaler", kubeconfig)
    assert backend.poll(0.0) == []
    (job_id,) = backend.start(1, 1.0)
    backend.retire(job_id, 2.0)
    assert api.replicas[KEY] == 0 and backend.poll(3.0) == []


def test_a_change_by_someone_else_is_followed_and_logged(api: FakeKubernetes, kubeconfig: str, caplog) -> None:
    backend = KubernetesBackend("scaler-workers", "scaler", kubeconfig)
    backend.poll(0.0)
    api.replicas[KEY] = 3
    with caplog.at_level(logging.WARNING):
        assert len(backend.poll(1.0)) == 3
    assert "replicas changed from 1 to 3 by someone else" in caplog.text


def test_errors_say_what_the_api_server_answered(api: FakeKubernetes, kubeconfig: str, tmp_path: Path) -> None:
    with pytest.raises(
        BackendError, match=r'read deployments/scale scaler/nope: 404 .*deployments.apps "nope" not found'
    ):
        KubernetesBackend("nope", "scaler", kubeconfig).poll(0.0)
    wrong = tmp_path / "wrong-token"
    wrong.write_text(api.kubeconfig().replace(TOKEN, "not-the-token"))
    with pytest.raises(BackendError, match="401"):
        KubernetesBackend("scaler-workers", "scaler", str(wrong)).poll(0.0)
    with pytest.raises(BackendError, match="no Kubernetes credentials"):
        KubernetesBackend("scaler-workers", "scaler", str(tmp_path / "missing"))


class Kubelet:
    """Stands in for the Deployment controller and kubelets: one `scaler_cluster` per replica, the newest stopped with
    SIGTERM first when replicas drop (the real controller prefers pods not ready, then the newest)."""

    def __init__(self, api: FakeKubernetes, address: str, workers_per_pod: int, directory: Path) -> None:
        self._api = api
        self._command = [sys.executable, "-m", "scaler.cluster", "-n", str(workers_per_pod), "-hi", "0.5", address]
        self._directory = directory
        self.pods: List[subprocess.Popen] = []
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            wanted = self._api.replicas[KEY]
            self.pods = [pod for pod in self.pods if pod.poll() is None]
            while len(self.pods) < wanted:
                log = open(self._directory / f"pod-{len(self.pods)}.log", "wb")
                self.pods.append(subprocess.Popen(self._command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT))
                log.close()
            for pod in self.pods[wanted:]:
                if pod.poll() is None:
                    pod.send_signal(signal.SIGTERM)
            self.peak = max(self.peak, len(self.pods))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for pod in self.pods:
            pod.send_signal(signal.SIGTERM)
        for pod in self.pods:
            try:
                pod.wait(15)
            except subprocess.TimeoutExpired:
                pod.kill()
                pod.wait()


@pytest.mark.timeout(90)
def test_scaler_autoscale_scales_a_deployment_up_and_down(api: FakeKubernetes, kubeconfig: str, tmp_path) -> None:
    api.replicas[KEY] = 0
    with Scenario(tmp_path, status_interval=0.5) as scenario:
        kubelet = Kubelet(api, scenario.address, workers_per_pod=2, directory=tmp_path)
        try:
            autoscaler = scenario.start_autoscaler(
                [
                    "--backend",
                    "kubernetes",
                    "--kubeconfig",
                    kubeconfig,
                    "--namespace",
                    "scaler",
                    "--deployment",
                    "scaler-workers",
                    "--max-workers",
                    "4",
                    "--workers-per-job",
                    "2",
                    "--idle-seconds",
                    "2",
                ],
                worker_arguments=None,
            )
            scenario.burst(tasks=24, seconds=0.2)
            runs = scenario.runs()
            assert sorted(runs) == list(range(24)) and set(runs.values()) == {1}
            assert kubelet.peak == 2 and max(sample.workers for sample in scenario.samples) == 4
            wait_for(lambda: api.replicas[KEY] == 0, 30, "the deployment scaled back to 0")
            scenario.wait_for_workers(0, timeout=20)
            log = autoscaler.output()
            assert "starting 2 job(s) of 2" in log and log.count("cluster manager's choice") == 2
            assert scenario.stop_autoscaler(timeout=20) == 0
            assert api.unexpected == []
        finally:
            kubelet.close()
