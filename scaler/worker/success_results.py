"""Internal: the encoding of the message a worker sends most, a short task's TaskResult, batched for the outbox.

No sockets here: the worker's sans-IO core (core.py) gathers results with it; the agent's Outbox (outbox.py) sends them.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from scaler.protocol import Encoded, TaskResult, TaskStatus, encode, make_template

_SUCCESS = TaskStatus.success
_RESULT_SHAPES = 256  # (task id, payload) lengths remembered; past that the cache starts over
_NOT_MADE: Any = object()


class SuccessResults:
    """TaskResult{success, payload} of short tasks, encoded by template (scaler/fastpath/templates.py) and gathered into
    one Encoded run of messages until taken: per result, its id and payload between the template's constant pieces
    in a list joined once per batch (a processor's report), instead of a message object and its encoding; and per
    batch one entry for the outbox and the frame encoder, not one per result. This is the message a worker sends once
    per task."""

    def __init__(self) -> None:
        # (task id, payload) lengths -> the template's three constant pieces around them, or None: encoded in full
        self._pieces: Dict[tuple, Optional[Tuple[bytes, ...]]] = {}  # the three pieces, when not None
        self._parts: List[bytes] = []
        self._payload_bytes = 0
        self.count = 0  # results added since the last take

    def add(self, task_id: bytes, payload: bytes) -> None:
        key = (len(task_id), len(payload))
        pieces = self._pieces.get(key, _NOT_MADE)
        if pieces is _NOT_MADE:
            if len(self._pieces) >= _RESULT_SHAPES:
                self._pieces = {}
            template = make_template(_success, key)
            # Both values in place (an empty one has none: such a shape is rare, encoded in full)
            usable = template is not None and template.order == (0, 1)
            pieces = self._pieces[key] = template.constants if template is not None and usable else None
        if pieces is None:
            self._parts.append(encode(TaskResult(task_id=task_id, status=_SUCCESS, payload=payload)))
        else:
            first, middle, last = pieces
            self._parts += (first, task_id, middle, payload, last)
        self._payload_bytes += len(payload)
        self.count += 1

    def take(self) -> Optional[Tuple[Encoded, int]]:
        """The results added since the last call as one Encoded message run, with their payload bytes; None if none."""
        if not self._parts:
            return None
        batch = (Encoded(b"".join(self._parts)), self._payload_bytes)
        self._parts = []
        self._payload_bytes = 0
        self.count = 0
        return batch


def _success(values: Sequence[bytes]) -> TaskResult:
    return TaskResult(task_id=values[0], status=_SUCCESS, payload=values[1])
