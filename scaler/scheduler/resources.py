"""Internal: resources as the scheduler compares them: what a worker offers (Hello.resources) and what a task needs
(Task.resources), normalized once when they arrive so that placing a task never compares names."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

# (name, amount) pairs sorted by name, amounts > 0: what a worker offers or what a task needs. () is "nothing".
Resources = Tuple[Tuple[str, float], ...]
# A worker's memory limit (Hello.memoryLimit), offered as a resource of this name; a worker without a limit has no
# such entry and meets any requirement of it (scaler/scheduler/memory.py).
MEMORY = "scaler:memory"


def normalize_resources(resources: list) -> Tuple[Optional[Resources], str]:
    """Resource list off the wire -> (sorted pairs without zero amounts, "") or (None, why it is refused)."""
    pairs: Dict[str, float] = {}
    for resource in resources:
        name = resource.name
        amount = resource.amount
        if not name:
            return None, "a resource needs a name"
        if name in pairs:
            return None, f"resource {name!r} given twice"
        if not (0.0 <= amount < float("inf")):  # NaN fails too
            return None, f"resource {name!r}: amount {amount!r} is not a finite number >= 0"
        pairs[name] = amount
    return tuple(sorted((name, amount) for name, amount in pairs.items() if amount > 0.0)), ""


def describe(resources: Resources) -> str:
    return ",".join(f"{name}={amount:g}" for name, amount in resources) or "nothing"


def satisfies(offer: Resources, requirement: Resources) -> bool:
    offered = dict(offer)
    return all(
        offered.get(name, 0.0) >= amount or (name == MEMORY and name not in offered) for name, amount in requirement
    )
