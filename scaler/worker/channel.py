"""Messages between a worker agent and its processor: length-prefixed pickles over a Unix stream socket.

Both ends are the same code of the same user on the same host, so pickle is safe here and the fastest way to move
tuples of bytes. A stream socket (not SEQPACKET) because arguments and results may be gigabytes.

The agent sends `ProcessorOrders`: tasks to run in order, and ids of tasks sent earlier to drop if not started yet.
The processor answers with `ProcessorReport`s: the result of the task it just finished, the task it starts next, and
the tasks it dropped; or that its running task blocked on a future (it is then "parked", see agent.py). Knowing
exactly which task has started is what lets the agent hand a processor several short tasks at once and still cancel,
balance and recover from a crash precisely.
"""

from __future__ import annotations

import pickle
import select
import socket
import struct
from typing import Any, List, NamedTuple, Optional

_HEADER = struct.Struct("<Q")
_SMALL_MESSAGE_BYTES = 64 * 1024  # below this, header and body go in one syscall; above, concatenating would copy
_READ_CHUNK_BYTES = 1024 * 1024


class ProcessorArgument(NamedTuple):
    name: str  # keyword, or "" for a positional argument
    object_id: bytes  # b"" for an inline argument
    payload: Optional[bytes]  # None when the processor already holds object_id
    cacheable: bool  # objects and functions are kept by the processor; graph results are used once


class ProcessorTask(NamedTuple):
    task_id: bytes
    serializer_id: bytes  # b"" means cloudpickle
    serializer_payload: Optional[bytes]
    function_id: bytes
    function_payload: Optional[bytes]
    arguments: List[ProcessorArgument]
    profiling: bool
    forget_object_ids: List[bytes]  # objects the agent evicted: the processor drops its copies


class ProcessorOrders(NamedTuple):
    tasks: List[ProcessorTask]
    drops: List[bytes]  # ids of tasks sent earlier: drop each one that has not started
    # The agent's answer to a parking: every task sent before this order was taken back, so a parked processor skips
    # them all, up to this order, once its blocked task is done, and never reports them (the agent may hand them to it
    # again later); tasks and drops sent after this order are new and handled as usual.
    end_of_parking: bool = False


class ProcessorResult(NamedTuple):
    task_id: bytes
    succeeded: bool
    payload: bytes  # serialized return value, or the cloudpickled exception
    error_text: str
    duration_us: int  # always measured: the agent learns from it how far ahead it may feed the processor
    cpu_time_us: int  # profiling only
    peak_memory: int  # profiling only


class ProcessorReport(NamedTuple):
    result: Optional[ProcessorResult]  # the task just finished
    started: Optional[bytes]  # the task starting now
    dropped: List[bytes]  # tasks dropped on the agent's drop orders, never started; nothing else
    blocked: Optional[bytes] = None  # the running task waits on a future: this processor runs nothing else for now


# On the wire the NamedTuples travel as plain tuples: pickle writes a NamedTuple as a call of its class, which costs
# about eight times as much to write and read as the same fields in a plain tuple, once or twice per task.
_ORDERS = 0
_REPORT = 1


def _to_wire(message: Any) -> tuple:
    if type(message) is ProcessorOrders:
        tasks = [(*task[:5], [tuple(argument) for argument in task[5]], task[6], task[7]) for task in message.tasks]
        return (_ORDERS, tasks, message.drops, message.end_of_parking)
    if type(message) is ProcessorReport:
        result = message.result
        return (_REPORT, None if result is None else tuple(result), message.started, message.dropped, message.blocked)
    raise TypeError(f"not a message of the processor channel: {type(message).__name__}")


def _from_wire(wire: tuple) -> Any:
    # tuple.__new__ skips the NamedTuples' own __new__, a Python-level call per object; the fields are ours
    new = tuple.__new__
    if wire[0] == _ORDERS:
        tasks = [
            new(ProcessorTask, (t[0], t[1], t[2], t[3], t[4], [new(ProcessorArgument, a) for a in t[5]], t[6], t[7]))
            for t in wire[1]
        ]
        return new(ProcessorOrders, (tasks, wire[2], wire[3]))
    result = wire[1]
    return new(ProcessorReport, (None if result is None else new(ProcessorResult, result), wire[2], wire[3], wire[4]))


def send_message(sock: socket.socket, message: Any) -> None:
    body = pickle.dumps(_to_wire(message), protocol=pickle.HIGHEST_PROTOCOL)
    header = _HEADER.pack(len(body))
    if len(body) < _SMALL_MESSAGE_BYTES:
        sock.sendall(header + body)
    else:
        sock.sendall(header)
        sock.sendall(body)


class MessageReader:
    """Reads messages as they complete, without ever blocking unless asked to."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()
        self.closed = False

    def read_available(self) -> List[Any]:
        """Messages complete so far; sets `closed` when the peer has gone (EOF or reset)."""
        while not self.closed:
            try:
                chunk = self._sock.recv(_READ_CHUNK_BYTES, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except OSError:
                self.closed = True
                break
            if not chunk:
                self.closed = True
                break
            self._buffer += chunk
            if len(chunk) < _READ_CHUNK_BYTES:
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
                    messages.append(_from_wire(pickle.loads(body)))
                start = end
        if start:
            del self._buffer[:start]
        return messages
