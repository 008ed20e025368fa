"""bench/data/transfer.py runs end to end: its --quick run (tiny payloads, one round, Scaler only) checks every
result, writes the JSON its readers expect, and leaves no process and no file behind. Not a timing assertion: the
figures are the benchmark's business (performance lives in benchmarks, never in timed tests)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

from bench.data.client_side import WORKLOADS
from tests.perf_e2e.bench_tool import run_bench

pytestmark = pytest.mark.timeout(150)  # about 40 s here; the tool gets 120 s, then time to stop it


def test_a_quick_run_checks_every_result_and_leaves_nothing_behind(tmp_path) -> None:
    figures = tmp_path / "data.json"
    # the run's TMPDIR, to be empty again once it is done; not in tmp_path, whose long name would leave the ipc
    # sockets made under it no room (107 bytes at most)
    with tempfile.TemporaryDirectory(prefix="bd-test-") as scratch:
        run_quick(figures, Path(scratch))


def run_quick(figures: Path, scratch: Path) -> None:
    output = run_bench([sys.executable, "-m", "bench.data.transfer", "--quick", "--json", str(figures)], scratch)

    document = json.loads(figures.read_text())
    assert {"params", "repeat", "machine", "engines", "skipped", "runs", "summary"} <= set(document)
    assert [engine["name"] for engine in document["engines"]] == ["scaler"]
    runs = document["runs"]
    assert sorted(run["workload"] for run in runs) == sorted(WORKLOADS)
    for run in runs:
        assert run["engine"] == "scaler" and run["round"] == 1, run
        assert run["error"] is None, run
        assert run["expected"] > 0 and run["checked"] == run["expected"], run
        assert run["seconds"] > 0 and run["value"] > 0, run
        assert run["unit"] == ("s" if run["workload"] in ("matmul", "heavy") else "MB/s"), run
        assert run["rss_peak"] >= run["rss_idle"] > 0 and run["rss_above_idle"] >= 0, run
        assert run["workers_lost"] == 0, run
    assert [row["workload"] for row in document["summary"]] == list(WORKLOADS)
    for row in document["summary"]:
        assert row["failed"] == 0 and row["min"] <= row["median"] <= row["max"], row
        assert row["rss_above_idle_max"] is not None, row
    for workload in WORKLOADS:
        assert workload in output  # the table names each
