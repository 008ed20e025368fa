"""deploy/grafana/scaler.json: valid JSON that Grafana can import, whose every query parses as PromQL and names only
metrics that scaler_ui's exporter really exposes. Not tested: Grafana itself drawing it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, Iterator, List

import promql_parser

from scaler.testing.processes import ROOT
from tests.monitor.samples import exported, full_status, names

DASHBOARD = Path(ROOT) / "deploy" / "grafana" / "scaler.json"
# Grafana's variables are replaced before a query reaches Prometheus; these stand in for them
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$instance": ".*"}


def dashboard() -> Dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(container: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
    for panel in container.get("panels", []):
        yield panel
        yield from panels(panel)  # a collapsed row holds its panels


def queries() -> List[str]:
    found = [target["expr"] for panel in panels(dashboard()) for target in panel.get("targets", [])]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            found.append(re.fullmatch(r"label_values\((\w+), *\w+\)", variable["query"]["query"]).group(1))
    return found


def metric_names(query: str) -> List[str]:
    for variable, value in GRAFANA_VARIABLES.items():
        query = query.replace(variable, value)
    selectors: List[str] = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            selectors.append(node.name)
        return True

    promql_parser.walk(promql_parser.parse(query), visit)
    return selectors


def exposed() -> set:
    """Every series name a scrape shows for a status with workers and the demand fields."""
    return names(exported(full_status()))


def test_every_query_names_only_exposed_metrics():
    available = exposed()
    all_queries = queries()
    assert len(all_queries) > 20
    used = set()
    for query in all_queries:
        found = metric_names(query)
        assert found, f"names no metric: {query}"
        unknown = set(found) - available
        assert not unknown, f"{query} names {sorted(unknown)}, which /metrics does not expose"
        used |= set(found)
    assert {"scaler_tasks_completed_total", "scaler_tasks", "scaler_workers", "scaler_free_slots"} <= used
    assert {"scaler_scheduler_cpu_ratio", "scaler_scheduler_resident_memory_bytes"} <= used
    assert {"scaler_worker_tasks_assigned", "scaler_worker_free_slots"} <= used


def test_a_misnamed_metric_would_be_caught():
    assert metric_names('sum(rate(scaler_task_completed_total{instance=~"$instance"}[$__rate_interval]))') == [
        "scaler_task_completed_total"
    ]
    assert "scaler_task_completed_total" not in exposed()


def test_it_is_importable_into_grafana():
    board = dashboard()
    assert board["__inputs"][0]["pluginId"] == "prometheus", "import asks for the Prometheus data source"
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in panels(board):
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24, f"{panel['title']} is wider than the grid"
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", f"{panel['title']} uses the chosen data source"
            assert panel["targets"] and all(target["refId"] for target in panel["targets"])
    cells = set()
    for panel in panels(board):
        box = panel["gridPos"]
        mine = {(x, y) for x in range(box["x"], box["x"] + box["w"]) for y in range(box["y"], box["y"] + box["h"])}
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
