"""Scaler: an efficient, lightweight and reliable distributed computation engine.

`from scaler import Client, SchedulerClusterCombo, Serializer`. The names load on first use (PEP 562), so that the
scheduler, which imports this package first, never pulls in the client's dependencies.
"""

from __future__ import annotations

from typing import Any

__version__ = "1.0.0"
__all__ = [
    "Client",
    "SchedulerClusterCombo",
    "Serializer",
    "ScalerFuture",
    "ObjectReference",
    "progress",
    "__version__",
]

_LAZY = {
    "Client": "scaler.client",
    "ScalerFuture": "scaler.client",
    "Serializer": "scaler.client",
    "ObjectReference": "scaler.client",
    "progress": "scaler.client.progress",
    "SchedulerClusterCombo": "scaler.cluster.combo",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'scaler' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(__all__)
