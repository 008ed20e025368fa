"""Starting workers: `scaler_cluster` (scaler.cluster.cli) and the `Cluster` Python API."""

from scaler.cluster.cluster import Cluster

__all__ = ["Cluster"]
