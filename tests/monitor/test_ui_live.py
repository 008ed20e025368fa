"""scaler_ui opened in headless Chromium against a scheduler and `scaler_cluster -n 2` started from their CLIs."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any, Dict, Iterator, List

import pytest

from scaler import Client
from scaler.testing.processes import ScalerProcess, free_tcp_address, wait_for
from tests.monitor.browser import HeadlessChromium
from tests.monitor.conftest import LiveCluster, MonitoredCounter

TASKS = 400
TASK_SECONDS = 0.025  # 400 tasks on 2 workers keep the cluster busy for 5 s or more: the page refreshes every second

PAGE_STATE = """JSON.stringify({
  completed: Number(document.getElementById("completed").textContent.replace(/,/g, "")),
  connection: document.getElementById("connection").textContent,
  workers: [...document.querySelectorAll("#worker-table tbody tr")].map((row) => row.dataset.worker),
  processed: [...document.querySelectorAll("#worker-table td.processed")].map(
    (cell) => Number(cell.textContent.replace(/,/g, ""))),
  sorted_header: [...document.querySelectorAll("#worker-table th")].map((cell) => cell.textContent)
    .filter((text) => text.startsWith("*")),
  sections: [...document.querySelectorAll("#sections caption")].map((caption) => caption.textContent),
  samples: page.samples.length,
})"""


@pytest.fixture
def ui_url(live_cluster: LiveCluster, tmp_path) -> Iterator[str]:
    port = free_tcp_address().rsplit(":", 1)[1]
    process = ScalerProcess(
        "scaler.monitor.ui.app", [live_cluster.monitor_address, "--port", port], str(tmp_path / "ui.log")
    )
    try:
        process.wait_for_output("scaler_ui: serving")
        yield f"http://127.0.0.1:{port}/"
    finally:
        process.stop()


def page_state(browser: HeadlessChromium) -> Dict[str, Any]:
    return json.loads(browser.evaluate(PAGE_STATE))


def test_page_lists_the_workers_and_counts_rise_while_tasks_run(live_cluster: LiveCluster, ui_url: str):
    with HeadlessChromium(ui_url) as browser:
        wait_for(lambda: len(page_state(browser)["workers"]) == 2, 30, "the page to list two workers")
        state = page_state(browser)
        assert state["connection"] == "live"
        assert state["sections"] == [
            "scheduler",
            "task_manager",
            "scheduler_sent",
            "scheduler_received",
            "function_tasks",
        ]
        assert {int(name.split("|")[2]) for name in state["workers"]} <= set(live_cluster.worker_pids())
        assert state["sorted_header"] == ["*cpu"]
        browser.evaluate('document.dispatchEvent(new KeyboardEvent("keydown", {key: "n"}))')
        assert page_state(browser)["sorted_header"] == ["*worker"]

        before = state["completed"]
        seen: List[int] = []

        def rose_while_running() -> bool:
            seen.append(page_state(browser)["completed"])
            return before < seen[-1] < before + TASKS

        with Client(live_cluster.address, timeout_seconds=20) as client:
            futures = [client.submit(time.sleep, TASK_SECONDS) for _ in range(TASKS)]
            wait_for(rose_while_running, 30, "the page's completed count to rise while the tasks run")
            for future in futures:
                future.result(timeout=60)
        wait_for(lambda: page_state(browser)["completed"] == before + TASKS, 15, f"the page to count all {TASKS}")

        final = page_state(browser)
        assert seen == sorted(seen), "the count never goes down"
        assert sum(final["processed"]) == final["completed"], "per-worker counts add up to the total"
        assert all(processed > 0 for processed in final["processed"]), "both workers ran tasks"
        assert final["samples"] >= 3, "the charts have a history to draw"


ACTOR_TABLE = """JSON.stringify({
  hidden: document.getElementById("actors").hidden,
  total: document.getElementById("actors-total").textContent,
  headers: [...document.querySelectorAll("#actor-table th")].map((cell) => cell.textContent),
  rows: [...document.querySelectorAll("#actor-table tbody tr")].map(
    (row) => [...row.querySelectorAll("td")].map((cell) => cell.textContent)),
  hosted: Object.fromEntries([...document.querySelectorAll("#worker-table tbody tr")].map(
    (row) => [row.dataset.worker, row.querySelector('td[data-key="a"]').textContent])),
})"""


def test_page_lists_an_actor_where_it_lives_until_its_client_leaves(live_cluster: LiveCluster, ui_url: str):
    with HeadlessChromium(ui_url) as browser:

        def actors() -> Dict[str, Any]:
            return json.loads(browser.evaluate(ACTOR_TABLE))

        wait_for(lambda: len(actors()["hosted"]) == 2, 30, "the page to list two workers")
        assert actors()["hidden"] and actors()["rows"] == [], "no actor section before the first actor"
        with Client(live_cluster.address, timeout_seconds=20) as client:
            counter = client.actor(MonitoredCounter)
            assert [counter.add(1).result(timeout=30) for _ in range(5)] == [1, 2, 3, 4, 5]
            wait_for(lambda: [row[3] for row in actors()["rows"]] == ["5"], 15, "the page to count 5 calls")
            shown = actors()
            assert not shown["hidden"] and shown["total"] == "Total 1 actor(s)"
            assert shown["headers"] == ["actor", "id", "pending", "calls", "calls/s", "worker"]
            ((name, short_id, pending, _, _, worker),) = shown["rows"]
            assert (name, pending) == ("MonitoredCounter", "0") and short_id in counter.actor_id.hex()
            assert shown["hosted"][worker] == "1" and sorted(shown["hosted"].values()) == ["0", "1"]
        wait_for(lambda: actors()["hidden"], 15, "the actor section to go once its client left")


def test_the_feed_answers_json(live_cluster: LiveCluster, ui_url: str):
    def state() -> Dict[str, Any]:
        with urllib.request.urlopen(ui_url + "api/state?since=0", timeout=5) as response:
            return json.load(response)

    wait_for(lambda: state()["status"] is not None, 20, "a status in the feed")
    first = state()
    assert first["live"] and first["address"] == live_cluster.monitor_address
    wait_for(lambda: state()["sequence"] > first["sequence"], 20, "the feed to move on")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(ui_url + "api/state?since=x", timeout=5)
    assert refused.value.code == 400
