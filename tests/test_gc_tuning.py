"""scaler.gc_tuning in a process of its own (it changes the collector of the whole process: not the test runner's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scaler.testing.processes import ROOT

pytestmark = pytest.mark.timeout(60)

_PROGRAM = """
import gc, sys
from scaler.gc_tuning import YOUNG_COLLECTION_THRESHOLD, tune_for_a_loop
before = gc.get_threshold() if hasattr(gc, "get_threshold") else None
tune_for_a_loop()
if hasattr(gc, "freeze"):
    assert gc.get_freeze_count() > 1000, gc.get_freeze_count()  # the modules imported so far
    assert gc.get_threshold() == (YOUNG_COLLECTION_THRESHOLD, *before[1:]), (before, gc.get_threshold())
print("ok", sys.implementation.name)
"""


def test_startup_objects_are_frozen_and_young_collections_come_less_often() -> None:
    result = subprocess.run([sys.executable, "-c", _PROGRAM], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok", sys.implementation.name]
