"""The main job (scripts/demo.py, what `bash scripts/demo.sh` runs) does real work and says so in a few lines."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

from scaler.testing.processes import ROOT


def test_the_demo_shows_a_progress_bar_and_a_short_summary() -> None:
    completed = subprocess.run(
        [sys.executable, "scripts/demo.py", "--tasks", "400", "--points", "500", "--workers", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT},
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 3, completed.stdout  # the start line and the summary: the cluster's logs stay out of the way
    assert re.fullmatch(r"400 tasks in [\d.]+ s: [\d,]+ tasks/s on 2 workers", lines[1]), lines[1]
    estimate = float(re.fullmatch(r"200,000 random points: pi ~ ([\d.]+) \(off by [\d.]+\)", lines[2]).group(1))
    assert abs(estimate - math.pi) < 0.05  # 200,000 points: the error is about 0.004
    assert "400/400" in completed.stderr  # the bar, drawn on stderr, reached the end
    assert "[INFO]" not in completed.stdout + completed.stderr
