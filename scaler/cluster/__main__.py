"""Internal: `python -m scaler.cluster`, the same as `scaler_cluster`."""

from scaler.cluster.cli import main

main()
