"""scaler_top's screen, rendered without a terminal from statuses that went through the real codec."""

from __future__ import annotations

import re
from typing import List

import pytest

from scaler.monitor.model import (
    SORT_KEYS,
    RateMeter,
    check_sort_key,
    format_bytes,
    format_flags,
    format_lag,
    sorted_workers,
)
from scaler.monitor.top import TopState, render, render_text
from scaler.protocol import Resource, heartbeat_flags
from tests.monitor.statuses import counters, status, worker

ADDRESS = "ipc:///tmp/example_monitor"

WORKERS = [
    worker("W|host|300|cc", agent_cpu=1.5, agent_rss=30 << 20, cpu=90.0, rss=10 << 20, free=2, sent=998, queued=5,
           lag_us=900, flags=7, processed=10),
    worker("W|host|100|aa", agent_cpu=0.5, agent_rss=50 << 20, cpu=10.0, rss=70 << 20, free=1000, sent=0, queued=0,
           lag_us=40_000, flags=1, processed=30),
    worker("W|host|200|bb", agent_cpu=3.0, agent_rss=40 << 20, cpu=50.0, rss=20 << 20, free=500, sent=500, queued=60,
           lag_us=3_000, flags=3, processed=20),
]  # fmt: skip


def screen(sort_key: str = "c", width: int = 160, height=None, **state: object) -> str:
    defaults = dict(status=status(WORKERS), silence_seconds=0.4)
    defaults.update(state)
    return render_text(TopState(ADDRESS, 5.0, sort_key=sort_key, **defaults), width, height)


def table(text: str) -> List[str]:
    """The worker table: its header line, then one line per worker."""
    lines = text.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("Total "))
    return lines[start + 1 :]


def test_sections_side_by_side_with_counts_per_message_type():
    text = screen()
    titles = next(line for line in text.splitlines() if line.startswith("scheduler "))
    assert re.findall(r"\w+", titles) == [
        "scheduler",
        "task_manager",
        "scheduler_sent",
        "scheduler_received",
        "function_tasks",
    ]
    assert re.search(r"cpu\s+12\.5%", text) and re.search(r"rss\s+37\.0m", text)
    assert re.search(r"success\s+200,000", text) and re.search(r"failed\s+14", text)
    assert re.search(r"HeartbeatEcho\s+283,701", text) and re.search(r"TaskResult\s+53,794", text)
    assert re.search(r"calculate\s+5", text)
    assert "Total 3 worker(s)" in text


def test_worker_row_shows_every_column():
    header, *rows = table(screen(sort_key="n"))
    assert header.split() == ["*worker", "agt_cpu", "agt_rss", "cpu", "rss", "free", "sent", "queued", "lag", "ITL"]
    assert rows[2].split() == ["W|host|300|cc", "1.5%", "30.0m", "90.0%", "10.0m", "2", "998", "5", "0.9ms", "111"]
    assert rows[0].split()[-2:] == ["40ms", "100"]


@pytest.mark.parametrize("sort_key", sorted(SORT_KEYS))
def test_every_shortcut_sorts_and_moves_the_star(sort_key: str):
    column = SORT_KEYS[sort_key]
    header, *rows = table(screen(sort_key=sort_key))
    starred = [cell for cell in header.split() if cell.startswith("*")]
    assert starred == ["*" + column.header]
    if sort_key == "n":
        expected = sorted(w.name for w in WORKERS)
    else:
        by_name = sorted(WORKERS, key=lambda w: w.name)  # ties (every worker's spilled bytes are 0) go by name
        expected = [w.name for w in sorted(by_name, key=column.value, reverse=True)]
    assert [row.split()[0] for row in rows] == expected


def test_equal_values_keep_name_order():
    same = [worker(name, cpu=5.0) for name in ("W|b", "W|c", "W|a")]
    assert [w.name for w in sorted_workers(same, "c")] == ["W|a", "W|b", "W|c"]


def test_narrow_terminal_wraps_sections_and_cuts_long_names():
    long_name = "W|" + "a-very-long-host-name" * 3 + "|4242|0123456789ab"
    text = screen(width=72, status=status([worker(long_name)]))
    lines = text.splitlines()
    assert all(len(line) <= 72 for line in lines)
    titles = [index for index, line in enumerate(lines) if "scheduler_received" in line]
    assert titles and "scheduler |" not in lines[titles[0]]  # the fourth block moved to a second band
    (row,) = table(text)[1:]
    assert row.startswith(long_name[:10]) and "+" in row and long_name not in row


@pytest.mark.parametrize("width", [80, 40])
def test_every_shortcut_shows_on_a_narrow_terminal(width: int):
    lines = screen(width=width).splitlines()
    assert all(len(line) <= width for line in lines)
    keys = " ".join(line for line in lines if re.search(r"\w\[\w\]", line))
    for column in SORT_KEYS.values():
        assert f"{column.header}[{column.key}]" in keys
    assert "quit[q]" in keys


def test_short_terminal_says_how_many_workers_are_hidden():
    full = screen().splitlines()
    lines = render(TopState(ADDRESS, 5.0, status=status(WORKERS), silence_seconds=0.1), 160, len(full) - 1)
    assert len(lines) == len(full) - 1
    assert lines[-1].text == "... 2 worker(s) not shown: enlarge the terminal" and lines[-1].style == "alert"


def test_waiting_then_timed_out_without_any_status():
    waiting = screen(status=None, silence_seconds=1.0)
    assert waiting == f"waiting for the first status from {ADDRESS} ..."
    lines = render(TopState(ADDRESS, 5.0, status=None, silence_seconds=7.0), 200)
    assert [line.style for line in lines] == ["alert"]
    assert lines[0].text.startswith(f"no status from {ADDRESS} for 7s (timeout 5s)")
    assert "monitor address" in lines[0].text


def test_stale_status_is_flagged_but_still_shown():
    lines = render(TopState(ADDRESS, 5.0, status=status(WORKERS), silence_seconds=9.0), 300)
    assert lines[0].style == "alert" and lines[0].text.startswith(f"no new status from {ADDRESS} for 9s")
    assert any("W|host|200|bb" in line.text for line in lines)


def test_itl_flags_bits():
    assert [format_flags(flags) for flags in range(8)] == ["000", "100", "010", "110", "001", "101", "011", "111"]


@pytest.mark.parametrize(
    "value, text", [(512, "512b"), (2048, "2.0k"), (int(130.1 * 1024 * 1024), "130.1m"), (3 << 30, "3.0g")]
)
def test_memory_units(value: int, text: str):
    assert format_bytes(value) == text


@pytest.mark.parametrize("microseconds, text", [(700, "0.7ms"), (1000, "1ms"), (12_400, "12ms"), (1_500_000, "1.5s")])
def test_lag_units(microseconds: int, text: str):
    assert format_lag(microseconds) == text


def test_rates_from_the_scheduler_clock():
    meter = RateMeter()
    meter.update(status([worker("W|a", processed=10)], time_us=10_000_000, completed_tasks=100))
    assert meter.tasks_per_second is None
    meter.update(status([worker("W|a", processed=50), worker("W|b")], time_us=12_000_000, completed_tasks=300))
    assert meter.tasks_per_second == 100.0
    assert meter.worker_tasks_per_second == {"W|a": 20.0}  # W|b has no earlier count to compare with
    meter.update(status([worker("W|a", processed=1)], time_us=13_000_000, completed_tasks=5))  # a restarted scheduler
    assert meter.tasks_per_second is None and meter.worker_tasks_per_second == {}


def test_scheduler_section_shows_the_rate_and_malformed_frames():
    text = screen(tasks_per_second=1234.4, status=status(WORKERS, malformed=3))
    assert re.search(r"tasks/s\s+1,234", text) and re.search(r"malformed\s+3", text)
    assert "malformed" not in screen()


def test_workers_and_clients_that_registered_again_after_a_lost_scheduler_are_marked():
    survivor = worker("W|host|400|dd", previous_registrations=1, cpu=20.0)
    text = screen(status=status([*WORKERS, survivor], registered_again=3), width=80)
    assert re.search(r"re-registered\s+3", text)
    assert "Total 4 worker(s), 1 registered again after a lost scheduler (~)" in text
    names = [row.split()[0] for row in table(text)[1:]]
    assert "~W|host|400|dd" in names and "W|host|100|aa" in names
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "re-registered" not in screen() and "(~)" not in screen()


def test_retiring_workers_are_marked():
    leaving = worker("W|host|500|ee", retiring=True)
    text = screen(status=status([*WORKERS, leaving]), width=80)
    assert "Total 4 worker(s), 1 retiring (<)" in text
    assert "<W|host|500|ee" in [row.split()[0] for row in table(text)[1:]]
    assert "retiring" not in screen()


def test_workers_paused_for_memory_are_marked():
    full = worker("W|host|500|ee", flags=heartbeat_flags.MEMORY_PAUSED | heartbeat_flags.HAS_TASK)
    text = screen(status=status([*WORKERS, full]), width=80)
    assert "Total 4 worker(s), 1 paused (memory) (!)" in text
    assert "!W|host|500|ee" in [row.split()[0] for row in table(text)[1:]]
    assert "paused" not in screen()


def test_spilled_bytes_get_a_column_once_a_worker_spills():
    assert "spilled" not in table(screen())[0]
    spilling = worker("W|host|500|ee", spilled_bytes=2 * 1024**3)
    header, *rows = table(screen(status=status([*WORKERS, spilling]), sort_key="n"))
    assert header.split()[-2:] == ["spilled", "ITL"]
    assert rows[-1].split()[-2] == "2.0g" and rows[0].split()[-2] == "0b"


def test_tasks_waiting_for_resources_retries_and_what_workers_offer_are_shown():
    gpu = worker("W|host|600|ff", resources=[Resource(name="gpu", amount=1.0), Resource(name="mem", amount=64e9)])
    text = screen(status=status([*WORKERS, gpu], tasks_needing_resources=12, retried_tasks=3), width=80)
    assert re.search(r"need resources\s+12", text) and re.search(r"retried\s+3", text)
    assert "  1 worker(s) offer {gpu=1,mem=6.4e+10}" in text.splitlines(), "each offer, whatever the width"
    assert all(len(line) <= 80 for line in text.splitlines())
    wide = screen(status=status([*WORKERS, gpu]), width=140)
    names = [row.split()[0] for row in table(wide)[1:]]
    assert "W|host|600|ff{gpu=1,mem=6.4e+10}" in names and "W|host|100|aa" in names
    assert "need resources" not in screen() and "retried" not in screen() and "{" not in screen()


def test_empty_lists_render():
    text = screen(status=status([], task_states=[], sent=[], received=[], function_tasks=counters()))
    assert "Total 0 worker(s)" in text and table(text)[0].split()[0] == "worker"


def test_bad_arguments():
    with pytest.raises(ValueError, match="one of"):
        check_sort_key("x")
    with pytest.raises(TypeError):
        check_sort_key(1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="width"):
        render(TopState(ADDRESS, 5.0), 0)
