"""Internal: what an actor's process runs: its constructor, then its methods, as the functions of ordinary tasks.

A module of its own, outside client/ and worker/: the client serializes these callables (the function of an actor
task) and the worker's processor calls them like any task's function, so the processor knows nothing of actors. The
worker runs an actor's tasks only in the process it started for that actor (worker/core.py), one at a time, in the
order the scheduler sent them; the instance lives in this module's `_instances` there.
"""

from __future__ import annotations

from typing import Any, Dict

from scaler import task_context
from scaler.errors import ScalerError

_instances: Dict[bytes, Any] = {}  # actor id -> its instance, in the actor's process


class ActorConstructor:
    """The function of the task that creates actor `actor_id`: makes the instance and keeps it in this process."""

    __slots__ = ("actor_id", "cls", "__qualname__")

    def __init__(self, actor_id: bytes, cls: type) -> None:
        self.actor_id = actor_id
        self.cls = cls
        self.__qualname__ = f"{getattr(cls, '__qualname__', type(cls).__name__)}.__init__"  # the monitor's name

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        # An actor's process runs its calls in order and nothing else: a method waiting on a future (a nested task's)
        # just waits; parking the process (as a task's is, to run other tasks meanwhile) would have nothing to run.
        task_context.on_block = None
        _instances[self.actor_id] = self.cls(*args, **kwargs)

    def __reduce__(self) -> Any:
        return ActorConstructor, (self.actor_id, self.cls)


class ActorMethod:
    """The function of a task that calls method `name` of actor `actor_id`."""

    __slots__ = ("actor_id", "name", "__qualname__")

    def __init__(self, actor_id: bytes, name: str, class_name: str = "actor") -> None:
        self.actor_id = actor_id
        self.name = name
        self.__qualname__ = f"{class_name}.{name}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        instance = _instances.get(self.actor_id)
        if instance is None:  # cannot happen unless a worker routes a call elsewhere: say so plainly
            raise ScalerError(f"actor {self.actor_id.hex()} does not live in this process")
        return getattr(instance, self.name)(*args, **kwargs)

    def __reduce__(self) -> Any:
        return ActorMethod, (self.actor_id, self.name, self.__qualname__.rsplit(".", 1)[0])
