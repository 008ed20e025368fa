"""What a running task can know about itself: the processor sets this around each call.

A Client used inside a task reads it to mark the tasks it submits as children of the running one (nested tasks).
"""

from __future__ import annotations

from typing import Optional

current_task_id: Optional[bytes] = None
