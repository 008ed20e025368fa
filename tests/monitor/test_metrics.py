"""scaler_ui's /metrics: statuses that went through the real codec, rendered by prometheus-client and parsed back."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Tuple

import pytest

from scaler.monitor.ui.app import METRICS_EXTRA_MESSAGE, build_app
from scaler.monitor.ui.metrics import METRICS, check_max_workers
from tests.monitor.samples import exported, full_status, names, parse, value, worker_labels
from tests.monitor.statuses import counters, status, worker

ROOT = Path(__file__).resolve().parents[2]


def test_a_fresh_status_gives_every_number_in_its_unit():
    samples = exported(
        status(
            [worker("W|b|2", free=3, sent=5, queued=4, processed=70, cpu=50.0, rss=2048, lag_us=1500)],
            task_states=counters(waiting=3, ready=7, assigned=5, canceling=1, success=200, failed=14, canceled=2),
            cpu=150.0,
            rss=37 * 1024 * 1024,
            clients=2,
            malformed=9,
        ),
        silence=0.4,
        ui_malformed=1,
    )
    assert value(samples, "scaler_up") == 1
    assert value(samples, "scaler_status_age_seconds") == 0.4
    assert value(samples, "scaler_ui_malformed_frames_total") == 1
    assert value(samples, "scaler_scheduler_cpu_ratio") == 1.5
    assert value(samples, "scaler_scheduler_resident_memory_bytes") == 37 * 1024 * 1024
    assert value(samples, "scaler_clients_connected") == 2
    held = {
        state: value(samples, "scaler_tasks", state=state) for state in ("waiting", "ready", "assigned", "canceling")
    }
    assert held == {"waiting": 3, "ready": 7, "assigned": 5, "canceling": 1}
    assert value(samples, "scaler_tasks_completed_total", status="success") == 200
    assert value(samples, "scaler_tasks_completed_total", status="failed") == 14
    assert value(samples, "scaler_tasks_completed_total", status="canceled") == 2
    assert ("scaler_tasks", frozenset({("state", "success")})) not in samples, "finished outcomes are counters only"
    assert value(samples, "scaler_tasks_completed_per_second") == 25
    assert value(samples, "scaler_messages_sent_total", type="Task") == 54_660
    assert value(samples, "scaler_messages_received_total", type="TaskResult") == 53_794
    assert value(samples, "scaler_messages_sent_total", type="Goodbye") == 0, "every type exists before it counts"
    assert value(samples, "scaler_malformed_frames_total") == 9
    assert value(samples, "scaler_workers") == 1
    assert value(samples, "scaler_free_slots") == 3
    one = {"worker": "W|b|2"}
    assert value(samples, "scaler_worker_free_slots", **one) == 3
    assert value(samples, "scaler_worker_tasks_assigned", **one) == 5
    assert value(samples, "scaler_worker_tasks_queued", **one) == 4
    assert value(samples, "scaler_worker_tasks_processed_total", **one) == 70
    assert value(samples, "scaler_worker_cpu_ratio", **one) == 0.5
    assert value(samples, "scaler_worker_resident_memory_bytes", **one) == 2048
    assert value(samples, "scaler_worker_lag_seconds", **one) == 0.0015
    assert not {name for name in names(samples) if name.startswith("scaler_demand_")}, "no demand fields: no series"


def test_no_rate_before_two_statuses():
    assert "scaler_tasks_completed_per_second" not in names(exported(status(), tasks_per_second=None))


@pytest.mark.parametrize("message, silence", [(None, 0.5), (status([worker("W|a")]), 6.0)], ids=["none", "stale"])
def test_without_a_fresh_status_only_up_and_ages_are_exposed(message, silence):
    samples = exported(message, silence=silence, timeout=5.0, ui_malformed=3)
    assert samples == {
        ("scaler_up", frozenset()): 0,
        ("scaler_status_age_seconds", frozenset()): silence,
        ("scaler_ui_malformed_frames_total", frozenset()): 3,
    }


def test_per_worker_series_are_bounded_and_totals_count_every_worker():
    workers = [worker(f"W|{name}", free=2) for name in "edcba"]
    samples = exported(status(workers), max_workers=2)
    assert worker_labels(samples) == {"W|a", "W|b"}, "the first workers by name, so the set is stable"
    for spec in METRICS:
        if spec.labels == ("worker",):
            assert worker_labels(samples, spec.name) == {"W|a", "W|b"}, spec.name
    assert value(samples, "scaler_workers") == 5
    assert value(samples, "scaler_free_slots") == 10
    assert value(samples, "scaler_metrics_workers_omitted") == 3
    none = exported(status(workers), max_workers=0)
    assert not [name for name in names(none) if name.startswith("scaler_worker_")]
    assert value(none, "scaler_metrics_workers_omitted") == 5


def test_demand_fields_are_exposed_when_the_status_has_them():
    message = status(
        [worker("W|a", free=4), worker("W|b", free=4)],
        tasks_waiting=15,
        tasks_ready=12,
        tasks_assigned=8,
        tasks_running=3,
        worker_count=2,
        worker_slots=16,
        free_slots=1,
        oldest_ready_wait_us=2_500_000,
    )
    samples = exported(message)
    assert value(samples, "scaler_demand_tasks_waiting") == 12, "ready tasks wait for a worker; the others on tasks"
    assert value(samples, "scaler_demand_tasks_running") == 3
    assert value(samples, "scaler_demand_oldest_waiting_seconds") == 2.5
    assert value(samples, "scaler_free_slots") == 1, "the scheduler's own count wins over the workers' sum"


def test_an_idle_scheduler_that_publishes_demand_shows_zero_demand():
    samples = exported(status([worker("W|a", free=4)], worker_count=1, worker_slots=4, free_slots=4))
    assert value(samples, "scaler_demand_tasks_waiting") == 0
    assert value(samples, "scaler_demand_oldest_waiting_seconds") == 0
    assert value(samples, "scaler_free_slots") == 4


def test_every_declared_metric_is_exposed_by_some_status():
    assert names(exported(full_status())) == {spec.name for spec in METRICS}


def test_max_workers_is_checked():
    assert check_max_workers(0) == 0
    with pytest.raises(ValueError, match="0 .* or more"):
        check_max_workers(-1)
    with pytest.raises(TypeError):
        check_max_workers(True)


def test_docs_list_exactly_the_exported_metrics():
    """docs/metrics.md's table has one row per metric: `name` | type | labels."""
    rows = re.findall(
        r"^\| `(scaler_\w+)` \| (gauge|counter) \| ([^|]*) \|", (ROOT / "docs/metrics.md").read_text(), re.M
    )
    documented = {name: (kind, tuple(re.findall(r"`(\w+)`", labels))) for name, kind, labels in rows}
    assert documented == {spec.name: (spec.kind, spec.labels) for spec in METRICS}


def get_all(app, requests: List[Tuple[str, str]]) -> List[Tuple[int, str, str]]:
    """(status, content type, body) for each (path, Accept header), from the app served on a loopback port."""
    from aiohttp.test_utils import TestClient, TestServer

    async def run() -> List[Tuple[int, str, str]]:
        answers = []
        async with TestClient(TestServer(app)) as client:
            for path, accept in requests:
                response = await client.get(path, headers={"Accept": accept})
                answers.append((response.status, response.headers.get("Content-Type", ""), await response.text()))
        return answers

    return asyncio.run(run())


def test_metrics_are_served_only_when_asked_for():
    with tempfile.TemporaryDirectory(prefix="scaler-mx-") as directory:
        address = f"ipc://{directory}/monitor"  # nobody publishes here: the exporter says the scheduler is not up
        ((code, _, _),) = get_all(build_app(address, 5.0), [("/metrics", "*/*")])
        assert code == 404
        openmetrics = "application/openmetrics-text; version=1.0.0"
        text_answer, openmetrics_answer = get_all(
            build_app(address, 5.0, metrics_max_workers=10), [("/metrics", "*/*"), ("/metrics", openmetrics)]
        )
    code, content_type, text = text_answer
    assert code == 200 and content_type.startswith("text/plain; version=0.0.4")
    assert value(parse(text), "scaler_up") == 0
    code, content_type, text = openmetrics_answer
    assert code == 200 and content_type.startswith("application/openmetrics-text")
    assert text.endswith("# EOF\n") and "scaler_up 0" in text


def run_ui(*args: str, hide_prometheus: bool = False) -> subprocess.CompletedProcess:
    code = "import sys\n"
    if hide_prometheus:
        code += "sys.modules['prometheus_client'] = None  # as if the metrics extra were not installed\n"
    code += f"from scaler.monitor.ui.app import main\nmain({list(args)!r})\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=ROOT)


def test_metrics_without_prometheus_client_is_a_clear_error():
    result = run_ui("ipc:///tmp/scaler-nothing", "--metrics", hide_prometheus=True)
    assert result.returncode == 1
    assert result.stderr.strip() == METRICS_EXTRA_MESSAGE


def test_a_negative_max_workers_is_refused_by_the_cli():
    result = run_ui("ipc:///tmp/scaler-nothing", "--metrics", "--metrics-max-workers", "-1")
    assert result.returncode == 2
    assert "--metrics-max-workers: must be 0 or more, got -1" in result.stderr
