"""Internal: task policies a client view applies to every task it creates: `client.options(resources=..., priority=...,
retries=..., timeout_seconds=..., profiling=...)`.

Checked once, when the view is made, so that a bad value raises at the call that gave it (TypeError for a wrong type,
ValueError for a wrong value) and the tasks themselves only copy ready-made fields. DEFAULT_OPTIONS, what a plain
Client uses, adds nothing to a Task: its encoding stays what it was before task policies existed.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from scaler.protocol import Resource, Task

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
UNSET: Any = object()  # an option not given to options(): the view keeps what it had


class TaskOptions:
    """Resources, priority, retries and timeout of the tasks of a client view, in their Task field form.

    `key` is None for the defaults and a tuple of the fields otherwise: what caches of encoded task shapes use."""

    __slots__ = ("resources", "priority", "retries", "timeout_ms", "profiling", "actor_id", "creates_actor", "key")

    def __init__(
        self,
        resources: Tuple[Tuple[str, float], ...] = (),
        priority: int = 0,
        retries: int = 0,
        timeout_ms: int = 0,
        profiling: Optional[bool] = None,
        actor_id: bytes = b"",
        creates_actor: bool = False,
    ) -> None:
        self.resources = resources  # sorted by name, amounts > 0
        self.priority = priority
        self.retries = retries
        self.timeout_ms = timeout_ms
        self.profiling = profiling  # None: the call's profiling keyword, or the client's
        # not options() keywords: the tasks of an actor (client/actors.py) carry its id, one of them creates it
        self.actor_id = actor_id
        self.creates_actor = creates_actor
        policies = (resources, priority, retries, timeout_ms, actor_id, creates_actor)
        self.key: Optional[tuple] = None if policies == ((), 0, 0, 0, b"", False) else policies

    @property
    def timeout_seconds(self) -> Optional[float]:
        return self.timeout_ms / 1000 if self.timeout_ms else None

    def as_keywords(self) -> Dict[str, Any]:
        """What options() would be given to make these options."""
        return {
            "resources": dict(self.resources) or None,
            "priority": self.priority,
            "retries": self.retries,
            "timeout_seconds": self.timeout_seconds,
            "profiling": self.profiling,
        }

    def refined(self, **changes: Any) -> TaskOptions:
        """These options with those given (options() keywords; UNSET: no change) replaced, each checked."""
        unknown = set(changes) - set(_CHECKS)
        if unknown:
            raise TypeError(f"unknown task options: {', '.join(sorted(unknown))} (known: {', '.join(_CHECKS)})")
        fields: Dict[str, Any] = {
            field: getattr(self, field) if changes.get(keyword, UNSET) is UNSET else check(changes[keyword])
            for keyword, (field, check) in _CHECKS.items()
        }
        return TaskOptions(**fields)

    def for_actor(self, actor_id: bytes, creates: bool) -> TaskOptions:
        """These options for the tasks of an actor: its creation (placed by these resources) or its method calls.
        Actor tasks never run twice, so they have no retries; a timeout would kill the actor's process (its state),
        so it is refused."""
        if self.timeout_ms:
            raise ValueError(
                "actors take no timeout_seconds: stopping a method call means killing the actor's process and its "
                "state; use a client view without timeout_seconds (client.options(timeout_seconds=None))"
            )
        return TaskOptions(self.resources, self.priority, 0, 0, self.profiling, actor_id, creates)

    def apply(self, task: Task) -> None:
        """Set the policy fields of a Task message (only called for options other than the defaults)."""
        task.resources = self.resource_messages()
        task.priority = self.priority
        task.retries = self.retries
        task.timeout_ms = self.timeout_ms
        task.actor_id = self.actor_id
        task.creates_actor = self.creates_actor

    def resource_messages(self) -> List[Resource]:
        return [Resource(name=name, amount=amount) for name, amount in self.resources]

    def describe(self) -> str:
        parts = []
        if self.resources:
            parts.append("resources=" + ",".join(f"{name}={amount:g}" for name, amount in self.resources))
        if self.priority:
            parts.append(f"priority={self.priority}")
        if self.retries:
            parts.append(f"retries={self.retries}")
        if self.timeout_ms:
            parts.append(f"timeout_seconds={self.timeout_ms / 1000:g}")
        if self.profiling is not None:
            parts.append(f"profiling={self.profiling}")
        return " ".join(parts)


DEFAULT_OPTIONS = TaskOptions()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    """math.isfinite, False for an int too large for a float (which isfinite raises OverflowError on)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_resources(resources: Any) -> Tuple[Tuple[str, float], ...]:
    """A dict of resource name -> amount needed, as sorted (name, amount) pairs; amounts of 0 need nothing and are
    dropped."""
    if resources is None:
        return ()
    if not isinstance(resources, dict):
        raise TypeError(f"resources must be a dict of name -> amount like {{'gpu': 1}}, got {resources!r}")
    pairs = []
    for name, amount in resources.items():
        if not isinstance(name, str):
            raise TypeError(f"resource names must be str, got {name!r}")
        if not _is_number(amount):
            raise TypeError(f"resource {name!r}: the amount must be an int or a float, got {amount!r}")
        if not name:
            raise ValueError("resource names must not be empty")
        if not _is_finite(amount) or amount < 0:
            raise ValueError(f"resource {name!r}: the amount must be a finite number >= 0, got {amount!r}")
        if amount > 0:
            pairs.append((name, float(amount)))
    return tuple(sorted(pairs))


def check_priority(priority: Any) -> int:
    if not _is_int(priority):
        raise TypeError(f"priority must be an int (higher runs first), got {priority!r}")
    if not INT32_MIN <= priority <= INT32_MAX:
        raise ValueError(f"priority must be within [{INT32_MIN}, {INT32_MAX}], got {priority!r}")
    return int(priority)


def check_retries(retries: Any) -> int:
    if not _is_int(retries):
        raise TypeError(f"retries must be an int >= 0, got {retries!r}")
    if not 0 <= retries <= UINT32_MAX:
        raise ValueError(f"retries must be an int >= 0 (how often a failed task runs again), got {retries!r}")
    return int(retries)


def check_timeout(timeout_seconds: Any) -> int:
    """Seconds (None: no timeout) as the Task's timeoutMs, rounded up to a whole millisecond."""
    if timeout_seconds is None:
        return 0
    if not _is_number(timeout_seconds):
        raise TypeError(f"timeout_seconds must be a number of seconds or None, got {timeout_seconds!r}")
    if not _is_finite(timeout_seconds) or timeout_seconds <= 0:
        raise ValueError(f"timeout_seconds must be a positive number of seconds (or None), got {timeout_seconds!r}")
    timeout_ms = math.ceil(timeout_seconds * 1000)
    if timeout_ms > UINT32_MAX:
        raise ValueError(f"timeout_seconds must be at most {UINT32_MAX / 1000:g}, got {timeout_seconds!r}")
    return timeout_ms


def check_profiling(profiling: Any) -> bool:
    if not isinstance(profiling, bool):
        raise TypeError(f"profiling must be a bool, got {profiling!r}")
    return profiling


def check_optional_profiling(profiling: Any) -> Optional[bool]:
    return None if profiling is None else check_profiling(profiling)


# options() keyword -> (TaskOptions field, the check that turns a value into it)
_CHECKS = {
    "resources": ("resources", check_resources),
    "priority": ("priority", check_priority),
    "retries": ("retries", check_retries),
    "timeout_seconds": ("timeout_ms", check_timeout),
    "profiling": ("profiling", check_optional_profiling),
}
