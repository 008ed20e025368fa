"""Internal: `python -m scaler.monitor.ui`, the same as `scaler_ui`."""

from scaler.monitor.ui.app import main

main()
