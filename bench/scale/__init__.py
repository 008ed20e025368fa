"""Scale: many workers and clients, real or simulated, and what idle ones cost."""
