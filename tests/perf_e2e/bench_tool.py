"""Runs a benchmark as the tests of bench/ do: from the repository's root, in a process group of its own (whatever it
started and left running is found there, and stopped if it hangs), with a TMPDIR of the test's, which must be empty
again once it is done; then every process of its group must be gone."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import List

from scaler.testing.processes import ROOT, stop_process_group, wait_for


def run_bench(command: List[str], scratch: Path, timeout: float = 120) -> str:
    """`command`'s output, once it exited 0, left no process running and no file in `scratch` (its TMPDIR)."""
    tool = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    try:
        output, _ = tool.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_process_group(tool)
        raise
    assert tool.returncode == 0, output
    wait_for(lambda: not _group_alive(tool.pid), 15, "every process of the run to be gone")
    assert list(scratch.iterdir()) == []
    return output


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True
