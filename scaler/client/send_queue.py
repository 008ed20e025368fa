"""Internal: a client's outgoing messages between the threads that queue them and the IO thread that sends them, and
when the IO thread must be woken for them.

Waking the IO thread costs the queuing thread a hand-off of the GIL (the IO thread takes it as soon as the wake byte
is written, runs its turn, and only then gives it back), so a loop of submit() calls that woke it for every few tasks
spent more on wake-ups than on its tasks. So a take that found messages means the IO thread looks again within
LOOK_AGAIN_MS on its own (io_thread.py caps its next poll so): while it is bound to, queuing wakes nobody, and a burst
of calls leaves in a few large frames instead of many small ones. A take that finds the queue empty ends that, so the
next message wakes the IO thread at once: a lone call (or one call per round trip) waits for no timer.

submit()'s tasks, already encoded by template, are queued as they come into a run: a list of their bytes, one item of
the queue, which the IO thread joins into frames of DEFAULT_TASKS_PER_FRAME tasks (as map() joins its own) after taking
it, outside the lock. So a submit appends a bytes object to a list and nothing else: a wrapper object per task (as an
Encoded one) was one more object for the garbage collector per task, during a loop of submits that keeps every future
alive (the collector was a quarter of the client's CPU in the seed example).

Not thread safe by itself: the connection calls it with its lock held.
"""

from __future__ import annotations

from typing import Iterable, List, Optional

from scaler.client.objects import Outgoing

LOOK_AGAIN_MS = 1  # after a take that found messages, the IO thread takes again within this (then sleeps longer)


class SendQueue:
    __slots__ = ("items", "_run", "_looking_again")

    def __init__(self) -> None:
        self.items: List[Outgoing] = []
        self._run: Optional[List[bytes]] = None  # the run of encoded tasks last in items, while nothing follows it
        self._looking_again = False  # the IO thread took messages and will take again within LOOK_AGAIN_MS

    def add(self, messages: Iterable[Outgoing]) -> bool:
        """Queue messages; True if the caller must wake the IO thread (after releasing the lock)."""
        items = self.items
        idle = not items and not self._looking_again
        self._run = None
        items.extend(messages)
        return idle and bool(items)

    def add_one(self, message: Outgoing) -> bool:
        """add([message]), without the list."""
        items = self.items
        self._run = None
        items.append(message)
        return len(items) == 1 and not self._looking_again

    def add_task(self, encoded: bytes) -> bool:
        """add_one of one Task message already encoded (by its call's template), to the run of such tasks."""
        run = self._run
        if run is not None:
            run.append(encoded)
            return False  # the run is queued already: the IO thread was woken for it, or looks again soon
        run = self._run = [encoded]
        items = self.items
        items.append(run)
        return len(items) == 1 and not self._looking_again

    def take(self) -> List[Outgoing]:
        """Everything queued, for the IO thread; if anything, it promises to take again within LOOK_AGAIN_MS."""
        items = self.items
        self.items = []
        self._run = None
        self._looking_again = bool(items)
        return items

    def replace(self, items: List[Outgoing]) -> None:
        """The queue becomes `items` (a resubmission, on the IO thread, which takes them on its next turn)."""
        self.items = items
        self._run = None
