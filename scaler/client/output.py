"""Internal: printing what the tasks of a Client(stream_output=True) write: each line on this process's stdout or
stderr, marked with its task, as "[name#number] line" (the function's name, and the task's number among those its
connection made).

The IO thread hands each TaskOutput to the process's printer, a thread of its own, and never waits for it: a slow or
stuck terminal must not hold up results and heartbeats. The printer keeps at most MAX_QUEUED_BYTES waiting; beyond
that it drops output and says how much on stderr. Workers send a task's output before its result, and the IO thread
hands it over before it settles the future, so `result()` and `exception()` of a task that printed first wait until the
printer wrote that output (unless the printer has been stuck in one write for PRINTER_STALL_SECONDS): the task's lines
come before whatever the caller prints with its result.

A nested client (one a task received) prints its children's lines to its own process's stdout, which the worker
captures as the parent's output when the parent streams too: the client that submitted the parent shows them as
"[parent#3] [child#0] line", once.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections import deque
from typing import Deque, Dict, List, Optional, Tuple

from scaler.client.caches import put_bounded

MAX_QUEUED_BYTES = 4 * 1024 * 1024
PRINTER_STALL_SECONDS = 1.0
MAX_LABELS = 65536  # labels of tasks never answered (graph nodes nobody asked for) are forgotten oldest first
_EXIT_DRAIN_SECONDS = 1.0
_STDERR = 1

# task id -> number of the last printer item holding its output, while that is not written yet. Read without a lock by
# ScalerFuture.result(): empty (falsy) whenever no output waits, which is all it checks on its hot path.
unprinted: Dict[bytes, int] = {}

# task id -> "name#number", for the tasks of streaming clients not answered yet; empty (falsy) without such clients,
# which is all the IO thread checks per result
labels: Dict[bytes, str] = {}
_printer: Optional[_Printer] = None
_printer_lock = threading.Lock()


def label_task(task_id: bytes, label: str) -> None:
    """Called as a streaming client makes a task."""
    put_bounded(labels, task_id, label, MAX_LABELS)


def forget_task(task_id: bytes) -> None:
    """Its result arrived: no more output will."""
    labels.pop(task_id, None)


def on_task_output(task_id: bytes, stream: int, data: bytes, number: int) -> None:
    """A TaskOutput arrived (IO thread); `number` is the task's number in its connection, for an unlabeled task."""
    label = labels.get(task_id) or f"#{number}"
    printer().put(task_id, label, stream, data)


def wait_printed(task_id: bytes) -> None:
    """Return once the output of `task_id` that arrived so far is written, or the printer is stuck."""
    if task_id in unprinted and _printer is not None:
        _printer.wait_printed(task_id)


def printer() -> _Printer:
    global _printer
    if _printer is None:
        with _printer_lock:
            if _printer is None:
                _printer = _Printer()
    return _printer


def mark_lines(label: str, data: bytes) -> str:
    """Each line of data prefixed with "[label] "; an unfinished last line is finished."""
    text = data.decode("utf-8", "replace")
    if text.endswith("\n"):
        text = text[:-1]
    prefix = f"[{label}] "
    return prefix + text.replace("\n", "\n" + prefix) + "\n"


class _Printer:
    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._queue: Deque[Tuple[int, bytes, str, int, bytes]] = deque()  # (number, task id, label, stream, data)
        self._queued_bytes = 0
        self._dropped = 0  # bytes dropped since the printer last said so
        self._next_number = 0
        self._busy_since: Optional[float] = None  # when the current write began
        self._thread = threading.Thread(target=self._run, name="scaler-task-output", daemon=True)
        self._thread.start()

    def put(self, task_id: bytes, label: str, stream: int, data: bytes) -> None:
        """Never blocks: drops (counted) what does not fit."""
        with self._condition:
            if self._queued_bytes + len(data) > MAX_QUEUED_BYTES:
                self._dropped += len(data)
            else:
                number = self._next_number
                self._next_number += 1
                self._queue.append((number, task_id, label, stream, data))
                self._queued_bytes += len(data)
                unprinted[task_id] = number
            self._condition.notify_all()

    def wait_printed(self, task_id: bytes) -> None:
        with self._condition:
            while task_id in unprinted:
                busy_since = self._busy_since
                if busy_since is not None and time.monotonic() - busy_since > PRINTER_STALL_SECONDS:
                    return  # the terminal does not read: the result must not wait for it
                self._condition.wait(0.1)

    def drain(self, timeout_seconds: float) -> None:
        """Wait until everything queued is written (at exit), at most `timeout_seconds`."""
        deadline = time.monotonic() + timeout_seconds
        with self._condition:
            while (self._queue or self._busy_since is not None) and time.monotonic() < deadline:
                self._condition.wait(0.05)

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._queue and not self._dropped:
                    self._condition.wait()
                items = list(self._queue)
                self._queue.clear()
                dropped, self._dropped = self._dropped, 0
                self._busy_since = time.monotonic()
            try:
                _write(items, dropped)
            finally:
                with self._condition:
                    self._queued_bytes -= sum(len(item[4]) for item in items)
                    for number, task_id, *_ in items:
                        if unprinted.get(task_id) == number:
                            del unprinted[task_id]
                    self._busy_since = None
                    self._condition.notify_all()


def _write(items: List[Tuple[int, bytes, str, int, bytes]], dropped: int) -> None:
    """Write the items in order, one write per run of the same stream; what cannot be written is lost, quietly (the
    stream is closed or broken: nowhere to say so)."""
    start = 0
    while start < len(items):
        stream = items[start][3]
        end = start
        while end < len(items) and items[end][3] == stream:
            end += 1
        _write_text(stream, "".join(mark_lines(item[2], item[4]) for item in items[start:end]))
        start = end
    if dropped:
        _write_text(_STDERR, f"[scaler] {dropped} bytes of task output dropped: this process's output was too slow\n")


def _write_text(stream: int, text: str) -> None:
    target = sys.stderr if stream == _STDERR else sys.stdout  # looked up each time: redirect_stdout, pytest's capture
    if target is None:
        return
    try:
        target.write(text)
        target.flush()
    except (OSError, ValueError):
        pass


@atexit.register
def _drain_at_exit() -> None:
    """Output that arrived just before the process ends is still shown (briefly waited for)."""
    if _printer is not None:
        _printer.drain(_EXIT_DRAIN_SECONDS)


def _forget_after_fork() -> None:
    """A forked child has the printer but not its thread: it starts its own if it needs one."""
    global _printer, _printer_lock
    _printer = None
    _printer_lock = threading.Lock()
    unprinted.clear()
    labels.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
