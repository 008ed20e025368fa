"""Micro benchmarks (pytest-benchmark), run on CPython and on PyPy: `python -m pytest bench/micro`.

They measure; they assert only correctness, never speed (pytest-benchmark's own comparison options are for that).
"""
