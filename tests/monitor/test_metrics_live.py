"""`scaler_ui --metrics` scraped over HTTP, as Prometheus would, against a scheduler and workers run from their CLIs."""

from __future__ import annotations

import time
import urllib.request
from typing import Iterator, List

import pytest

from scaler import Client
from scaler.testing.processes import ScalerProcess, free_tcp_address, wait_for
from tests.monitor.conftest import LiveCluster
from tests.monitor.samples import Samples, parse, value, worker_labels

TASKS = 300
TASK_SECONDS = 0.02  # 300 tasks on 3 workers: 2 s or more of work, several statuses at 4 a second
UI_TIMEOUT_SECONDS = "2"  # how soon scaler_ui says the scheduler is gone: 8 status intervals


@pytest.fixture
def metrics_url(live_cluster: LiveCluster, tmp_path) -> Iterator[str]:
    port = free_tcp_address().rsplit(":", 1)[1]
    process = ScalerProcess(
        "scaler.monitor.ui.app",
        [live_cluster.monitor_address, "--port", port, "--metrics", "--timeout", UI_TIMEOUT_SECONDS],
        str(tmp_path / "ui.log"),
    )
    try:
        process.wait_for_output("scaler_ui: Prometheus metrics at")
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        process.stop()


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return parse(response.read().decode())


def pids(workers: set) -> set:
    """Worker names are `W|host|pid|...`: the agent's pid, to tell which cluster a series belongs to."""
    return {int(name.split("|")[2]) for name in workers}


def up(samples: Samples) -> bool:
    """A fresh status is behind this scrape (else it holds only scaler_up 0 and the ages)."""
    return value(samples, "scaler_up") == 1


def fresh(url: str) -> Samples:
    """The next scrape with a fresh status behind it."""
    seen: List[Samples] = []

    def got_one() -> bool:
        seen.append(scrape(url))
        return up(seen[-1])

    wait_for(got_one, 20, "a scrape with scaler_up 1")
    return seen[-1]


def total(samples: Samples, name: str) -> float:
    return sum(amount for (sample, _), amount in samples.items() if sample == name)


def test_counters_move_and_worker_series_follow_the_workers(live_cluster: LiveCluster, metrics_url: str, tmp_path):
    wait_for(lambda: len(worker_labels(scrape(metrics_url))) == 2, 20, "series for the cluster's two workers")
    first = fresh(metrics_url)
    assert value(first, "scaler_up") == 1
    assert value(first, "scaler_workers") == 2
    assert pids(worker_labels(first)) <= set(live_cluster.worker_pids())
    assert value(first, "scaler_scheduler_resident_memory_bytes") > 10 * 1024 * 1024
    assert value(first, "scaler_scheduler_cpu_ratio") >= 0
    assert value(first, "scaler_free_slots") > 0

    extra = ScalerProcess("scaler.cluster", ["-n", "1", live_cluster.address], str(tmp_path / "extra.log"))
    try:
        extra.wait_for_output("Worker[0] started")
        wait_for(lambda: len(worker_labels(scrape(metrics_url))) == 3, 20, "a series for the third worker")
        (joined,) = worker_labels(fresh(metrics_url)) - worker_labels(first)
        assert pids({joined}) <= {process.pid for process in extra.descendants()}

        before = fresh(metrics_url)
        completed_before = value(before, "scaler_tasks_completed_total", status="success")
        seen: List[Samples] = []

        def busy() -> bool:
            seen.append(scrape(metrics_url))
            latest = seen[-1]
            return (
                up(latest)
                and value(latest, "scaler_clients_connected") == 1
                and value(latest, "scaler_tasks", state="assigned") > 0
                and latest.get(("scaler_tasks_completed_per_second", frozenset()), 0) > 0
            )

        with Client(live_cluster.address, timeout_seconds=20) as client:
            futures = [client.submit(time.sleep, TASK_SECONDS) for _ in range(TASKS)]
            wait_for(busy, 30, "a scrape showing a client, tasks assigned and a rate while the tasks run")
            for future in futures:
                future.result(timeout=60)

        def all_counted() -> bool:
            seen.append(scrape(metrics_url))
            counted = up(seen[-1]) and value(seen[-1], "scaler_tasks_completed_total", status="success")
            return counted == completed_before + TASKS

        wait_for(all_counted, 15, f"the completed counter to count all {TASKS} tasks")
        after = seen[-1]
        counts = [value(samples, "scaler_tasks_completed_total", status="success") for samples in seen if up(samples)]
        assert counts == sorted(counts), "a counter never goes down"
        worker_processed = "scaler_worker_tasks_processed_total"
        assert total(after, worker_processed) - total(before, worker_processed) == TASKS
        for message, grew_by in (("Task", TASKS), ("TaskResult", TASKS)):
            delta = value(after, "scaler_messages_received_total", type=message) - value(
                before, "scaler_messages_received_total", type=message
            )
            assert delta == grew_by, f"{message} received"
        assert value(after, "scaler_messages_sent_total", type="Task") >= TASKS
    finally:
        extra.stop()

    wait_for(lambda: worker_labels(scrape(metrics_url)) == worker_labels(first), 20, "the third worker's series to go")
    assert value(scrape(metrics_url), "scaler_workers") == 2


def test_a_stopped_scheduler_leaves_only_up_zero(live_cluster: LiveCluster, metrics_url: str):
    wait_for(lambda: up(scrape(metrics_url)), 20, "scaler_up 1")
    live_cluster.scheduler.stop()
    wait_for(lambda: value(scrape(metrics_url), "scaler_up") == 0, 15, "scaler_up 0 once the status is stale")
    assert {name for name, _ in scrape(metrics_url)} == {
        "scaler_up",
        "scaler_status_age_seconds",
        "scaler_ui_malformed_frames_total",
    }
