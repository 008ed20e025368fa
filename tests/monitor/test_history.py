"""What scaler_ui's page is fed, built from statuses that went through the real codec."""

from __future__ import annotations

import pytest

from scaler.monitor.ui.history import COLUMNS_JSON, StatusHistory
from scaler.protocol import ActorStatus, heartbeat_flags
from tests.monitor.statuses import status, worker

ADDRESS = "ipc:///tmp/example_monitor"


def seconds(value: float) -> int:
    return int(value * 1_000_000)


def test_samples_carry_rates_and_are_numbered_for_incremental_polls():
    history = StatusHistory()
    history.add(status([worker("W|a", processed=0, sent=4)], time_us=seconds(100), completed_tasks=0))
    history.add(status([worker("W|a", processed=30, sent=6)], time_us=seconds(101), completed_tasks=30))
    history.add(status([worker("W|a", processed=90, sent=1)], time_us=seconds(103), completed_tasks=90))
    first, second, third = history.samples_after(0)
    assert [first["seq"], second["seq"], third["seq"]] == [1, 2, 3]
    assert first["tasks_per_second"] is None
    assert second["tasks_per_second"] == 30.0 and third["tasks_per_second"] == 30.0
    assert third["workers"] == {"W|a": {"tasks_per_second": 30.0, "sent": 1}}
    assert history.samples_after(2) == [third]
    assert history.samples_after(3) == []


def test_a_repeated_status_adds_no_sample():
    history = StatusHistory()
    history.add(status(time_us=seconds(5)))
    history.add(status(time_us=seconds(5)))
    assert history.sequence == 1


def test_history_is_bounded():
    history = StatusHistory(max_samples=3)
    for second in range(10):
        history.add(status(time_us=seconds(second)))
    assert [sample["seq"] for sample in history.samples_after(0)] == [8, 9, 10]


def test_state_shows_the_newest_status_formatted_like_scaler_top():
    history = StatusHistory()
    history.add(status([worker("W|a", cpu=12.0, rss=3 << 20, flags=3, processed=7)], completed_tasks=1234))
    state = history.state(0, ADDRESS, silence_seconds=0.25, timeout_seconds=5.0)
    assert state["live"] is True and state["message"] is None and state["sequence"] == 1
    shown = state["status"]
    assert shown["completed_tasks"] == 1234
    assert [section["title"] for section in shown["sections"]] == [
        "scheduler",
        "task_manager",
        "scheduler_sent",
        "scheduler_received",
        "function_tasks",
    ]
    (row,) = shown["workers"]
    assert row["text"]["c"] == "12.0%" and row["text"]["m"] == "3.0m" and row["values"]["c"] == 12.0
    assert row["itl"] == "110" and row["processed"] == 7
    assert set(row["values"]) == {column["key"] for column in COLUMNS_JSON["columns"]}
    assert row["state"] == ""


def test_a_paused_worker_says_so_beside_its_name():
    history = StatusHistory()
    history.add(status([worker("W|a", flags=heartbeat_flags.MEMORY_PAUSED, retiring=True)]))
    (row,) = history.state(0, ADDRESS, silence_seconds=0.25, timeout_seconds=5.0)["status"]["workers"]
    assert row["state"] == "retiring, paused (memory)" and row["text"]["n"] == "<!W|a"


def test_actors_are_fed_as_rows_under_their_headers_with_their_rate():
    actor_id = bytes(range(1, 9)) + (7).to_bytes(8, "little")

    def counter(calls: int) -> ActorStatus:
        return ActorStatus(actor_id=actor_id, name="Counter", worker="W|a", pending=1, calls=calls)

    history = StatusHistory()
    history.add(status([worker("W|a", actors=1)], time_us=seconds(10), actors=[counter(10)]))
    history.add(status([worker("W|a", actors=1)], time_us=seconds(12), actors=[counter(30)]))
    shown = history.state(0, ADDRESS, silence_seconds=0.25, timeout_seconds=5.0)["status"]
    assert COLUMNS_JSON["actor_headers"] == ["actor", "id", "pending", "calls", "calls/s", "worker"]
    assert shown["actors"] == [["Counter", "06070807", "1", "30", "10", "W|a"]]
    assert shown["actors_total"] == "Total 1 actor(s)"
    assert shown["workers"][0]["text"]["a"] == "1"


def test_state_says_when_the_scheduler_is_silent():
    empty = StatusHistory().state(0, ADDRESS, silence_seconds=6.0, timeout_seconds=5.0)
    assert empty["live"] is False and empty["status"] is None
    assert empty["message"].startswith(f"no status from {ADDRESS} for 6s (timeout 5s)")


def test_bad_sizes():
    with pytest.raises(ValueError):
        StatusHistory(max_samples=0)
    with pytest.raises(TypeError):
        StatusHistory(max_samples=2.5)  # type: ignore[arg-type]
