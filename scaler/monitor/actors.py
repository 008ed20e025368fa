"""Internal: what a monitor shows of the actors in a SchedulerStatus, formatted once for scaler_top and scaler_ui.

The scheduler lists its live actors (SchedulerStatus.actors): each with its class, the worker hosting it (none while
it waits for a free actor slot), its calls not answered yet and those answered since it was created.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Sequence, Tuple

from scaler.monitor.model import format_count, format_rate
from scaler.protocol import ActorStatus

SHORT_ID_DIGITS = 8
WAITING_TEXT = "waiting for a slot"  # in the worker column of an actor no worker hosts yet

# The columns of an actor table, in order, each with the width of the widest value expected; "actor" (its class) and
# "worker" take what is left
ACTOR_COLUMNS: Tuple[Tuple[str, int], ...] = (
    ("actor", 0),
    ("id", SHORT_ID_DIGITS),
    ("pending", 7),
    ("calls", 5),
    ("calls/s", 7),
    ("worker", 0),
)


class ActorRow(NamedTuple):
    """One actor, every cell as text, in ACTOR_COLUMNS order."""

    name: str
    short_id: str
    pending: str
    calls: str
    calls_per_second: str
    worker: str


def short_actor_id(actor_id: bytes) -> str:
    """Enough of the id's hex to tell actors apart, and a part of the full hex that errors, logs and handles print, so
    it can be searched for. A client's ids share its random prefix and end in a little-endian counter: the last digits
    once its zero high bytes are dropped hold both the counter and some of the prefix."""
    significant = actor_id.rstrip(b"\0") or actor_id
    return significant.hex()[-SHORT_ID_DIGITS:]


def actor_rows(actors: Sequence[ActorStatus], calls_per_second: Dict[bytes, float]) -> List[ActorRow]:
    """Rows in a steady order, by class then by worker, so that a row stays where it is from one status to the next."""
    ordered = sorted(actors, key=lambda actor: (actor.name, actor.worker, actor.actor_id))
    return [
        ActorRow(
            name=actor.name,
            short_id=short_actor_id(actor.actor_id),
            pending=format_count(actor.pending),
            calls=format_count(actor.calls),
            calls_per_second=format_rate(calls_per_second.get(actor.actor_id)),
            worker=actor.worker or WAITING_TEXT,
        )
        for actor in ordered
    ]


def actors_total(actors: Sequence[ActorStatus]) -> str:
    """The line above an actor table: `Total 3 actor(s), 1 waiting for a slot`."""
    waiting = sum(1 for actor in actors if not actor.worker)
    return f"Total {len(actors)} actor(s)" + (f", {waiting} {WAITING_TEXT}" if waiting else "")
