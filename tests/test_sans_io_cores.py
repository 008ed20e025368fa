"""The sans-IO cores load no I/O library: importing one loads neither zmq nor psutil (docs/contributing.md, "Cores and
shells"). Each core is imported in a fresh interpreter, since the test process has loaded both long before; and again
in PyPy, where the scheduler runs. Add a core's module to CORES as it is written: one that does not exist yet is
skipped, saying so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent

CORES = ["scaler.scheduler.core", "scaler.worker.core", "scaler.client.core"]
IO_LIBRARIES = ["zmq", "psutil"]

# PyPy as tests/perf_e2e/test_pypy_scheduler.py finds it: $SCALER_SCHEDULER_PYTHON, else the .venv-pypy of
# scripts/test.sh
_PYPY = os.environ.get("SCALER_SCHEDULER_PYTHON") or str(ROOT / ".venv-pypy" / "bin" / "python")

# Run in ROOT, whose scaler comes first on sys.path (`python -c` puts the current directory there): the tree tested
_IMPORT_CORE = """
import importlib, importlib.util, json, sys
name, libraries = sys.argv[1], sys.argv[2:]
try:
    found = importlib.util.find_spec(name) is not None
except ModuleNotFoundError:  # a package on the way is missing too
    found = False
if not found:
    print(json.dumps(None))
    raise SystemExit(0)
module = importlib.import_module(name)
loaded = sorted({loaded.partition(".")[0] for loaded in sys.modules} & set(libraries))
print(json.dumps({"file": module.__file__, "loaded": loaded}))
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("python", [pytest.param(sys.executable, id="this-python"), pytest.param(_PYPY, id="pypy")])
@pytest.mark.parametrize("core", CORES)
def test_importing_a_core_loads_no_io_library(core: str, python: str) -> None:
    if not os.path.exists(python):
        pytest.skip(f"no PyPy at {python} (bash scripts/test.sh builds .venv-pypy; or set SCALER_SCHEDULER_PYTHON)")
    done = subprocess.run(
        [python, "-c", _IMPORT_CORE, core, *IO_LIBRARIES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, f"importing {core} failed:\n{done.stderr}"
    report: Optional[dict] = json.loads(done.stdout.splitlines()[-1])
    if report is None:
        pytest.skip(f"{core} does not exist yet: nothing to check until it is written")
    assert Path(report["file"]).resolve().is_relative_to(ROOT), f"imported {report['file']}, not this tree's"
    assert report["loaded"] == [], (
        f"importing {core} loads {', '.join(report['loaded'])}: a core imports no I/O library; the shells and CLIs do "
        f"I/O (docs/contributing.md). `python -X importtime -c 'import {core}'` shows what imports what."
    )
