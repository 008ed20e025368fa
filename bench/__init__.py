"""Scaler's benchmarks, grouped by what they measure (bench/README.md says which script answers which question).

Run each from the repository's root as a module, `python -m bench.GROUP.SCRIPT`, so that the scripts import each
other and bench.localcluster without any `sys.path` edit.
"""
