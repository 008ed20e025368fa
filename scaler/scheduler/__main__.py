"""Internal: `python -m scaler.scheduler` (and `pypy3 -m scaler.scheduler`) runs scaler_scheduler."""

from scaler.scheduler.cli import main

main()
