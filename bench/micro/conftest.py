"""Micro benchmarks (pytest-benchmark), run on CPython and on PyPy: `python -m pytest bench/micro`.

They measure; they assert only correctness, never speed (pytest-benchmark's own comparison options are for that).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # scaler.testing, when run from elsewhere
