"""Messages between a worker agent and its processor: length-prefixed tuples over a Unix stream socket.

Both ends are the same code of the same user on the same host, run by the same interpreter (the processor is forked
from the agent's fork server), so marshal is safe here and the fastest way to move tuples of bytes: about a third of
pickle's cost to write a task and two thirds to read it (pickle memoizes every object it writes). Marshal cannot write
a bytes object over 2 GiB; a message holding one goes as a pickle, which the reader tells by its first byte. A stream
socket (not SEQPACKET) because arguments and results may be gigabytes.

The agent sends `ProcessorOrders`: tasks to run in order, and ids of tasks sent earlier to drop if not started yet.
The processor answers with `ProcessorReport`s: the results of the tasks it finished since its last report and the
tasks it dropped; or that its running task blocked on a future (it is then "parked", see core.py). It reports when
its tasks run out or it is half-way through many, before a task that blocks, when its oldest unsent result has
waited RESULT_DELAY_SECONDS, or once a task has run that long with results waiting, so short tasks cost an exchange
per batch, not one per task. Which task has started is not reported at all: the processor writes it to memory shared
with the agent (SharedProgress below), and the agent reads it when it must know (a cancel, a crash, a heartbeat).
"""

from __future__ import annotations

import marshal
import mmap
import os
import pickle
import select
import socket
import struct
import tempfile
from typing import Any, List, NamedTuple, Optional, Tuple

_HEADER = struct.Struct("<Q")
SMALL_MESSAGE_BYTES = 64 * 1024  # below this, header and body go in one syscall; above, concatenating would copy
_READ_CHUNK_BYTES = 256 * 1024
# A finished task's result waits for the results of the tasks after it, so short tasks batch, but not much longer than
# this: checked between tasks, and by a thread of the processor once a task has run this long (processor.py), so that
# a task that runs long never holds back the results of the tasks before it.
RESULT_DELAY_SECONDS = 0.005


class ProcessorArgument(NamedTuple):
    name: str  # keyword, or "" for a positional argument
    object_id: bytes  # b"" for an inline argument
    payload: Optional[bytes]  # None when the processor already holds object_id
    cacheable: bool  # objects and functions are kept by the processor; graph results are used once


class ProcessorTask(NamedTuple):
    seq: int  # 1, 2, 3...: the order it was handed in; the processor writes it to the shared progress as it runs
    task_id: bytes
    serializer_id: bytes  # b"" means cloudpickle
    serializer_payload: Optional[bytes]
    function_id: bytes
    function_payload: Optional[bytes]
    arguments: List[ProcessorArgument]
    profiling: bool
    forget_object_ids: List[bytes]  # objects the agent evicted: the processor drops its copies
    stream_output: bool = False  # capture what it writes to fds 1 and 2 for its client (capture.py)


class ProcessorOrders(NamedTuple):
    tasks: List[ProcessorTask]  # plain tuples of that shape as sent and as read: cheaper to encode and to unpack
    drops: List[bytes]  # ids of tasks sent earlier: drop each one that has not started
    # The agent's answer to a parking: every task sent before this order was taken back, so a parked processor skips
    # them all, up to this order, once its blocked task is done, and never reports them (the agent may hand them to it
    # again later); tasks and drops sent after this order are new and handled as usual.
    end_of_parking: bool = False
    # objects to drop now; sent only to a processor that was handed no task it has not answered (see core.py)
    forget: Tuple[bytes, ...] = ()


class ProcessorResult(NamedTuple):
    task_id: bytes
    succeeded: bool
    payload: bytes  # serialized return value, or the cloudpickled exception
    error_text: str
    duration_us: int  # always measured: the agent learns from it how far ahead it may feed the processor
    cpu_time_us: int  # profiling only
    peak_memory: int  # profiling only


class ProcessorReport(NamedTuple):
    results: List[ProcessorResult]  # of the tasks finished since the last report, in the order they ran
    dropped: List[bytes]  # tasks dropped on the agent's drop orders, never started; nothing else
    blocked: Optional[bytes] = None  # the running task waits on a future: this processor runs nothing else for now
    streamed: bool = False  # a task it answers had streamOutput: read the output pipes first (capture.py)


# On the wire the NamedTuples travel as plain tuples: marshal writes no tuple subclass, and pickle writes a NamedTuple
# as a call of its class, which costs about eight times as much to write and read as the same fields in a plain tuple.
_ORDERS = 0
_REPORT = 1
_MARSHAL_VERSION = 4
# pickle's PROTO opcode; a marshal starts with a type code (a printable character, bit 7 its reference flag), never this
_PICKLE_FIRST_BYTE = 0x80


def _to_wire(message: Any) -> tuple:
    if type(message) is ProcessorOrders:
        tasks: list = message.tasks
        if tasks and type(tasks[0]) is not tuple:  # NamedTuples (tests): as plain tuples, like the agent's own
            tasks = [(*task[:6], [tuple(argument) for argument in task[6]], *task[7:]) for task in tasks]
        return (_ORDERS, tasks, message.drops, message.end_of_parking, tuple(message.forget))
    if type(message) is ProcessorReport:
        results = [tuple(result) for result in message.results]
        return (_REPORT, results, message.dropped, message.blocked, message.streamed)
    raise TypeError(f"not a message of the processor channel: {type(message).__name__}")


def _from_wire(wire: tuple) -> Any:
    # tuple.__new__ skips the NamedTuples' own __new__, a Python-level call per object; the fields are ours
    new = tuple.__new__
    if wire[0] == _ORDERS:
        # Tasks and their arguments stay plain tuples: the processor unpacks each once (processor.py).
        return new(ProcessorOrders, (wire[1], wire[2], wire[3], wire[4]))
    return new(ProcessorReport, ([new(ProcessorResult, result) for result in wire[1]], wire[2], wire[3], wire[4]))


def encode_message(message: Any) -> bytes:
    wire = _to_wire(message)
    try:
        return marshal.dumps(wire, _MARSHAL_VERSION)
    except ValueError:  # a bytes object over 2 GiB (or a value of a type marshal does not write)
        return pickle.dumps(wire, protocol=pickle.HIGHEST_PROTOCOL)


def decode_message(body: Any) -> Any:
    """The message encode_message wrote into `body` (bytes or a memoryview)."""
    wire = pickle.loads(body) if body[0] == _PICKLE_FIRST_BYTE else marshal.loads(body)
    return _from_wire(wire)


def frame_encoded(body: bytes) -> Tuple[bytes, ...]:
    """The bytes to send for an encoded message: one piece if small, else two, since concatenating would copy."""
    header = _HEADER.pack(len(body))
    if len(body) < SMALL_MESSAGE_BYTES:
        return (header + body,)
    return header, body


def send_encoded(sock: socket.socket, body: bytes) -> None:
    for part in frame_encoded(body):
        sock.sendall(part)


def send_message(sock: socket.socket, message: Any) -> None:
    send_encoded(sock, encode_message(message))


class MessageReader:
    """Reads messages as they complete, without ever blocking unless asked to."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()
        # recv_into a buffer kept for good: sock.recv(n) allocates n bytes per call, and at this size that is an
        # mmap and munmap each time (over 20 us, more than the rest of reading a batch of results).
        self._scratch = memoryview(bytearray(_READ_CHUNK_BYTES))
        self.closed = False

    @property
    def partial(self) -> bool:
        """Part of a message has arrived: its sender may be blocked until we read the rest."""
        return bool(self._buffer)

    def read_available(self) -> List[Any]:
        """Messages complete so far; sets `closed` when the peer has gone (EOF or reset)."""
        scratch = self._scratch
        while not self.closed:
            try:
                size = self._sock.recv_into(scratch, _READ_CHUNK_BYTES, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except OSError:
                self.closed = True
                break
            if not size:
                self.closed = True
                break
            self._buffer += scratch[:size]
            if size < _READ_CHUNK_BYTES:
                break  # drained: saves the syscall that would only say EAGAIN
        return self._parse()

    def wait(self) -> List[Any]:
        """Block until at least one message is complete or the peer has gone."""
        while True:
            messages = self.read_available()
            if messages or self.closed:
                return messages
            select.select([self._sock], [], [])

    def _parse(self) -> List[Any]:
        messages = []
        start = 0
        # The view must be released before the buffer is trimmed: a bytearray with live exports cannot resize.
        with memoryview(self._buffer) as view:
            while len(view) - start >= _HEADER.size:
                (size,) = _HEADER.unpack_from(view, start)
                end = start + _HEADER.size + size
                if end > len(view):
                    break
                with view[start + _HEADER.size : end] as body:
                    messages.append(decode_message(body))
                start = end
        if start:
            del self._buffer[:start]
        return messages


class SharedProgress:
    """A few counters in memory shared by an agent and its processor (a memfd both map), read and written without a
    system call: the seq of the task the processor started last and of the one it finished last (written by the
    processor), and how many orders the agent posted (written by the agent, so that the processor reads its socket
    between tasks only when there is something to read).

    Native 8-byte aligned integers, each written by one side only, with one store each (struct's native format
    copies the whole word), so a reader never sees half of one; the values only grow."""

    _WORDS = struct.Struct("QQQ")  # started, finished, orders posted
    _WORD = struct.Struct("Q")
    _STARTED, _FINISHED, _POSTED = 0, 8, 16

    def __init__(self, fd: int) -> None:
        self._memory = mmap.mmap(fd, self._WORDS.size)  # mmap keeps its own duplicate of fd
        self._posted = 0

    @classmethod
    def create_fd(cls) -> int:
        """A new zeroed shared memory file; the caller passes it on and closes it."""
        try:
            fd = os.memfd_create("scaler-progress", os.MFD_CLOEXEC)
        except (AttributeError, OSError):  # not Linux: an unlinked temporary file does the same
            handle = tempfile.TemporaryFile()
            fd = os.dup(handle.fileno())
            handle.close()
        os.ftruncate(fd, cls._WORDS.size)
        return fd

    # the processor's side
    def start(self, seq: int) -> None:
        self._WORD.pack_into(self._memory, self._STARTED, seq)

    def finish(self, seq: int) -> None:
        self._WORD.pack_into(self._memory, self._FINISHED, seq)

    def orders_posted(self) -> int:
        return self._WORD.unpack_from(self._memory, self._POSTED)[0]

    # the agent's side
    def read(self) -> Tuple[int, int]:
        """(seq of the task started last, seq of the task finished last)."""
        started, finished, _ = self._WORDS.unpack_from(self._memory)
        return started, finished

    def post_orders(self) -> None:
        self._posted += 1
        self._WORD.pack_into(self._memory, self._POSTED, self._posted)

    def close(self) -> None:
        self._memory.close()
