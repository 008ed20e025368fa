"""Internal: what a task with streamOutput writes to file descriptors 1 and 2, from its processor to its agent.

Every processor gets two pipes when it is forked (zygote.py), one per stream. While a task with the flag runs, the
processor points fds 1 and 2 at them (dup2), so everything written there is captured: `print` and
sys.stdout/sys.stderr, logging to the standard streams, warnings, C code (its stdio buffers are flushed when the task
ends), and the subprocesses the task starts, which inherit them. Around each such task the processor writes a marker
into each pipe, "task seq begins" and "task seq ends", carrying a random nonce that only the agent and this processor
know, so the agent attributes every byte to the task that ran when it was written. Bytes outside a begin/end pair,
written by processes a task left running after it returned, belong to no task: they are counted and dropped.

The agent reads the pipes in its loop, never blocking, keeps at most `limit_bytes` of each task (the rest is counted
as dropped) and hands the chunks to its core, which batches them into TaskOutput messages (task_output.py).

A task without the flag costs nothing here: its fds are left alone, and the pipes stay silent.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Callable, Dict, List, Optional, Tuple

from scaler.worker.processor_messages import OutputChunk

STDOUT = 0  # OutputStream.stdout: the stream's index here too
STDERR = 1
_BEGIN = ord("B")
_END = ord("E")
_MARKER_TAIL = b"\0"
_READ_BYTES = 64 * 1024
# Per read(), per pipe. A pipe holds 64 KiB (Linux, macOS), so this reads past anything a processor wrote before a
# report the agent has just read: its tasks' end markers among it.
_READ_BUDGET_BYTES = 1024 * 1024


def marker_prefix(nonce: bytes) -> bytes:
    return b"\0scaler-output:" + nonce.hex().encode() + b":"


def make_pipes() -> Tuple[Tuple[int, int], Tuple[int, int], bytes]:
    """(stdout read, write), (stderr read, write) and a fresh nonce, for one processor."""
    return os.pipe(), os.pipe(), os.urandom(8)


# --- the processor's side ---------------------------------------------------------------------------------------------


class OutputCapture:
    """Points fds 1 and 2 at the pipes around one task. Never fails a task: if the pipes are gone (a task closed
    them), capture stops for good and the processor writes where it did before."""

    def __init__(self, stdout_pipe: int, stderr_pipe: int, nonce: bytes) -> None:
        self._pipes = (stdout_pipe, stderr_pipe)
        self._prefix = marker_prefix(nonce)
        self._originals: Optional[Tuple[int, int]] = None  # duplicates of what fds 1 and 2 were; made on first use
        self._streams: Tuple[object, object] = (None, None)  # sys.stdout and sys.stderr when the task began
        self._line_buffering: List[Optional[bool]] = [None, None]
        self.broken = False

    def begin(self, seq: int) -> None:
        if self.broken:
            return
        _flush_standard_streams()  # what was written before the task goes where it was going
        try:
            if self._originals is None:
                self._originals = (_duplicate(1), _duplicate(2))
            for fd, pipe in ((1, self._pipes[0]), (2, self._pipes[1])):
                _write_all(pipe, self._marker(_BEGIN, seq))
                os.dup2(pipe, fd)
        except OSError as error:
            self._break(error)
            return
        # Line buffered while captured, so that a print reaches the client as the task goes, not when it ends.
        self._streams = (sys.stdout, sys.stderr)
        for index, stream in enumerate(self._streams):
            self._line_buffering[index] = _set_line_buffering(stream, True)

    def end(self, seq: int) -> None:
        if self.broken or self._originals is None:
            return
        for index, stream in enumerate(self._streams):
            previous = self._line_buffering[index]
            if previous is not None:
                _set_line_buffering(stream, previous)  # flushes
        self._streams = (None, None)
        _flush_standard_streams()
        try:
            os.dup2(self._originals[0], 1)
            os.dup2(self._originals[1], 2)
            for pipe in self._pipes:
                _write_all(pipe, self._marker(_END, seq))
        except OSError as error:
            self._break(error)

    def _marker(self, kind: int, seq: int) -> bytes:
        return b"%s%c%d%s" % (self._prefix, kind, seq, _MARKER_TAIL)

    def _break(self, error: OSError) -> None:
        self.broken = True
        if self._originals is not None:
            for fd, original in ((1, self._originals[0]), (2, self._originals[1])):
                try:
                    os.dup2(original, fd)
                except OSError:
                    pass
        print(f"scaler processor {os.getpid()}: task output capture stopped: {error}", file=sys.stderr)


def _duplicate(fd: int) -> int:
    """A duplicate of fd to put back after a task; /dev/null if fd was closed."""
    try:
        return os.dup(fd)
    except OSError:
        return os.open(os.devnull, os.O_WRONLY)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _set_line_buffering(stream: object, on: bool) -> Optional[bool]:
    """The stream's previous setting, or None if it is not a text stream that can change it."""
    if not isinstance(stream, io.TextIOWrapper):
        return None
    try:
        previous = stream.line_buffering
        stream.reconfigure(line_buffering=on)
        return previous
    except (OSError, ValueError):
        return None


_c_fflush: Optional[Callable[[None], int]] = None
_c_fflush_looked_up = False


def _flush_standard_streams() -> None:
    """Python's sys.stdout and sys.stderr, then C's stdio buffers (fflush(NULL)), where ctypes can reach them."""
    global _c_fflush, _c_fflush_looked_up
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # None, closed, or replaced by something odd: nothing of ours to flush
            pass
    if not _c_fflush_looked_up:
        _c_fflush_looked_up = True
        try:
            import ctypes

            _c_fflush = ctypes.CDLL(None).fflush
        except (ImportError, OSError, AttributeError):
            _c_fflush = None
    if _c_fflush is not None:
        _c_fflush(None)


# --- the agent's side -------------------------------------------------------------------------------------------------


class OutputReader:
    """Reads one processor's pipes without blocking and cuts what it reads into per-task chunks."""

    def __init__(self, stdout_fd: int, stderr_fd: int, nonce: bytes, limit_bytes: int) -> None:
        self.fds = (stdout_fd, stderr_fd)
        for fd in self.fds:
            os.set_blocking(fd, False)
        self.open = [True, True]
        self.stray_bytes = 0  # written outside any task's markers: dropped
        self._limit = limit_bytes
        prefix = marker_prefix(nonce)
        self._parsers = (_StreamParser(STDOUT, prefix, self), _StreamParser(STDERR, prefix, self))
        self._kept: Dict[int, int] = {}  # task seq -> bytes of it kept so far, both streams
        self._ends: Dict[int, int] = {}  # task seq -> end markers seen (the entry goes at two)
        self._dropped: Dict[int, int] = {}  # task seq -> bytes dropped since the last read()
        self._chunks: List[OutputChunk] = []

    def read(self) -> List[OutputChunk]:
        """What the pipes hold now (up to a budget), as chunks in the order written (per stream)."""
        for index, fd in enumerate(self.fds):
            if not self.open[index]:
                continue
            parser = self._parsers[index]
            budget = _READ_BUDGET_BYTES
            while budget > 0:
                try:
                    data = os.read(fd, _READ_BYTES)
                except BlockingIOError:
                    break
                except OSError:
                    data = b""
                if not data:
                    self.open[index] = False  # every writer closed it: the processor is gone
                    break
                parser.feed(data)
                budget -= len(data)
                if len(data) < _READ_BYTES:
                    break  # drained: saves the read that would only say EAGAIN
        chunks = self._chunks
        if self._dropped:
            chunks.extend(OutputChunk(seq, STDERR, b"", count) for seq, count in self._dropped.items())
            self._dropped = {}
        self._chunks = []
        return chunks

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.open = [False, False]

    # called by the parsers
    def keep(self, seq: int, stream: int, data: bytes) -> None:
        kept = self._kept.get(seq, 0)
        room = self._limit - kept
        if len(data) > room:
            self._dropped[seq] = self._dropped.get(seq, 0) + len(data) - max(room, 0)
            data = data[: max(room, 0)]
        if data:
            self._kept[seq] = kept + len(data)
            self._chunks.append(OutputChunk(seq, stream, data, 0))

    def ended(self, seq: int) -> None:
        ends = self._ends.get(seq, 0) + 1
        if ends < 2:
            self._ends[seq] = ends
            return
        self._ends.pop(seq, None)
        self._kept.pop(seq, None)


class _StreamParser:
    """Splits one pipe's bytes at the markers; holds back only what may be the start of a marker cut by a read."""

    __slots__ = ("stream", "seq", "_prefix", "_reader", "_tail")

    def __init__(self, stream: int, prefix: bytes, reader: OutputReader) -> None:
        self.stream = stream
        self.seq = 0  # the task whose output this is, 0 between tasks
        self._prefix = prefix
        self._reader = reader
        self._tail = b""

    def feed(self, data: bytes) -> None:
        buffer = self._tail + data if self._tail else data
        self._tail = b""
        prefix = self._prefix
        position = 0
        while True:
            start = buffer.find(prefix, position)
            if start < 0:
                break
            tail = buffer.find(_MARKER_TAIL, start + len(prefix))
            if tail < 0:  # the rest of the marker is still in the pipe
                self._emit(buffer[position:start])
                self._tail = buffer[start:]
                return
            self._emit(buffer[position:start])
            self._on_marker(buffer[start + len(prefix) : tail])
            position = tail + 1
        keep = _possible_prefix_length(buffer, position, prefix)
        self._emit(buffer[position : len(buffer) - keep])
        if keep:
            self._tail = buffer[len(buffer) - keep :]

    def _on_marker(self, body: bytes) -> None:
        try:
            kind, seq = body[0], int(body[1:])
        except (IndexError, ValueError):
            return  # cannot happen: only the processor knows the nonce
        if kind == _BEGIN:
            self.seq = seq
        elif kind == _END:
            self.seq = 0
            self._reader.ended(seq)

    def _emit(self, data: bytes) -> None:
        if not data:
            return
        if self.seq:
            self._reader.keep(self.seq, self.stream, data)
        else:
            self._reader.stray_bytes += len(data)


def _possible_prefix_length(buffer: bytes, start: int, prefix: bytes) -> int:
    """The length of the longest end of buffer[start:] that may begin a marker (a marker starts with a zero byte, rare
    in text, so this is one find in the usual case)."""
    position = buffer.find(b"\0", max(start, len(buffer) - len(prefix) + 1))
    while position >= 0:
        if prefix.startswith(buffer[position:]):
            return len(buffer) - position
        position = buffer.find(b"\0", position + 1)
    return 0
