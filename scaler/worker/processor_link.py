"""The agent's side of one processor process: its channel, its shared progress, its output pipes, its pid and
resource usage.

IO only; what the processor was handed and holds is the core's business (state.ProcessorState)."""

from __future__ import annotations

import os
import select
import signal
import socket
from typing import List, Tuple

import psutil

from scaler.worker.capture import OutputChunk, OutputReader
from scaler.worker.channel import (
    SMALL_MESSAGE_BYTES,
    MessageReader,
    ProcessorOrders,
    ProcessorTask,
    encode_message,
    frame_encoded,
)
from scaler.worker.zygote import ForkedProcessor


class ProcessorLink:
    def __init__(self, number: int, forked: ForkedProcessor, output_limit_bytes: int) -> None:
        self.number = number  # the core's name for it
        self.pid = forked.pid
        self.sock = forked.sock
        self.reader = MessageReader(forked.sock)
        self.progress = forked.progress
        self.output = OutputReader(*forked.output_fds, forked.output_nonce, output_limit_bytes)
        self._output_read: List[OutputChunk] = []  # read while an order waited for room in the channel
        try:
            self._process: psutil.Process | None = psutil.Process(self.pid)
        except psutil.Error:
            self._process = None

    def fileno(self) -> int:
        return self.sock.fileno()

    def read_output(self, read_pipes: bool) -> List[OutputChunk]:
        """What its tasks with streamOutput wrote since the last call (capture.py); the pipes are read if told."""
        chunks = self.output.read() if read_pipes else []
        if self._output_read:
            chunks = self._output_read + chunks
            self._output_read = []
        return chunks

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
        self._send(frame_encoded(body))
        self.progress.post_orders()

    def _send(self, parts: Tuple[bytes, ...]) -> None:
        """Send it all; while the channel is full (the processor reads orders between tasks only), read its output
        pipes meanwhile: its running task may be blocked writing to a full one, and would never end otherwise."""
        sock = self.sock
        for part in parts:
            view = memoryview(part)
            while view:
                try:
                    view = view[sock.send(view, socket.MSG_DONTWAIT) :]
                    continue
                except BlockingIOError:
                    pass
                poller = select.poll()
                poller.register(sock, select.POLLOUT)
                for fd, is_open in zip(self.output.fds, self.output.open):
                    if is_open:
                        poller.register(fd, select.POLLIN)
                if any(fd != sock.fileno() for fd, _ in poller.poll()):
                    self._output_read += self.output.read()

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
        self.output.close()
