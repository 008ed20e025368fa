"""Memory: what the scheduler and the client keep, and whether it stays flat over time."""
