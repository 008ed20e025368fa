"""Internal: A task's captured output, batched into TaskOutput messages: the worker core's side (capture.py reads the
pipes).

Output leaves in whole lines: what ends in a newline is sent OUTPUT_DELAY_SECONDS after it arrived (so a chatty task
costs one message per stream every few tens of milliseconds, not one per line), at once when OUTPUT_BATCH_BYTES are
waiting (then a line longer than that is split), and everything, an unfinished last line included, just before the
task's TaskResult, followed by one "[... N bytes of output dropped]" line on stderr if the task wrote more than the
worker's limit. The agent caps what it keeps of each task (capture.py), so nothing here grows beyond that limit.
"""

from __future__ import annotations

import math
from typing import List, Tuple

from scaler.protocol import OutputStream, TaskOutput

OUTPUT_DELAY_SECONDS = 0.05
OUTPUT_BATCH_BYTES = 16 * 1024
_STDERR = int(OutputStream.stderr)


class TaskOutputBuffer:
    """What one task wrote and the worker has not sent yet."""

    __slots__ = ("task_id", "pending", "since", "dropped")

    def __init__(self, task_id: bytes) -> None:
        self.task_id = task_id
        self.pending = (bytearray(), bytearray())  # by stream: stdout, stderr
        self.since = [0.0, 0.0]  # when the oldest byte now pending arrived, by stream
        self.dropped = 0  # bytes over the limit, dropped

    def add(self, stream: int, data: bytes, dropped: int, now: float) -> None:
        self.dropped += dropped
        if data:
            pending = self.pending[stream]
            if not pending:
                self.since[stream] = now
            pending += data

    def due(self) -> float:
        """When take() next sends something (inf: not before more output or the task's end)."""
        due = math.inf
        for stream, pending in enumerate(self.pending):
            if pending and self.since[stream] < due and pending.find(b"\n") >= 0:
                due = self.since[stream]
        return due + OUTPUT_DELAY_SECONDS

    def take(self, now: float, messages: List[Tuple[object, int]]) -> None:
        """Append the messages due now."""
        for stream, pending in enumerate(self.pending):
            if not pending:
                continue
            if len(pending) >= OUTPUT_BATCH_BYTES:
                cut = pending.rfind(b"\n") + 1 or len(pending)
            elif now >= self.since[stream] + OUTPUT_DELAY_SECONDS:  # as due() says
                cut = pending.rfind(b"\n") + 1
            else:
                continue
            if cut:
                self._send(stream, bytes(pending[:cut]), messages)
                del pending[:cut]
                self.since[stream] = now

    def finish(self, messages: List[Tuple[object, int]]) -> None:
        """Append everything left, then the count of what was dropped: the task is about to be answered."""
        for stream, pending in enumerate(self.pending):
            if pending:
                self._send(stream, bytes(pending), messages)
                pending.clear()
        if self.dropped:
            self._send(_STDERR, b"[... %d bytes of output dropped]\n" % self.dropped, messages)
            self.dropped = 0

    def _send(self, stream: int, data: bytes, messages: List[Tuple[object, int]]) -> None:
        messages.append((TaskOutput(task_id=self.task_id, stream=stream, data=data), len(data)))
