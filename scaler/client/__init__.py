"""The client library: submit tasks, maps, graphs and objects to a Scaler scheduler.

The names load on first use (PEP 562), so that importing the client's sans-IO core (`scaler.client.core`) loads no
socket library."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["ActorHandle", "Client", "ObjectReference", "ProfilingInfo", "ScalerFuture", "Serializer"]

_LAZY = {
    "ActorHandle": "scaler.client.actors",
    "Client": "scaler.client.client",
    "ObjectReference": "scaler.client.objects",
    "ProfilingInfo": "scaler.client.future",
    "ScalerFuture": "scaler.client.future",
    "Serializer": "scaler.serializer",
}

if TYPE_CHECKING:  # what the names are, for type checkers and IDEs; at run time they load on first use
    from scaler.client.actors import ActorHandle
    from scaler.client.client import Client
    from scaler.client.future import ProfilingInfo, ScalerFuture
    from scaler.client.objects import ObjectReference
    from scaler.serializer import Serializer


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'scaler.client' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value
