"""Internal: messages between a worker agent and its processor: length-prefixed tuples over a Unix stream socket.

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

The messages' types are processor_messages.py's, a module without sockets, which the worker's sans-IO core reads.
"""

from __future__ import annotations

import array
import marshal
import mmap
import os
import pickle
import select
import socket
import struct
from collections import deque
from typing import Any, Deque, List, Optional, Sequence, Tuple

from scaler.io.shared_bytes import SharedBytes, shared_fd
from scaler.worker.processor_messages import ProcessorOrders, ProcessorReport, ProcessorResult

_HEADER = struct.Struct("<Q")
SMALL_MESSAGE_BYTES = 64 * 1024  # below this, header and body go in one syscall; above, concatenating would copy
_READ_CHUNK_BYTES = 256 * 1024
# Descriptors one sendmsg passes at most (Linux passes at most 253): a message with more is split between its items,
# and one item with more (a task reading hundreds of graph results) has them sent with its first bytes, this many with
# each byte (the reader takes them in order).
MAX_SHARED_PER_MESSAGE = 250
_ANCILLARY_BYTES = socket.CMSG_SPACE(4 * MAX_SHARED_PER_MESSAGE * 4)  # a read returns one sendmsg's at most
# On the wire the NamedTuples travel as plain tuples: marshal writes no tuple subclass, and pickle writes a NamedTuple
# as a call of its class, which costs about eight times as much to write and read as the same fields in a plain tuple.
_ORDERS = 0
_REPORT = 1
_MARSHAL_VERSION = 4
# pickle's PROTO opcode; a marshal starts with a type code (a printable character, bit 7 its reference flag), never this
_PICKLE_FIRST_BYTE = 0x80


def _to_wire(message: Any, shared: List[SharedBytes]) -> tuple:
    """The message as plain tuples; the descriptors of its shared payloads (whose places hold their sizes) are
    appended to `shared`, to travel beside the bytes, in order."""
    if type(message) is ProcessorOrders:
        tasks: list = message.tasks
        if tasks and type(tasks[0]) is not tuple:  # NamedTuples (tests): as plain tuples, like the agent's own
            tasks = [(*task[:6], [_placed(argument, shared) for argument in task[6]], *task[7:]) for task in tasks]
        shared.extend(message.shared)
        spares = tuple((object_id, spare.size) for object_id, spare in message.spares)
        shared.extend(spare for _, spare in message.spares)
        return (_ORDERS, tasks, message.drops, message.end_of_parking, tuple(message.forget), len(shared), spares)
    if type(message) is ProcessorReport:
        results = [tuple(result) for result in message.results]
        shared.extend(message.shared)
        return (_REPORT, results, message.dropped, message.blocked, message.streamed, len(shared))
    raise TypeError(f"not a message of the processor channel: {type(message).__name__}")


def _placed(argument: Any, shared: List[SharedBytes]) -> tuple:
    """An argument of a test's NamedTuple task as the core builds it: a shared payload as its size."""
    if type(argument[2]) is not SharedBytes:
        return tuple(argument)
    shared.append(argument[2])
    return (argument[0], argument[1], argument[2].size, argument[3])


def _from_wire(wire: tuple, fds: Deque[int]) -> Any:
    # tuple.__new__ skips the NamedTuples' own __new__, a Python-level call per object; the fields are ours
    new = tuple.__new__
    if wire[0] == _ORDERS:
        tasks = wire[1]
        if wire[5]:  # shared payloads: their descriptors came with the message, in order
            for position, task in enumerate(tasks):
                if type(task[3]) is int or type(task[5]) is int:  # a large serializer or function, as its size
                    head = list(task)
                    for field in (3, 5):
                        if type(head[field]) is int:
                            head[field] = SharedBytes(fds.popleft(), head[field])
                    task = tasks[position] = tuple(head)
                arguments = task[6]
                for index, argument in enumerate(arguments):
                    if type(argument[2]) is int:
                        shared = SharedBytes(fds.popleft(), argument[2])
                        arguments[index] = (argument[0], argument[1], shared, argument[3])
        spares = tuple((object_id, SharedBytes(fds.popleft(), size)) for object_id, size in wire[6])
        # Tasks and their arguments stay plain tuples: the processor unpacks each once (processor.py).
        return new(ProcessorOrders, (tasks, wire[2], wire[3], wire[4], (), spares))  # shared payloads: in the tasks
    results = wire[1]
    if wire[5]:
        results = [
            (result[0], result[1], SharedBytes(fds.popleft(), result[2]), *result[3:])
            if type(result[2]) is int
            else result
            for result in results
        ]
    return new(ProcessorReport, ([new(ProcessorResult, result) for result in results], wire[2], wire[3], wire[4], ()))


def split_for_descriptors(message: Any) -> List[Any]:
    """The message as several, in order, if it carries more shared payloads than one message may (rare: only then
    are its items looked at, by the sizes standing for their payloads)."""
    if len(message.shared) <= MAX_SHARED_PER_MESSAGE:
        return [message]
    orders = type(message) is ProcessorOrders
    items = message.tasks if orders else message.results
    parts: List[Tuple[list, list]] = [([], [])]
    shared = list(message.shared)
    for item in items:
        if orders:
            count = (type(item[3]) is int) + (type(item[5]) is int) + sum(type(arg[2]) is int for arg in item[6])
        else:
            count = int(type(item[2]) is int)
        if len(parts[-1][1]) + count > MAX_SHARED_PER_MESSAGE and parts[-1][0]:
            parts.append(([], []))
        parts[-1][0].append(item)
        parts[-1][1].extend(shared[:count])
        del shared[:count]
    if orders:  # drops and the end of a parking go with the first part: they come first
        first, *rest = parts
        return [message._replace(tasks=first[0], shared=first[1])] + [
            ProcessorOrders(tasks, [], shared=part_shared) for tasks, part_shared in rest
        ]
    # results first; what the processor says of itself (dropped tasks, a parking) with the last part
    *rest, last = parts
    return [ProcessorReport(results, [], shared=part_shared) for results, part_shared in rest] + [
        message._replace(results=last[0], shared=last[1])
    ]


def encode_message(message: Any) -> bytes:
    """A message without shared payloads (see encode_shared)."""
    body, shared = encode_shared(message)
    if shared:
        raise ValueError("a message with shared payloads travels with their descriptors: use encode_shared")
    return body


def encode_shared(message: Any) -> Tuple[bytes, List[SharedBytes]]:
    """The message's bytes, and the shared payloads whose descriptors must travel with them (send_encoded)."""
    shared: List[SharedBytes] = []
    wire = _to_wire(message, shared)
    try:
        return marshal.dumps(wire, _MARSHAL_VERSION), shared
    except ValueError:  # a bytes object over 2 GiB (or a value of a type marshal does not write)
        return pickle.dumps(wire, protocol=pickle.HIGHEST_PROTOCOL), shared


def decode_message(body: Any, fds: Optional[Deque[int]] = None) -> Any:
    """The message encode_message wrote into `body` (bytes or a memoryview); `fds`: the descriptors received with it,
    taken in order for its shared payloads."""
    wire = pickle.loads(body) if body[0] == _PICKLE_FIRST_BYTE else marshal.loads(body)
    return _from_wire(wire, fds if fds is not None else deque())


def frame_encoded(body: bytes) -> Tuple[bytes, ...]:
    """The bytes to send for an encoded message: one piece if small, else two, since concatenating would copy."""
    header = _HEADER.pack(len(body))
    if len(body) < SMALL_MESSAGE_BYTES:
        return (header + body,)
    return header, body


def pieces(body: bytes, shared: Sequence[SharedBytes] = ()) -> List[Tuple[memoryview, Sequence[SharedBytes]]]:
    """What to send of an encoded message, in order: (bytes, the shared payloads whose descriptors go with them). The
    descriptors go with its first bytes, MAX_SHARED_PER_MESSAGE at most with each: a piece of one byte for each such
    batch but the last, which goes with the rest of its part. Each sendmsg's descriptors then arrive with a read of its
    bytes, and the message is complete only once they all have."""
    parts = [memoryview(part) for part in frame_encoded(body)]
    if not shared:
        return [(part, ()) for part in parts]
    batches = [shared[i : i + MAX_SHARED_PER_MESSAGE] for i in range(0, len(shared), MAX_SHARED_PER_MESSAGE)]
    out: List[Tuple[memoryview, Sequence[SharedBytes]]] = []
    for part in parts:
        while len(batches) > 1 and len(part) > 1:
            out.append((part[:1], batches.pop(0)))
            part = part[1:]
        out.append((part, batches.pop(0) if batches else ()))
    if batches:  # a message has a byte for each of its shared payloads at least: never
        raise ValueError(f"{len(shared)} descriptors for a message of {len(body)} bytes")
    return out


def send_encoded(sock: socket.socket, body: bytes, shared: Sequence[SharedBytes] = ()) -> None:
    """Send a message (blocking), the descriptors of its shared payloads with its first bytes (pieces())."""
    for piece, descriptors in pieces(body, shared):
        if descriptors:
            sent = sock.sendmsg([piece], [fd_message(descriptors)])
            if sent < len(piece):
                sock.sendall(piece[sent:])
        else:
            sock.sendall(piece)


def fd_message(shared: Sequence[SharedBytes]) -> Tuple[int, int, bytes]:
    """The ancillary data passing the descriptors of `shared` (SCM_RIGHTS)."""
    return (socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [item.fd for item in shared]).tobytes())


def send_message(sock: socket.socket, message: Any) -> None:
    body, shared = encode_shared(message)
    send_encoded(sock, body, shared)


class MessageReader:
    """Reads messages as they complete, without ever blocking unless asked to."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()
        # recv_into a buffer kept for good: sock.recv(n) allocates n bytes per call, and at this size that is an
        # mmap and munmap each time (over 20 us, more than the rest of reading a batch of results).
        self._scratch = memoryview(bytearray(_READ_CHUNK_BYTES))
        self._fds: Deque[int] = deque()  # received with the bytes, for the shared payloads of messages not parsed yet
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
                size, ancillary, flags, _ = self._sock.recvmsg_into([scratch], _ANCILLARY_BYTES, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except OSError:
                self.closed = True
                break
            if ancillary:
                self._take_fds(ancillary, flags)
            if not size:
                self.closed = True
                break
            self._buffer += scratch[:size]
            if size < _READ_CHUNK_BYTES:
                break  # drained: saves the syscall that would only say EAGAIN
        return self._parse()

    def _take_fds(self, ancillary: List[Tuple[int, int, bytes]], flags: int) -> None:
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received = array.array("i")
                received.frombytes(data[: len(data) - len(data) % received.itemsize])
                self._fds.extend(received)
        if flags & socket.MSG_CTRUNC:  # descriptors were dropped: the messages they belong to cannot be read
            raise OSError("the processor channel dropped file descriptors (MSG_CTRUNC)")

    def close_fds(self) -> None:
        """Close descriptors received for messages that will never be read (the peer is gone)."""
        while self._fds:
            os.close(self._fds.popleft())

    def wait(self, timeout: Optional[float] = None) -> List[Any]:
        """Block until at least one message is complete or the peer has gone, or for at most `timeout` seconds without
        a byte (then []) if given."""
        while True:
            messages = self.read_available()
            if messages or self.closed:
                return messages
            if not select.select([self._sock], [], [], timeout)[0] and timeout is not None:
                return []

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
                    messages.append(decode_message(body, self._fds))
                start = end
        if start:
            del self._buffer[:start]
        return messages


class SharedProgress:
    """A few counters in memory shared by an agent and its processor (a memfd both map), read and written without a
    system call: the seq of the task the processor started last and of the one it finished last (written by the
    processor), how many orders the agent posted (written by the agent, so that the processor reads its socket
    between tasks only when there is something to read), how many bytes of held results the processor keeps
    mapped (written by the processor; the agent's memory sample leaves them out, as held results count already), and
    how many its spare files hold (written by the processor; the agent's memory sample adds them).

    Native 8-byte aligned integers, each written by one side only, with one store each (struct's native format
    copies the whole word), so a reader never sees half of one; the seqs and the count of orders only grow."""

    _WORDS = struct.Struct("QQQQQ")  # started, finished, orders posted, kept bytes, spare bytes
    _WORD = struct.Struct("Q")
    _STARTED, _FINISHED, _POSTED, _KEPT, _SPARE = 0, 8, 16, 24, 32

    def __init__(self, fd: int) -> None:
        self._memory = mmap.mmap(fd, self._WORDS.size)  # mmap keeps its own duplicate of fd
        self._posted = 0

    @classmethod
    def create_fd(cls) -> int:
        """A new zeroed shared memory file; the caller passes it on and closes it."""
        fd = shared_fd("scaler-progress")
        os.ftruncate(fd, cls._WORDS.size)
        return fd

    # the processor's side
    def start(self, seq: int) -> None:
        self._WORD.pack_into(self._memory, self._STARTED, seq)

    def finish(self, seq: int) -> None:
        self._WORD.pack_into(self._memory, self._FINISHED, seq)

    def orders_posted(self) -> int:
        return self._WORD.unpack_from(self._memory, self._POSTED)[0]

    def set_kept(self, kept_bytes: int) -> None:
        self._WORD.pack_into(self._memory, self._KEPT, kept_bytes)

    def set_spare(self, spare_bytes: int) -> None:
        self._WORD.pack_into(self._memory, self._SPARE, spare_bytes)

    # the agent's side
    def read(self) -> Tuple[int, int]:
        """(seq of the task started last, seq of the task finished last)."""
        started, finished, _, _, _ = self._WORDS.unpack_from(self._memory)
        return started, finished

    def kept(self) -> int:
        """The bytes of held results the processor keeps mapped (mapped_inputs.py)."""
        return self._WORD.unpack_from(self._memory, self._KEPT)[0]

    def spare(self) -> int:
        """The bytes of the spare files the processor keeps (spares.py): its memory, which no mapping shows."""
        return self._WORD.unpack_from(self._memory, self._SPARE)[0]

    def post_orders(self) -> None:
        self._posted += 1
        self._WORD.pack_into(self._memory, self._POSTED, self._posted)

    def close(self) -> None:
        self._memory.close()
