"""A client's outgoing messages between the threads that queue them and the IO thread that sends them, and when the IO
thread must be woken for them.

Waking the IO thread costs the queuing thread a hand-off of the GIL (the IO thread takes it as soon as the wake byte
is written, runs its turn, and only then gives it back), so a loop of submit() calls that woke it for every few tasks
spent more on wake-ups than on its tasks. So a take that found messages means the IO thread looks again within
LOOK_AGAIN_MS on its own (io_thread.py caps its next poll so): while it is bound to, queuing wakes nobody, and a burst
of calls leaves in a few large frames instead of many small ones. A take that finds the queue empty ends that, so the
next message wakes the IO thread at once: a lone call (or one call per round trip) waits for no timer.

submit()'s tasks, already encoded by template, are kept apart as they come (`add_task`) and joined into one frame of
at most DEFAULT_TASKS_PER_FRAME tasks, as map() joins its own, when anything else is queued behind them or the IO
thread takes the queue. So a submit adds a bytes object to a list and nothing else: a wrapper object per task (as an
Encoded one) would be one more object for the garbage collector per task, collected during a loop of submits that
keeps every future alive, which made the collector a quarter of the client's CPU in the seed example.

Not thread safe by itself: the connection calls it with its lock held.
"""

from __future__ import annotations

from typing import Iterable, List

from scaler.client.objects import Outgoing
from scaler.config import DEFAULT_TASKS_PER_FRAME

LOOK_AGAIN_MS = 1  # after a take that found messages, the IO thread takes again within this (then sleeps longer)


class SendQueue:
    __slots__ = ("items", "_tasks", "_looking_again")

    def __init__(self) -> None:
        self.items: List[Outgoing] = []  # in order; the tasks in _tasks come after them
        self._tasks: List[bytes] = []  # encoded tasks queued last, not yet joined into a frame of items
        self._looking_again = False  # the IO thread took messages and will take again within LOOK_AGAIN_MS

    def add(self, messages: Iterable[Outgoing]) -> bool:
        """Queue messages; True if the caller must wake the IO thread (after releasing the lock)."""
        items = self.items
        idle = not items and not self._tasks and not self._looking_again
        if self._tasks:
            self._join_tasks()
        items.extend(messages)
        return idle and bool(items)

    def add_one(self, message: Outgoing) -> bool:
        """add([message]), without the list."""
        idle = not self.items and not self._tasks and not self._looking_again
        if self._tasks:
            self._join_tasks()
        self.items.append(message)
        return idle

    def add_task(self, encoded: bytes) -> bool:
        """add_one of one Task message already encoded (by its call's template)."""
        tasks = self._tasks
        idle = not tasks and not self.items and not self._looking_again
        tasks.append(encoded)
        if len(tasks) >= DEFAULT_TASKS_PER_FRAME:
            self._join_tasks()
        return idle

    def take(self) -> List[Outgoing]:
        """Everything queued, for the IO thread; if anything, it promises to take again within LOOK_AGAIN_MS."""
        if self._tasks:
            self._join_tasks()
        items = self.items
        self.items = []
        self._looking_again = bool(items)
        return items

    def replace(self, items: List[Outgoing]) -> None:
        """The queue becomes `items` (a resubmission, on the IO thread, which takes them on its next turn)."""
        self.items = items
        self._tasks = []

    def _join_tasks(self) -> None:
        """The tasks queued last become one item: a frame of their own (io_thread.py sends bytes as they are)."""
        self.items.append(b"".join(self._tasks))
        self._tasks = []
