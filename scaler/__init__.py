"""Scaler: an efficient, lightweight and reliable distributed computation engine.

The public API is what this package exports (`__all__`): `from scaler import Client, SchedulerClusterCombo`, the
errors a user catches (`from scaler import WorkerDiedError`), `Cluster` to start workers from Python. Beside it,
`scaler.joblib` (the joblib backend), `scaler.protocol` (the wire protocol, for other implementations),
`scaler.utility.exceptions` (the seed system's error names) and `scaler.compat.ray` (Ray's core API, with Ray's error
names in `scaler.compat.ray.exceptions`) are public; every other module says in its docstring that it is internal,
and may change in any release.

The names load on first use (PEP 562), so that the scheduler, which imports this package first, never pulls in the
client's dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "1.0.0"
__all__ = [
    "Client",
    "SchedulerClusterCombo",
    "Cluster",
    "Serializer",
    "ScalerFuture",
    "ObjectReference",
    "ProfilingInfo",
    "ActorHandle",
    "progress",
    # errors (scaler.errors)
    "ScalerError",
    "ActorAnswerLostError",
    "ActorLostError",
    "AuthenticationError",
    "DisconnectedError",
    "FrameTooLargeError",
    "MemoryLimitError",
    "MissingObjectError",
    "ProcessorDiedError",
    "ProfilingInfoError",
    "ProtocolVersionError",
    "RemoteTraceback",
    "ResultSerializationError",
    "SchedulerGoneError",
    "TaskNotFoundError",
    "TaskPoliciesUnsupportedError",
    "TaskRefusedError",
    "TaskTimeoutError",
    "WorkerDiedError",
    "__version__",
]

_ERRORS = (
    "ScalerError",
    "ActorAnswerLostError",
    "ActorLostError",
    "AuthenticationError",
    "DisconnectedError",
    "FrameTooLargeError",
    "MemoryLimitError",
    "MissingObjectError",
    "ProcessorDiedError",
    "ProfilingInfoError",
    "ProtocolVersionError",
    "RemoteTraceback",
    "ResultSerializationError",
    "SchedulerGoneError",
    "TaskNotFoundError",
    "TaskPoliciesUnsupportedError",
    "TaskRefusedError",
    "TaskTimeoutError",
    "WorkerDiedError",
)
_LAZY = {
    "Client": "scaler.client",
    "ScalerFuture": "scaler.client",
    "Serializer": "scaler.client",
    "ObjectReference": "scaler.client",
    "ProfilingInfo": "scaler.client",
    "ActorHandle": "scaler.client",
    "progress": "scaler.client.progress",
    "SchedulerClusterCombo": "scaler.cluster.combo",
    "Cluster": "scaler.cluster",
    **{name: "scaler.errors" for name in _ERRORS},
}

if TYPE_CHECKING:  # what the names are, for type checkers and IDEs; at run time they load on first use
    from scaler.client import ActorHandle, Client, ObjectReference, ProfilingInfo, ScalerFuture, Serializer
    from scaler.client.progress import progress
    from scaler.cluster import Cluster
    from scaler.cluster.combo import SchedulerClusterCombo
    from scaler.errors import (
        ActorAnswerLostError,
        ActorLostError,
        AuthenticationError,
        DisconnectedError,
        FrameTooLargeError,
        MemoryLimitError,
        MissingObjectError,
        ProcessorDiedError,
        ProfilingInfoError,
        ProtocolVersionError,
        RemoteTraceback,
        ResultSerializationError,
        ScalerError,
        SchedulerGoneError,
        TaskNotFoundError,
        TaskPoliciesUnsupportedError,
        TaskRefusedError,
        TaskTimeoutError,
        WorkerDiedError,
    )


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
