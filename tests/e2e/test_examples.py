"""Every script in examples/ (each one a snippet of the README or the site) runs against a real cluster and prints
what the page says.

Scripts that talk to a running scheduler get one started from the CLIs, as on separate hosts; scripts that start a
SchedulerClusterCombo start their own. Only the address is changed, to a free port, so tests never collide.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

import pytest

from scaler.testing.processes import ROOT, ScalerProcess, free_tcp_address

EXAMPLES = Path(ROOT) / "examples"
README_ADDRESS = "tcp://127.0.0.1:2345"

# script -> lines its output must contain, in order
EXPECTED_OUTPUT: Dict[str, List[str]] = {
    "quick_start.py": ["661.46"],
    "submit.py": ["16"],
    "graph.py": ["{'e': 1}"],
    "submit_graph.py": ["1"],
    "nested.py": ["21"],
    "profiling.py": ["True", "True"],
    "send_object.py": ["[1, 2, 3, 4, 5, 6]"],
    "custom_serializer.py": ["3"],
    "shutdown.py": ["cluster stopped"],
    "local_cluster.py": ["16"],
    "map_client.py": ["10000 results, in order"],
    "simple_client.py": ["1000 results"],
    "uvloop_combo.py": ["6"],
    "dask_collections.py": ["499999500000", "(2, [3, 4])", "333332833333.5"],
    "executor.py": ["[7, 158, 2568]", "1267650600228229401496703205376"],
    "joblib_parallel.py": ["666616.46"],
    "joblib_grid_search.py": ["{'C': 1, 'gamma': 0.1}"],
    "progress.py": ["124750 4950"],
    "task_output.py": ["[work#0] working on 0", "14"],
    "task_policies.py": ["['frame 1 rendered', 'frame 2 rendered']", "frame 0 rendered", "3", "timed out: task"],
    "curve_cluster.py": ["1024"],
    "memory_limit.py": ["stopped: 400000000 True", "10000000"],
    "preload.py": ["108.0"],
    "actors.py": ["[11, 12, 13, 14, 15]"],
}
# modules the examples import (on PYTHONPATH, for their workers too), not run themselves
MODULES = {"preload_rates.py"}
STARTS_OWN_CLUSTER = {
    "local_cluster.py",
    "map_client.py",
    "simple_client.py",
    "uvloop_combo.py",
    "curve_cluster.py",
    "memory_limit.py",
    "preload.py",
    "actors.py",
}
NEEDS_UNPROTECTED = {"shutdown.py"}
# examples/ray/: Ray's own examples, run as they are with only `import ray` changed; each starts a local cluster
RAY_EXPECTED_OUTPUT: Dict[str, List[str]] = {
    "tasks.py": ["[0, 1, 4, 9]", "1000000", "25", "[0, 1, 2, 3]"],
    "counter_actor.py": ["[1, 2, 3]", "[1, 1, 1, 1]", "3"],
}
RAY_IMPORT = "import scaler.compat.ray as ray  # was: import ray"
NEEDS_A_GPU = {"task_policies.py"}  # its workers must offer gpu=1


def test_every_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted([*EXPECTED_OUTPUT, *MODULES])


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory) -> Iterator[str]:
    """One protected scheduler and two workers from the CLIs, shared by the examples that need a running cluster."""
    yield from _cli_cluster(tmp_path_factory.mktemp("shared"), protected=True)


def _cli_cluster(directory: Path, protected: bool, cluster_options: Sequence[str] = ()) -> Iterator[str]:
    """A scheduler and a 2-worker scaler_cluster (given `cluster_options`) from the CLIs; yields the address."""
    address = free_tcp_address()
    monitor = f"ipc://{directory}/monitor"
    protection = "--protected" if protected else "--no-protected"
    scheduler = ScalerProcess(
        "scaler.scheduler", [address, "--monitor-address", monitor, protection], str(directory / "scheduler.log")
    )
    try:
        scheduler.wait_for_output("Scheduler: listening on")
        arguments = ["-n", "2", *cluster_options, address]
        cluster = ScalerProcess("scaler.cluster", arguments, str(directory / "cluster.log"))
        try:
            cluster.wait_for_output("Worker[1] started")
            yield address
        finally:
            cluster.stop()
    finally:
        scheduler.stop()


def _run_example(name: str, address: str, directory: Path) -> str:
    source = (EXAMPLES / name).read_text()
    assert README_ADDRESS in source, f"{name} should use the address the pages show"
    script = directory / name
    script.write_text(source.replace(README_ADDRESS, address))
    completed = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=90,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, str(EXAMPLES)])},
    )  # fmt: skip
    assert completed.returncode == 0, f"{name} failed:\n{completed.stdout}\n{completed.stderr}"
    return completed.stdout


def _assert_prints(name: str, output: str, expected: Optional[List[str]] = None) -> None:
    lines = [line.strip() for line in output.splitlines()]
    expected = EXPECTED_OUTPUT[name] if expected is None else expected
    found = [line for line in lines if any(line.startswith(want) for want in expected)]
    assert len(found) >= len(expected), f"{name} printed {output!r}, expected lines starting with {expected}"
    for want, got in zip(expected, [line for line in lines if line.startswith(tuple(expected))]):
        assert got.startswith(want), f"{name}: expected {want!r}, got {got!r} in {output!r}"


@pytest.mark.parametrize("name", sorted(set(EXPECTED_OUTPUT) - STARTS_OWN_CLUSTER - NEEDS_UNPROTECTED - NEEDS_A_GPU))
def test_example_against_cli_cluster(name: str, shared_cluster: str, tmp_path: Path) -> None:
    _assert_prints(name, _run_example(name, shared_cluster, tmp_path))


@pytest.mark.parametrize("name", sorted(STARTS_OWN_CLUSTER))
def test_example_with_its_own_cluster(name: str, tmp_path: Path) -> None:
    if name == "uvloop_combo.py":
        if sys.implementation.name != "cpython":  # on CPython uvloop is installed: its absence must fail, not skip
            pytest.skip("uvloop is CPython only")
    _assert_prints(name, _run_example(name, free_tcp_address(), tmp_path))


def test_task_policies_example_with_workers_offering_a_gpu(tmp_path: Path) -> None:
    cluster = _cli_cluster(tmp_path, protected=True, cluster_options=["--resources", "gpu=1"])
    address = next(cluster)
    try:
        _assert_prints("task_policies.py", _run_example("task_policies.py", address, tmp_path))
    finally:
        cluster.close()


def test_shutdown_example_stops_an_unprotected_cluster(tmp_path: Path) -> None:
    cluster = _cli_cluster(tmp_path, protected=False)
    address = next(cluster)
    try:
        _assert_prints("shutdown.py", _run_example("shutdown.py", address, tmp_path))
        scheduler_log = (tmp_path / "scheduler.log").read_text()
        assert "shut the cluster down" in scheduler_log
    finally:
        cluster.close()


def test_every_ray_example_is_checked() -> None:
    assert sorted(path.name for path in (EXAMPLES / "ray").glob("*.py")) == sorted(RAY_EXPECTED_OUTPUT)


@pytest.mark.parametrize("name", sorted(RAY_EXPECTED_OUTPUT))
def test_ray_example_runs_with_only_its_import_changed(name: str) -> None:
    source = (EXAMPLES / "ray" / name).read_text()
    assert RAY_IMPORT in source and source.count("scaler") == 1, f"{name}: Ray code, only its import changed"
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / "ray" / name)], cwd=ROOT, capture_output=True, text=True, timeout=90,
        env={**os.environ, "PYTHONPATH": ROOT},
    )  # fmt: skip
    assert completed.returncode == 0, f"{name} failed:\n{completed.stdout}\n{completed.stderr}"
    _assert_prints(name, completed.stdout, RAY_EXPECTED_OUTPUT[name])
