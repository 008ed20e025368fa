"""Latency: the round trip of one small task, and where its time goes."""
