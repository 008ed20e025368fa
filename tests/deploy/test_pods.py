"""The rendered pods of deploy/kubernetes run here as local processes: scheduler, workers and scaler_ui find each
other through the Services, the probes pass, /metrics sees the workers, and with components/curve the same happens
over CurveZMQ with the keys the Secrets carry. What a cluster adds (images, scheduling, DNS, the kubelet) is not here.
"""

from __future__ import annotations

import shutil
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, List

import pytest

from scaler import Client
from scaler.testing.processes import wait_for
from tests.deploy.kube import ContainerProcess, LocalPods, base_objects, env_values, find, render
from tests.monitor.samples import Samples, parse, value, worker_labels

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl renders the kustomization")


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=5) as response:
        return parse(response.read().decode())


class RunningPods:
    def __init__(self, pods: LocalPods) -> None:
        self.pods = pods
        self.processes: List[ContainerProcess] = []

    def start(self, deployment: str, ready_line: str) -> ContainerProcess:
        process = self.pods.start(deployment)
        self.processes.append(process)
        process.wait_for_output(ready_line, timeout=30)
        return process

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()


@pytest.fixture
def running() -> Iterator[Callable[[LocalPods], RunningPods]]:
    """Makes RunningPods, and stops every process they started at the end of the test."""
    made: List[RunningPods] = []

    def make(pods: LocalPods) -> RunningPods:
        made.append(RunningPods(pods))
        return made[-1]

    try:
        yield make
    finally:
        for running_pods in made:
            running_pods.stop()


def start_all(running_pods: RunningPods) -> str:
    """Scheduler, workers and scaler_ui in the order a cluster would get them ready; returns the /metrics URL."""
    pods = running_pods.pods
    running_pods.start("scaler-scheduler", "Scheduler: listening on")
    pods.probe("scaler-scheduler", "readinessProbe")
    running_pods.start("scaler-workers", "Worker[0] started")
    running_pods.start("scaler-ui", "scaler_ui: serving")
    pods.probe("scaler-ui", "readinessProbe")
    pods.probe("scaler-ui", "livenessProbe")
    ui = find(pods.objects, "Service", "scaler-ui")
    port = int(ui["metadata"]["annotations"]["prometheus.io/port"])
    path = ui["metadata"]["annotations"]["prometheus.io/path"]
    return f"http://{pods.service_address('scaler-ui', port)}{path}"


def expected_workers(pods: LocalPods) -> int:
    return int(env_values(pods.container("scaler-workers"))["SCALER_NUM_WORKERS"])


def wait_for_workers(url: str, count: int) -> Samples:
    """The first scrape that shows the scheduler up with `count` workers."""
    seen: List[Samples] = []

    def connected() -> bool:
        seen.append(scrape(url))
        return value(seen[-1], "scaler_up") == 1 and value(seen[-1], "scaler_workers") == count

    wait_for(connected, 30, f"/metrics to show the scheduler up with {count} workers")
    return seen[-1]


def test_the_base_pods_work_together(running, tmp_path: Path):
    pods = LocalPods(base_objects(), tmp_path)  # the files as they are: kustomize changes no command of theirs
    running_pods = running(pods)
    metrics_url = start_all(running_pods)
    samples = wait_for_workers(metrics_url, expected_workers(pods))
    assert len(worker_labels(samples)) == expected_workers(pods) == 2, "one worker per CPU of the pod's limit"
    pods.probe("scaler-scheduler", "livenessProbe")  # scaler_top --once reads a status through the monitor port

    scheduler_log = running_pods.processes[0]
    lines_before = scheduler_log.output().count("\n")
    for _ in range(5):
        pods.probe("scaler-scheduler", "readinessProbe")
    with Client(f"tcp://{pods.service_address('scaler-scheduler', 2345)}", timeout_seconds=20) as client:
        assert client.submit(abs, -7).result(timeout=30) == 7

    seen: List[Samples] = []

    def counted() -> bool:
        seen.append(scrape(metrics_url))
        return (
            value(seen[-1], "scaler_up") == 1 and value(seen[-1], "scaler_tasks_completed_total", status="success") == 1
        )

    wait_for(counted, 15, "the task in the completed counter")
    assert value(seen[-1], "scaler_malformed_frames_total") == 0, "a TCP probe is no malformed frame"
    new_lines = scheduler_log.output().splitlines()[lines_before:]
    assert not [line for line in new_lines if "WARNING" in line or "ERROR" in line], new_lines

    grace = find(pods.objects, "Deployment", "scaler-workers")["spec"]["template"]["spec"]
    started = time.monotonic()
    assert running_pods.processes[1].stop(timeout=grace["terminationGracePeriodSeconds"]) == 0
    assert time.monotonic() - started < grace["terminationGracePeriodSeconds"], "stops within the grace period"


@needs_kubectl
def test_with_curve_every_pod_connects_with_the_keys_of_its_secrets(running, tmp_path: Path):
    pods = LocalPods(render(tmp_path, ["components/curve"]), tmp_path)
    running_pods = running(pods)
    metrics_url = start_all(running_pods)
    wait_for_workers(metrics_url, expected_workers(pods))  # workers and scaler_ui were let in
    pods.probe("scaler-scheduler", "livenessProbe")  # so was scaler_top, with the monitor keys
    assert "CurveZMQ on, 2 authorized public key(s)" in running_pods.processes[0].output()
