"""Internal: what a running task can know about itself: the processor sets this around each call.

A module of its own, outside client/ and worker/, because both use it and neither should import the other.

A Client used inside a task reads it to mark the tasks it submits as children of the running one (nested tasks), and
its futures tell the processor when the task is about to wait on one of them.
"""

from __future__ import annotations

from typing import Callable, Optional

current_task_id: Optional[bytes] = None

# Set by the processor: a future about to block inside a task calls it, so that the worker parks this processor and
# runs its other tasks (the children the task waits for among them) on another one. See scaler/worker/core.py.
on_block: Optional[Callable[[], None]] = None
