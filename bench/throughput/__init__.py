"""Throughput: tasks a second, and the CPU each part of Scaler spends per task."""
