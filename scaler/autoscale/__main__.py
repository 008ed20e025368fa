"""Internal: `python -m scaler.autoscale`, the same as `scaler_autoscale`."""

from scaler.autoscale.cli import main

main()
