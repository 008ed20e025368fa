"""The PyPy scheduler's JIT warm-up sends what real peers send: after it, a real client connecting and running its
first graph makes PyPy throw away none of the loops it compiled (bench/jit/jit_phases.py reads PYPYLOG's invalidations).

Once, the warm-up's client put no object: a real client's first ObjectPut changed what PyPy had guessed of the core's
objects, and the first graph paid for tracing the core's hottest loops again (docs/performance.md, "The first graph's
retraced loops"). Counts of what was compiled and thrown away, not timings.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from scaler.testing.processes import ROOT, stop_process_group
from tests.perf_e2e.test_pypy_scheduler import SCHEDULER_PYTHON, require_scheduler_python

pytestmark = pytest.mark.timeout(210)  # the tool's 150 s, then 20 s to stop it


def test_no_compiled_loop_is_thrown_away_once_a_real_client_comes(tmp_path) -> None:
    require_scheduler_python()
    figures = tmp_path / "phases.json"
    command = [sys.executable, "-m", "bench.jit.jit_phases", "--scheduler-python", SCHEDULER_PYTHON]
    command += ["--trees", "1", "--leaves", "2000", "--pypylog", str(tmp_path), "--json", str(figures)]
    # its own process group: if it hangs, the cluster it started goes with it (SIGTERM first: it cleans up then)
    tool = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=ROOT
    )  # fmt: skip
    try:
        output, _ = tool.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        stop_process_group(tool)
        raise
    assert tool.returncode == 0, output
    phases = json.loads(figures.read_text())
    assert phases["phases"][:3] == ["start", "client, 64 leaves", "tree 1"]

    # the hook and the log were read: the warm-up compiled the core's loop over a frame's messages, and PyPy logged
    # what it threw away before serving (while modules were imported and the warm-up's objects first changed)
    assert any(
        phase == "start" and kind == "loop" and where.startswith("receive core.py:")
        for phase, kind, where in phases["compiled"]
    ), phases["compiled"]
    assert any(phase == "start" and loops for phase, _, loops in phases["invalidations"])

    served = ("client, 64 leaves", "tree 1")
    thrown_away = [entry for entry in phases["invalidations"] if entry[0] in served and entry[2]]  # -1: unread count
    assert not thrown_away, output
    # a loop the warm-up compiled and the client's first graph compiled again (as receive's was, once)
    warmed = {where for phase, kind, where in phases["compiled"] if phase == "start" and kind == "loop"}
    traced_again = [entry for entry in phases["compiled"] if entry[0] in served and entry[1] == "loop"]
    assert not [entry for entry in traced_again if entry[2] in warmed], output
