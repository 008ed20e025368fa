"""Internal: the agent's side of one processor process: its channel, its shared progress, its output pipes, its pid and
resource usage.

IO only; what the processor was handed and holds is the core's business (state.ProcessorState)."""

from __future__ import annotations

import os
import signal
import socket
from collections import deque
from typing import Deque, List, Optional, Sequence, Tuple

import psutil

from scaler.io.shared_bytes import SharedBytes
from scaler.worker.capture import OutputReader
from scaler.worker.channel import MessageReader, encode_shared, fd_message, pieces, split_for_descriptors
from scaler.worker.processor_messages import OutputChunk, ProcessorOrders, ProcessorTask
from scaler.worker.zygote import ForkedProcessor


class ProcessorLink:
    def __init__(self, number: int, forked: ForkedProcessor, output_limit_bytes: int) -> None:
        self.number = number  # the core's name for it
        self.pid = forked.pid
        self.sock = forked.sock
        self.reader = MessageReader(forked.sock)
        self.progress = forked.progress
        self.output = OutputReader(*forked.output_fds, forked.output_nonce, output_limit_bytes)
        # (bytes not yet written, whether they end an order, the shared payloads whose descriptors go with them)
        self._unsent: Deque[Tuple[memoryview, bool, Optional[List[SharedBytes]]]] = deque()
        self._order_started = False  # the first of the unsent bytes was written, and the processor told so
        try:
            self._process: psutil.Process | None = psutil.Process(self.pid)
        except psutil.Error:
            self._process = None

    def fileno(self) -> int:
        return self.sock.fileno()

    def read_output(self, read_pipes: bool) -> List[OutputChunk]:
        """What its tasks with streamOutput wrote since the last call (capture.py); the pipes are read if told."""
        return self.output.read() if read_pipes else []

    def hand(self, tasks: List[ProcessorTask], shared: Sequence[SharedBytes] = ()) -> None:
        self._post(ProcessorOrders(tasks, [], shared=shared))

    def drop(self, task_ids: List[bytes]) -> None:
        self._post(ProcessorOrders([], task_ids))

    def forget(self, object_ids: List[bytes]) -> None:
        self._post(ProcessorOrders([], [], False, tuple(object_ids)))

    def give_spares(self, spares: Sequence[Tuple[bytes, SharedBytes]]) -> None:
        self._post(ProcessorOrders([], [], spares=spares))

    def end_parking(self) -> None:
        """Tell a parked processor that every task handed so far was taken back (see processor.py)."""
        self._post(ProcessorOrders([], [], True))

    @property
    def writing(self) -> bool:
        """Orders wait for room in the channel: poll it for writing, and call write() when it has some."""
        return bool(self._unsent)

    def _post(self, orders: ProcessorOrders) -> None:
        """Queue orders and write what the channel takes now. Never blocks: the processor reads orders between tasks
        only, and may itself be blocked writing results (or output) that only this agent's loop reads, so the rest
        is written by write() as the loop finds room. Raises OSError if the processor is gone (the poll then sees
        its end of file)."""
        for message in split_for_descriptors(orders):
            message_pieces = pieces(*encode_shared(message))
            last = len(message_pieces) - 1
            for index, (piece, shared) in enumerate(message_pieces):
                # the descriptors of its shared payloads go with its first bytes (and stay open until they went)
                self._unsent.append((piece, index == last, list(shared) if shared else None))
        self.write()

    def write(self) -> None:
        """Write queued orders until the channel is full. The processor is told in the shared progress, which it
        checks between tasks, when an order starts to arrive (so that it reads a large one while we write it) and
        when an order is complete."""
        sock = self.sock
        unsent = self._unsent
        while unsent:
            view, ends_order, shared = unsent[0]
            try:
                if shared:
                    sent = sock.sendmsg([view], [fd_message(shared)], socket.MSG_DONTWAIT)
                else:
                    sent = sock.send(view, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            if not self._order_started:
                self._order_started = True
                if len(view) > sent or not ends_order:
                    self.progress.post_orders()
            if sent < len(view):
                unsent[0] = (view[sent:], ends_order, None)  # the descriptors went with the first byte
                continue
            unsent.popleft()
            if ends_order:
                self._order_started = False
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
        self.reader.close_fds()
        self.sock.close()
        self.progress.close()
        self.output.close()
