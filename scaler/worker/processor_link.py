"""The agent's side of one processor: its channel, the tasks handed to it, what it holds, its resource usage."""

from __future__ import annotations

import os
import signal
import socket
from typing import Dict, List, Optional, Set, Tuple

import psutil

from scaler.worker.channel import MessageReader, ProcessorOrders, ProcessorTask, send_message
from scaler.worker.task_queue import QueuedTask


class ProcessorLink:
    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self.sock = sock
        self.reader = MessageReader(sock)
        self.pipe: Dict[bytes, QueuedTask] = {}  # handed to the processor, not finished, in the order it runs them
        self.pipe_expected_seconds = 0.0  # their guessed total run time
        self.started: Optional[bytes] = None  # the one it reported starting and has not finished
        # Canceled (and answered) while in the pipe, not started; the processor was told to drop them.
        self.canceled_ahead: Set[bytes] = set()
        # (serializer id, object id) pairs whose bytes this processor has: they are never sent to it again.
        self.held: Set[Tuple[bytes, bytes]] = set()
        self.idle_since = 0.0  # when it last became a spare (see agent.py)
        try:
            self._process: Optional[psutil.Process] = psutil.Process(pid)
        except psutil.Error:
            self._process = None

    def fileno(self) -> int:
        return self.sock.fileno()

    def hand(self, tasks: List[Tuple[QueuedTask, ProcessorTask]]) -> None:
        """Hand tasks over; raises OSError if the processor is gone (they are in the pipe either way)."""
        for queued, _ in tasks:
            self.pipe[queued.task_id] = queued
            self.pipe_expected_seconds += queued.expected_seconds
        send_message(self.sock, ProcessorOrders([task for _, task in tasks], []))

    def request_drops(self, task_ids: List[bytes]) -> None:
        self.canceled_ahead.update(task_ids)
        send_message(self.sock, ProcessorOrders([], task_ids))

    def end_parking(self) -> None:
        """Tell a parked processor that every task handed so far was taken back (see processor.py)."""
        send_message(self.sock, ProcessorOrders([], [], True))

    def take(self, task_id: bytes) -> Optional[QueuedTask]:
        """Remove a task from the pipe (finished, dropped or lost); returns it if its TaskResult is still owed."""
        queued = self.pipe.pop(task_id, None)
        if queued is None:
            return None
        if self.started == task_id:
            self.started = None
        # Reset when empty so float drift never accumulates.
        self.pipe_expected_seconds = self.pipe_expected_seconds - queued.expected_seconds if self.pipe else 0.0
        if task_id in self.canceled_ahead:
            self.canceled_ahead.discard(task_id)
            return None
        return queued

    def forget(self, object_ids: List[bytes]) -> None:
        forgotten = set(object_ids)
        self.held = {key for key in self.held if key[1] not in forgotten}

    def usage(self) -> Tuple[float, int]:
        """CPU percent since the previous call, and RSS in bytes."""
        if self._process is None:
            return 0.0, 0
        try:
            with self._process.oneshot():
                return self._process.cpu_percent(None), self._process.memory_info().rss
        except psutil.Error:
            return 0.0, 0

    def kill(self) -> None:
        """SIGKILL the processor and anything its tasks started (it leads its own process group)."""
        for kill in (os.killpg, os.kill):  # os.kill in case it died before making its group
            try:
                kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.close()

    def close_after_death(self) -> None:
        """The processor is gone: end what its task may have left running in its group. Not os.kill(pid): the
        pid may be reaped and reused by now, while a process group id is never reused while it has members."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.close()

    def close(self) -> None:
        self.sock.close()
