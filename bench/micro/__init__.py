"""Micro benchmarks (pytest-benchmark) of the codec and the scheduler core."""
