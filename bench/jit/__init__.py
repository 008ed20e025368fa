"""PyPy's JIT: what it compiles in the scheduler, and when."""
