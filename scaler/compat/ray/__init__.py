"""Ray's core API on Scaler: `import scaler.compat.ray as ray`, and code written for Ray runs unchanged.

`init`, `shutdown`, `is_initialized`, `remote` (functions and classes: actors), `get`, `put`, `wait`, `cancel`, `kill`,
`method`, `ObjectRef`, and Ray's errors in `scaler.compat.ray.exceptions`. Ray's options map onto Scaler's task
policies; the docs' "Coming from Ray" page says how, and what is not covered.
"""

from __future__ import annotations

from typing import Any

from scaler.compat.ray import exceptions
from scaler.compat.ray.actors import ActorClass, ActorHandle, kill, method
from scaler.compat.ray.api import cancel, get, put, wait
from scaler.compat.ray.refs import ObjectRef
from scaler.compat.ray.remote_function import RemoteFunction
from scaler.compat.ray.session import RayContext, init, is_initialized, shutdown

__all__ = [
    "init",
    "shutdown",
    "is_initialized",
    "remote",
    "get",
    "put",
    "wait",
    "cancel",
    "kill",
    "method",
    "ObjectRef",
    "RemoteFunction",
    "ActorClass",
    "ActorHandle",
    "RayContext",
    "exceptions",
]


def remote(*args: Any, **options: Any) -> Any:
    """`@ray.remote` or `@ray.remote(num_cpus=..., ...)` on a function (a RemoteFunction) or a class (an
    ActorClass)."""
    if len(args) == 1 and not options and callable(args[0]):
        return _make_remote(args[0], {})
    if args:
        raise TypeError("ray.remote takes a function or a class, or only keyword options: @ray.remote(num_cpus=1)")
    return lambda target: _make_remote(target, options)


def _make_remote(target: Any, options: Any) -> Any:
    if isinstance(target, type):
        return ActorClass(target, options)
    return RemoteFunction(target, options)
