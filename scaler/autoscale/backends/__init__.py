"""Internal: the autoscaler's backends, one module each (see base.py)."""
