"""The agent's side of one processor process: its channel, its shared progress, its pid and resource usage.

IO only; what the processor was handed and holds is the core's business (state.ProcessorState)."""

from __future__ import annotations

import os
import signal
import socket
from typing import List, Tuple

import psutil

from scaler.worker.channel import (
    SMALL_MESSAGE_BYTES,
    MessageReader,
    ProcessorOrders,
    ProcessorTask,
    SharedProgress,
    encode_message,
    send_encoded,
)


class ProcessorLink:
    def __init__(self, number: int, pid: int, sock: socket.socket, progress: SharedProgress) -> None:
        self.number = number  # the core's name for it
        self.pid = pid
        self.sock = sock
        self.reader = MessageReader(sock)
        self.progress = progress
        try:
            self._process = psutil.Process(pid)
        except psutil.Error:
            self._process = None

    def fileno(self) -> int:
        return self.sock.fileno()

    def hand(self, tasks: List[ProcessorTask]) -> None:
        self._post(ProcessorOrders(tasks, []))

    def drop(self, task_ids: List[bytes]) -> None:
        self._post(ProcessorOrders([], task_ids))

    def end_parking(self) -> None:
        """Tell a parked processor that every task handed so far was taken back (see processor.py)."""
        self._post(ProcessorOrders([], [], True))

    def _post(self, orders: ProcessorOrders) -> None:
        """Send orders and say so in the shared progress, which the processor checks between tasks. Raises OSError
        if the processor is gone (the poll then sees its end of file)."""
        body = encode_message(orders)
        if len(body) >= SMALL_MESSAGE_BYTES:
            # It may not fit the socket's buffer: let the processor start reading before we block on the rest.
            self.progress.post_orders()
        send_encoded(self.sock, body)
        self.progress.post_orders()

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
        self.progress.close()
