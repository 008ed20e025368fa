"""dist/scaler_scheduler.pex and dist/scaler_top.pex (packaging/pex/build.sh) under PyPy 3.9 and CPython 3.11."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from typing import List

import psutil
import pytest

from scaler import config
from tests.packaging.serving import (
    LISTENING,
    START_TIMEOUT_SECONDS,
    CommandProcess,
    built,
    check_tasks_run_on_cluster,
    check_top_once,
    new_addresses,
    running_cluster,
    scheduler_arguments,
    top_once_arguments,
)

BUILD = "bash packaging/pex/build.sh"
EXECUTABLE_PREFIX = {"pypy3": "pypy", "python3.11": "python3"}


def interpreter(name: str) -> str:
    """The bare interpreter: never the venv the tests run in, where scaler itself is installed."""
    if name == "python3.11" and sys.implementation.name == "cpython" and sys.version_info[:2] == (3, 11):
        return getattr(sys, "_base_executable", sys.executable)
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


def pex_distributions(pex: str) -> List[str]:
    with zipfile.ZipFile(pex) as archive:
        return list(json.loads(archive.read("PEX-INFO"))["distributions"])


@pytest.mark.parametrize("tool", ["scaler_scheduler", "scaler_top"])
def test_pypy_half_has_no_pycapnp_nor_uvloop(tool: str) -> None:
    wheels = pex_distributions(built(f"{tool}.pex", BUILD))
    pypy_wheels = [wheel for wheel in wheels if "-pp39-" in wheel or wheel.endswith("-py3-none-any.whl")]
    assert any(wheel.startswith("pyzmq-") and "-pp39-" in wheel for wheel in pypy_wheels), wheels
    assert any(wheel.startswith("psutil-") and "-pp39-" in wheel for wheel in pypy_wheels), wheels
    assert not [wheel for wheel in pypy_wheels if wheel.lower().startswith(("pycapnp-", "uvloop-"))], wheels
    assert any(wheel.startswith("pyzmq-") and "-cp311-" in wheel for wheel in wheels), wheels


@pytest.mark.parametrize("tool", ["scaler_scheduler", "scaler_top"])
@pytest.mark.parametrize("python", ["pypy3", "python3.11"])
def test_help_from_another_directory(tool: str, python: str, tmp_path) -> None:
    pex = built(f"{tool}.pex", BUILD)
    result = subprocess.run(
        [interpreter(python), pex, "-h"], capture_output=True, text=True, timeout=START_TIMEOUT_SECONDS, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {tool}"), result.stdout


@pytest.mark.parametrize(
    ("python", "event_loop"),
    [("pypy3", "builtin"), ("python3.11", "uvloop")],
    ids=["pypy3", "python3.11-uvloop"],
)
def test_scheduler_pex_serves_cluster_and_client(python: str, event_loop: str, tmp_path) -> None:
    scheduler_pex = built("scaler_scheduler.pex", BUILD)
    top_pex = built("scaler_top.pex", BUILD)
    executable = interpreter(python)
    address, monitor_address = new_addresses(tmp_path)
    scheduler = CommandProcess(
        [executable, scheduler_pex, *scheduler_arguments(address, monitor_address), "--event-loop", event_loop],
        str(tmp_path / "scheduler.log"),
        cwd=str(tmp_path),
    )
    try:
        scheduler.wait_for_output(LISTENING, START_TIMEOUT_SECONDS)
        # The interpreter that serves is the one asked for (pex re-executes into its venv of that interpreter).
        assert os.path.basename(psutil.Process(scheduler.pid).exe()).startswith(EXECUTABLE_PREFIX[python])
        with running_cluster(address, tmp_path) as cluster:
            check_tasks_run_on_cluster(address, cluster)
            check_top_once([executable, top_pex, *top_once_arguments(monitor_address)], cwd=str(tmp_path))
    finally:
        assert scheduler.stop() == 0, scheduler.output()
    assert f"use event loop: {event_loop}" in scheduler.output()
    if python == "pypy3":  # started itself again, from the pex, with the GC nursery it asks for
        assert f"Scheduler: PyPy's GC nursery is {config.DEFAULT_PYPY_GC_NURSERY}" in scheduler.output()
