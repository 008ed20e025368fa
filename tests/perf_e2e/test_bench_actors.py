"""bench/peers/actors.py runs end to end: with tiny sizes and one round, on Scaler and on Dask distributed, it checks
every result, writes the JSON and the table it promises, and leaves no process and no file behind. Not a timing
assertion: the figures are the benchmark's business (performance lives in benchmarks, never in timed tests)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

from tests.perf_e2e.bench_tool import run_bench

pytest.importorskip("distributed")  # the benchmark's other engine (the bench extra)

pytestmark = pytest.mark.timeout(150)  # about 10 s here; the tool gets 120 s, then time to stop it

FIGURES = ["calls: calls/s", "round trip: median us", "round trip: p90 us", "threads: calls/s"]


def test_a_tiny_run_checks_every_call_on_both_engines_and_leaves_nothing_behind(tmp_path) -> None:
    figures = tmp_path / "actors.json"
    # the run's TMPDIR, to be empty again once it is done; short, for the ipc sockets made under it
    with tempfile.TemporaryDirectory(prefix="ba-test-") as scratch:
        run_tiny(figures, Path(scratch))


def run_tiny(figures: Path, scratch: Path) -> None:
    command = [sys.executable, "-m", "bench.peers.actors", "--calls", "60", "--round-trips", "20", "--threads", "3"]
    command += ["--repeat", "1", "--json", str(figures)]
    output = run_bench(command, scratch)

    document = json.loads(figures.read_text())
    assert document["params"]["calls"] == 60 and document["params"]["threads"] == 3
    assert set(document["engines"]) == {"Scaler", "Dask", "tasks"}  # tasks: the same calls as Scaler tasks
    for engine in ("Scaler", "Dask", "tasks"):
        rounds = document["rounds"][engine]
        assert sorted(rounds) == sorted(FIGURES), rounds
        assert all(len(values) == 1 and values[0] > 0 for values in rounds.values()), rounds
    assert [row["figure"] for row in document["summary"]] == FIGURES
    for row in document["summary"]:
        assert row["ratio"] == pytest.approx(row["scaler"] / row["dask"]) and row["scaler_tasks"] > 0, row
    for label in ("calls a second", "round trip, median us", "round trip, p90 us", "3 threads, calls a second"):
        assert label in output
