"""scaler_top in a real terminal (tmux) against a scheduler and `scaler_cluster -n 2` started from their CLIs."""

from __future__ import annotations

import re
import sys
import tempfile
from typing import List

from scaler import Client
from scaler.testing.processes import wait_for
from tests.monitor.conftest import LiveCluster, MonitoredCounter
from tests.monitor.terminal import EXIT_MARK, Tmux

SECTION_TITLES = ("scheduler", "task_manager", "scheduler_sent", "scheduler_received", "function_tasks")


def top_command(monitor_address: str, timeout: str) -> List[str]:
    return [sys.executable, "-m", "scaler.monitor.top", monitor_address, "--timeout", timeout]


def worker_rows(screen: str) -> List[str]:
    return [line for line in screen.splitlines() if line.startswith("W|")]


def starred(screen: str) -> List[str]:
    header = next((line for line in screen.splitlines() if "agt_cpu" in line and "ITL" in line), "")
    return [cell for cell in header.split() if cell.startswith("*")]


def success_count(screen: str) -> int:
    found = re.search(r"success\s+([\d,]+)", screen)
    return int(found.group(1).replace(",", "")) if found else -1


def test_sections_workers_sorting_resize_and_quit(live_cluster: LiveCluster, tmux: Tmux):
    tmux.start(top_command(live_cluster.monitor_address, "3"), 150, 45)
    wait_for(lambda: len(worker_rows(tmux.screen())) == 2, 30, "two worker rows in scaler_top")
    screen = tmux.screen()
    titles = next(line for line in screen.splitlines() if line.startswith("scheduler "))
    assert re.findall(r"\w+", titles) == list(SECTION_TITLES)
    assert "Total 2 worker(s)" in screen and starred(screen) == ["*cpu"]
    shown_pids = {int(row.split("|")[2]) for row in worker_rows(screen)}
    assert shown_pids <= set(live_cluster.worker_pids()), "rows must be the cluster's own workers"

    with Client(live_cluster.address, timeout_seconds=20) as client:
        assert client.map(pow, [(number, 2) for number in range(50)]) == [number**2 for number in range(50)]
    wait_for(lambda: success_count(tmux.screen()) == 50, 15, "scaler_top to count the 50 finished tasks")

    for key, header in (("n", "*worker"), ("l", "*lag"), ("C", "*agt_cpu"), ("d", "*queued"), ("m", "*rss")):
        tmux.press(key)
        wait_for(lambda header=header: starred(tmux.screen()) == [header], 10, f"key {key} to mark {header}")
    tmux.press("n")
    wait_for(lambda: starred(tmux.screen()) == ["*worker"], 10, "key n to mark *worker")
    names = [row.split()[0] for row in worker_rows(tmux.screen())]
    assert names == sorted(names)

    tmux.resize(80, 16)
    wait_for(lambda: "worker(s) not shown: enlarge the terminal" in tmux.screen(), 10, "the small-terminal notice")
    assert worker_rows(tmux.screen()) == []
    tmux.resize(150, 45)
    wait_for(
        lambda: len(worker_rows(tmux.screen())) == 2 and "not shown" not in tmux.screen(), 10, "the full screen back"
    )

    live_cluster.scheduler.stop()
    wait_for(
        lambda: f"no new status from {live_cluster.monitor_address}" in tmux.screen(), 15, "the stale-status notice"
    )
    assert len(worker_rows(tmux.screen())) == 2, "the last status stays on screen"

    tmux.press("q")
    wait_for(lambda: f"{EXIT_MARK} 0" in tmux.screen(), 10, "scaler_top to exit with 0 on q")


def actor_rows(screen: str) -> List[List[str]]:
    """The cells of the actor table's rows: class, id, pending, calls, calls/s, worker."""
    lines = screen.splitlines()
    start = next((index for index, line in enumerate(lines) if re.match(r"Total \d+ actor\(s\)", line)), None)
    return [] if start is None else [line.split() for line in lines[start + 2 :] if line.strip()]


def test_lists_an_actor_where_it_lives_until_its_client_leaves(live_cluster: LiveCluster, tmux: Tmux):
    tmux.start(top_command(live_cluster.monitor_address, "3"), 150, 45)
    wait_for(lambda: len(worker_rows(tmux.screen())) == 2, 30, "two worker rows in scaler_top")
    assert actor_rows(tmux.screen()) == [], "no actor table before the first actor"
    with Client(live_cluster.address, timeout_seconds=20) as client:
        counter = client.actor(MonitoredCounter)
        assert [counter.add(1).result(timeout=30) for _ in range(5)] == [1, 2, 3, 4, 5]
        wait_for(lambda: [row[3] for row in actor_rows(tmux.screen())] == ["5"], 15, "scaler_top to count 5 calls")
        screen = tmux.screen()
        ((name, short_id, pending, _, _, worker),) = actor_rows(screen)
        assert (name, pending) == ("MonitoredCounter", "0") and short_id in counter.actor_id.hex()
        assert "Total 1 actor(s)" in screen
        header = next(line for line in screen.splitlines() if "agt_cpu" in line and "ITL" in line)
        assert header.split()[-2:] == ["actors", "ITL"]
        hosts = {row.split()[0]: row.split()[-2] for row in worker_rows(screen)}
        assert worker in hosts and hosts[worker] == "1", "the hosting worker counts its actor"
        assert sorted(hosts.values()) == ["0", "1"]
    wait_for(lambda: "actor(s)" not in tmux.screen(), 15, "the actor table to go once its client left")


def test_says_so_when_no_status_arrives(tmux: Tmux):
    address = f"ipc://{tempfile.gettempdir()}/scaler-test-nobody-publishes-here"
    tmux.start(top_command(address, "1"), 200, 10)
    wait_for(lambda: f"no status from {address}" in tmux.screen(), 15, "the no-status notice")
    assert "(timeout 1s): is the scheduler running, and is this its monitor address?" in tmux.screen()
    tmux.press("q")
    wait_for(lambda: f"{EXIT_MARK} 0" in tmux.screen(), 10, "scaler_top to exit with 0 on q")
