"""Scaler against its peers (Dask distributed) on the same workloads."""
