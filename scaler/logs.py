"""Internal: log set-up shared by every CLI: `[INFO]2023-03-19 12:16:10-0400: message`, as in the docs.

Logging never blocks the thread that logs, whatever the output does. A record is formatted where it is logged and
offered to each output's bounded queue without waiting; a daemon thread per output writes the lines. An output that
does not keep up (a pipe nobody reads, a stalled disk) fills its queue, and further lines are dropped and counted:
once its queue has drained, the output gets a line saying how many it lost. A scheduler whose stdout nobody reads
thus goes on serving; it only loses log lines.

At exit, each output is given EXIT_FLUSH_SECONDS (together) to write what is queued; lines an output could not write
by then (it is blocked: nobody reads it) are lost, and the process exits regardless. Processes that leave with
os._exit call `flush_logs()` first. A forked child starts with empty queues of its own (its parent writes what it
had queued) and starts its writer threads when it first logs.

Lines of up to PIPE_BUF bytes are written with one write() each, whole lines only, so processes sharing a pipe (a
cluster and its workers) never interleave within a line.
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import queue
import select
import threading
import time
from typing import List, Optional, Sequence, Union

_FORMAT = "[%(levelname)s]%(asctime)s: %(message)s"
_DATE_FORMAT = "%Y-%m-%d %H:%M:%S%z"

QUEUED_LINES = 10_000  # per output: beyond it lines are dropped (and counted) until the output catches up
EXIT_FLUSH_SECONDS = 2.0  # how long a process may spend at exit writing queued lines to outputs
_ATOMIC_WRITE_BYTES = getattr(select, "PIPE_BUF", 512)  # writes this size or under are not interleaved on a pipe
_STANDARD_STREAMS = {"/dev/stdout": 1, "-": 1, "/dev/stderr": 2}

_Item = Union[bytes, threading.Event, None]  # a line; a flush marker, set once what came before is written; stop


class _Output:
    """One destination: a bounded queue of encoded lines, and a thread that writes them."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = _STANDARD_STREAMS.get(path, -1)
        self._own_fd = self._fd < 0
        self._identity = (0, 0)  # (st_dev, st_ino) of the file opened at `path`, to notice rotation
        self._broken = False  # the reader is gone (EPIPE, a closed descriptor): lines go nowhere, silently
        if self._own_fd:
            self._open_file()  # errors (a missing directory, no permission) surface now, in setup_logging
        self._reset()

    def _reset(self) -> None:
        """A fresh queue and no thread yet: at creation, and in a forked child (the parent writes what it queued)."""
        self._queue: queue.Queue = queue.Queue(QUEUED_LINES)
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self.dropped = 0

    def after_fork(self) -> None:
        self._reset()

    # --- any thread -------------------------------------------------------------------------------------------------

    def offer(self, line: bytes) -> None:
        """Queue a line without waiting; count it as dropped if the queue is full."""
        if self._thread is None:
            self._start()
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            with self._lock:
                self.dropped += 1

    def flush(self, deadline: float) -> bool:
        """Wait until what was queued before this call is written, or until `deadline` (time.monotonic())."""
        if self._thread is None or not self._thread.is_alive():
            return self._queue.empty()
        marker = threading.Event()
        while True:
            try:
                self._queue.put(marker, timeout=max(0.0, min(0.05, deadline - time.monotonic())))
                break
            except queue.Full:
                if time.monotonic() >= deadline:
                    return False
        return marker.wait(max(0.0, deadline - time.monotonic()))

    def stop(self, deadline: float) -> bool:
        """Write what is queued, then end the thread; False if that did not happen before `deadline`."""
        written = self.flush(deadline)
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass  # blocked: the thread is a daemon, the process exits without it
        if self._thread is not None and written:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._own_fd and self._fd >= 0 and (self._thread is None or not self._thread.is_alive()):
            os.close(self._fd)
            self._fd = -1
        return written

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._write_forever, name=f"log writer {self.path}", daemon=True)
                thread.start()
                self._thread = thread

    # --- the writer thread ------------------------------------------------------------------------------------------

    def _write_forever(self) -> None:
        get = self._queue.get
        get_nowait = self._queue.get_nowait
        while True:
            items: List[_Item] = [get()]
            while len(items) < 1024:
                try:
                    items.append(get_nowait())
                except queue.Empty:
                    break
            self._write_lines([item for item in items if type(item) is bytes])
            if self.dropped and self._queue.empty():
                with self._lock:
                    dropped, self.dropped = self.dropped, 0
                self._write_lines(
                    [_line(logging.WARNING, f"dropped {dropped} log line(s): {self.path} did not keep up")]
                )
            for item in items:
                if item is None:
                    return
                if type(item) is threading.Event:
                    item.set()

    def _write_lines(self, lines: List[bytes]) -> None:
        if not lines or self._broken:
            return
        if self._own_fd:
            self._reopen_if_rotated()
        chunk: List[bytes] = []
        size = 0
        for line in lines:
            if chunk and size + len(line) > _ATOMIC_WRITE_BYTES:
                self._write(b"".join(chunk))
                chunk, size = [], 0
            chunk.append(line)
            size += len(line)
        self._write(b"".join(chunk))

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view and not self._broken:
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:  # someone made the shared descriptor non-blocking: wait until it takes more
                select.select([], [self._fd], [], 1.0)
            except InterruptedError:
                continue
            except OSError as error:  # nowhere to say so: EPIPE (no reader) ends this output, ENOSPC drops the chunk
                self._broken = error.errno in (errno.EPIPE, errno.EBADF)
                return

    def _open_file(self) -> None:
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        stat = os.fstat(self._fd)
        self._identity = (stat.st_dev, stat.st_ino)

    def _reopen_if_rotated(self) -> None:
        """A file moved away or deleted (logrotate) is reopened at its path, as logging.WatchedFileHandler does."""
        try:
            stat = os.stat(self.path)
            if (stat.st_dev, stat.st_ino) == self._identity:
                return
        except FileNotFoundError:
            pass
        try:
            if self._fd >= 0:
                os.close(self._fd)
            self._open_file()
        except OSError:
            self._fd = -1
            self._broken = True


class _QueueingHandler(logging.Handler):
    """Formats each record in the thread that logs it, and hands the line to every output without waiting."""

    def __init__(self, outputs: List[_Output]) -> None:
        super().__init__()
        self.outputs = outputs

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = (self.format(record) + "\n").encode("utf-8", "backslashreplace")
        except Exception:
            self.handleError(record)
            return
        for output in self.outputs:
            output.offer(line)


_formatter = logging.Formatter(_FORMAT, _DATE_FORMAT)
_handler: Optional[_QueueingHandler] = None


def _line(level: int, message: str) -> bytes:
    record = logging.LogRecord("scaler.logs", level, __file__, 0, message, None, None)
    return (_formatter.format(record) + "\n").encode("utf-8", "backslashreplace")


def setup_logging(paths: Sequence[str], level: str) -> None:
    """Log records of `level` and above to every path: files (appended to, reopened when rotated), or /dev/stdout
    (also "-") and /dev/stderr, written as the process's file descriptors 1 and 2. Replaces earlier handlers."""
    global _handler
    outputs = [_Output(path) for path in paths]
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    stop_logging(EXIT_FLUSH_SECONDS)
    _handler = _QueueingHandler(outputs)
    _handler.setFormatter(_formatter)
    root.addHandler(_handler)
    root.setLevel(level)
    logging.info("logging to %s", tuple(paths))


def flush_logs(timeout_seconds: float = EXIT_FLUSH_SECONDS) -> bool:
    """Wait until every line logged so far is written, at most `timeout_seconds`; False if some output is blocked.
    For processes that leave with os._exit, which skips the flush at exit."""
    handler = _handler
    if handler is None:
        return True
    deadline = time.monotonic() + timeout_seconds
    return all([output.flush(deadline) for output in handler.outputs])


def stop_logging(timeout_seconds: float = EXIT_FLUSH_SECONDS) -> bool:
    """Write what is queued, at most `timeout_seconds` in all, and end the writer threads; also run at exit. What an
    output could not write by then is lost; False says so."""
    global _handler
    handler, _handler = _handler, None
    if handler is None:
        return True
    logging.getLogger().removeHandler(handler)
    deadline = time.monotonic() + timeout_seconds
    return all([output.stop(deadline) for output in handler.outputs])


def _after_fork_in_child() -> None:
    handler = _handler
    if handler is not None:
        for output in handler.outputs:
            output.after_fork()


atexit.register(stop_logging)  # registered after logging's own shutdown hook, so it runs before it
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
