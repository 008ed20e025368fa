"""Internal: what a running task can know about itself: the processor sets this around each call.

A module of its own, outside client/ and worker/, because both use it and neither should import the other.

A Client used inside a task reads it to mark the tasks it submits as children of the running one (nested tasks), and
its futures tell the processor when the task is about to wait on one of them. The connection such a client opens
ends with the task (`at_task_end`).
"""

from __future__ import annotations

import logging
from typing import Callable, List, Optional

current_task_id: Optional[bytes] = None

# Set by the processor: a future about to block inside a task calls it, so that the worker parks this processor and
# runs its other tasks (the children the task waits for among them) on another one. See scaler/worker/core.py.
on_block: Optional[Callable[[], None]] = None

# What must end with the running task: the connections opened by the clients it received (nested tasks), so that each
# says goodbye to the scheduler when the task ends. The processor calls these and empties the list after each task.
at_task_end: List[Callable[[], None]] = []


def end_task() -> None:
    """Run (and forget) what the task that just ended left in `at_task_end`; a failure of one does not stop the rest."""
    closers = at_task_end[:]
    at_task_end.clear()
    for close in closers:
        try:
            close()
        except Exception:  # the task's result matters more than a goodbye that did not leave
            logging.getLogger(__name__).warning("closing what a task opened failed", exc_info=True)
