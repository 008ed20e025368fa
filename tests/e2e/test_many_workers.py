"""Several `scaler_cluster` processes and four clients at once, each with a map and a graph: every result checked.

The full size (clusters of 32 workers) is bench/scale/many_workers.py; here two clusters of six, so CI stays quick."""

from __future__ import annotations

import pytest

from scaler.testing.many_workers import ManyWorkers, scheduler_python_or_none

pytestmark = pytest.mark.timeout(180)


def test_four_clients_at_once_on_two_clusters_get_every_map_and_graph_result(tmp_path) -> None:
    cluster = ManyWorkers(tmp_path, clusters=2, workers_per_cluster=6, scheduler_python=scheduler_python_or_none())
    try:
        figures = cluster.run_clients(clients=4, map_tasks=500, graph_leaves=128, timeout=120)
    finally:
        exit_codes = cluster.close()
    assert [figure["client"] for figure in figures] == [0, 1, 2, 3]
    assert exit_codes[:2] == [0, 0], "both clusters stopped cleanly on SIGTERM"
