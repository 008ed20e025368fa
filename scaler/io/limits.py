"""Internal: how many peers a process can hold, and what it does at the limit.

Every TCP connection costs a process one file descriptor, and Linux starts a process with a soft limit on them that is
often 1,024 (the hard limit, which an unprivileged process may raise its soft limit to, is usually far higher). A
scheduler that runs out cannot accept a connection; libzmq then retries the accept forever, and the process spins at
100% CPU while its newest peers never get in. So:

- `raise_open_files_limit` raises the soft limit as far as the hard limit allows, at start;
- `size_context` lets a ZeroMQ context hold as many sockets as the process may open files;
- `ConnectionBudget` counts the connections of the scheduler's listening socket, from its monitor events, and when only
  a reserve of descriptors is left it stops new connections at the door: a socket filter on the listening socket drops
  what reaches it (SYNs, handshakes under way), so connecting peers wait in TCP's own retries instead of spinning the
  scheduler, and the peers it has are served as before. Below the limit again, the filter is removed and the waiting
  peers get in. It logs why, rate limited. Should libzmq run out of descriptors all the same (a burst outruns the
  count), the budget turns away what the kernel already queued for it, so that libzmq's accept, which it retries as
  long as any connection waits, stops.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import select
import socket
import struct
import sys
import time
from typing import Callable, Dict, List, NamedTuple, Optional

try:
    import resource
except ImportError:  # not on Windows, where none of this applies
    resource = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

# What the listening socket queues of connections not yet accepted; Linux caps it at net.core.somaxconn (4,096 on
# recent kernels). libzmq's default, 100, drops the SYNs of a thousand workers starting at once, costing them seconds.
LISTEN_BACKLOG = 4096
# Descriptors kept free for everything that is not a peer: log files, monitors subscribing, ZeroMQ's own; an eighth
# of the limit where it is small.
RESERVE_DESCRIPTORS = 64


def reserve(open_files: OpenFiles) -> int:
    return min(RESERVE_DESCRIPTORS, max(16, open_files.soft // 8))


_UNLIMITED_FALLBACK = 1 << 20  # when the hard limit is "unlimited": Linux's own default for fs.nr_open
_LOG_EVERY_SECONDS = 60.0
HOW_TO_RAISE = (
    "raise the open-files limit of the process: `ulimit -n N` in its shell (up to `ulimit -Hn`), LimitNOFILE= in a "
    "systemd unit, nofile in /etc/security/limits.conf, or --ulimit nofile=N:N for a container"
)


class OpenFiles(NamedTuple):
    before: int  # the soft limit the process started with
    soft: int  # the soft limit now
    hard: int

    def describe(self) -> str:
        raised = f"raised from {self.before}; " if self.soft != self.before else ""
        return f"open-files limit {self.soft} ({raised}hard limit {self.hard})"


def raise_open_files_limit(wanted: Optional[int] = None) -> OpenFiles:
    """Raise the soft RLIMIT_NOFILE to the hard limit (or to `wanted`, if lower and higher than the soft limit)."""
    if resource is None:
        return OpenFiles(0, 0, 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = hard if hard != resource.RLIM_INFINITY else _nr_open()
    target = ceiling if wanted is None else min(ceiling, wanted)
    if soft != resource.RLIM_INFINITY and target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as error:
            logger.warning("could not raise the open-files limit from %d to %d: %s", soft, target, error)
        else:
            return OpenFiles(soft, target, _finite(hard))
    return OpenFiles(_finite(soft), _finite(soft), _finite(hard))


def _nr_open() -> int:
    try:
        with open("/proc/sys/fs/nr_open") as file:
            return int(file.read())
    except (OSError, ValueError):
        return _UNLIMITED_FALLBACK


def _finite(limit: int) -> int:
    return _nr_open() if resource is not None and limit == resource.RLIM_INFINITY else limit


def open_descriptors() -> Optional[int]:
    """How many files this process has open (Linux), or None where /proc does not tell."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # minus the one listdir itself holds
    except OSError:
        return None


def listen_backlog(open_files: OpenFiles) -> int:
    """How many connections the listening socket may queue unaccepted. Each may still be accepted after the door
    closes, so `ConnectionBudget` keeps descriptors in reserve for them: LISTEN_BACKLOG where descriptors abound, a
    sixteenth of those left after the fixed reserve where they are few."""
    return max(16, min(LISTEN_BACKLOG, (open_files.soft - reserve(open_files)) // 16))


def size_context(context, open_files: OpenFiles) -> int:
    """Let a ZeroMQ context hold as many sockets as the process may open files (libzmq's default is 1,023)."""
    import zmq

    limit = max(1024, min(open_files.soft, context.get(zmq.SOCKET_LIMIT)))
    context.set(zmq.MAX_SOCKETS, limit)
    return limit


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.getsockopt.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    libc.setsockopt.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32]
    libc.getsockname.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    libc.accept4.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    return libc


def find_listening_socket(port: int) -> Optional[int]:
    """A duplicate descriptor of this process's listening TCP socket on `port` (libzmq's, after bind), or None.

    Looked at through libc, not Python socket objects: on PyPy, wrapping a descriptor makes it blocking, which
    would break the event loop's and libzmq's sockets it passes by."""
    try:
        libc = _libc()
        descriptors = [int(name) for name in os.listdir("/proc/self/fd")]
    except (OSError, AttributeError):
        return None
    value = ctypes.c_int(0)
    size = ctypes.c_uint32(4)
    address = ctypes.create_string_buffer(128)
    address_size = ctypes.c_uint32(128)
    for fd in descriptors:
        size.value = 4
        if libc.getsockopt(fd, socket.SOL_SOCKET, socket.SO_ACCEPTCONN, ctypes.byref(value), ctypes.byref(size)):
            continue  # not a socket, or closed meanwhile
        if not value.value:
            continue
        address_size.value = 128
        if libc.getsockname(fd, address, ctypes.byref(address_size)):
            continue
        family = struct.unpack_from("=H", address.raw)[0]
        if family in (socket.AF_INET, socket.AF_INET6) and struct.unpack_from(">H", address.raw, 2)[0] == port:
            try:
                return os.dup(fd)
            except OSError:
                return None
    return None


class SynGate:
    """Closes and opens a listening TCP socket's door with a classic BPF socket filter (Linux). While closed, the
    listening socket drops every packet that reaches it, so no connection completes: neither new ones (SYNs), nor
    handshakes under way, nor those a SYN cookie answered before (their ACKs would otherwise keep coming in for
    minutes); their peers retry in TCP. Established connections have sockets of their own and are untouched; what the
    kernel had already queued (at most the backlog and one) is all that can still be accepted. Owns `fd`, a duplicate
    of the listening socket's descriptor.

    A connection the kernel creates at the very moment the door closes copies the filter and drops what its peer sends
    until ZeroMQ's handshake timeout closes it (30 s); the peer then reconnects.

    The gate can also turn away the connections the kernel queued, accepting and closing each at once: their peers
    retry, through the shut door, so they wait in TCP until it opens."""

    _SO_ATTACH_FILTER = 26
    _SO_DETACH_FILTER = 27

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._libc = _libc()
        # ret #0: keep nothing of any packet. Not only SYNs: a handshake answered before the door closed (with a SYN
        # cookie, when the SYN queue overflowed in a burst) completes on its ACK, and would pass a SYN-only filter.
        code = struct.pack("<HBBI", 0x06, 0, 0, 0)
        self._code = ctypes.create_string_buffer(code, len(code))  # kept alive: the kernel reads it at attach
        program = struct.pack("@HP", len(code) // 8, ctypes.addressof(self._code))  # struct sock_fprog
        self._program = ctypes.create_string_buffer(program, len(program))
        # accepting must never block the event loop: libzmq's listener is non-blocking already (the flag belongs to the
        # open file, which this duplicate shares), set again so the gate does not depend on it
        os.set_blocking(fd, False)
        self._queue = select.poll()  # not a Python socket object: see find_listening_socket
        self._queue.register(fd, select.POLLIN)
        self.closed = False

    @staticmethod
    def available() -> bool:
        return sys.platform.startswith("linux")

    def close(self) -> None:
        if not self.closed:
            self._setsockopt(self._SO_ATTACH_FILTER, self._program, len(self._program))
            self.closed = True

    def open(self) -> None:
        if self.closed:
            self._setsockopt(self._SO_DETACH_FILTER, ctypes.create_string_buffer(4), 4)
            self.closed = False

    def release(self) -> None:
        self.open()
        os.close(self._fd)

    def queued(self) -> bool:
        """Whether connections wait in the listening socket's queue, accepted by the kernel, not yet by libzmq."""
        return bool(self._queue.poll(0))

    def turn_away(self) -> int:
        """Accept one queued connection and close it at once: 0, or the errno (EAGAIN: none queued; EMFILE: no
        descriptor free to accept it with)."""
        fd = self._libc.accept4(self._fd, None, None, socket.SOCK_CLOEXEC)
        if fd < 0:
            return ctypes.get_errno()
        os.close(fd)
        return 0

    def _setsockopt(self, option: int, value, size: int) -> None:
        if self._libc.setsockopt(self._fd, socket.SOL_SOCKET, option, value, size):
            error = ctypes.get_errno()
            raise OSError(error, f"setsockopt on the listening socket: {os.strerror(error)}")


_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)
# accept4 turned one away (0), or the connection was gone before it was accepted: the next one, then
_TURNED_AWAY_OR_GONE = (0, errno.ECONNABORTED, errno.EPROTO, errno.EINTR)


class ConnectionBudget:
    """The connections one listening socket may hold before the process runs out of descriptors, and the door.

    Fed the socket's monitor events (`accepted`, `disconnected`, `accept_failed`); closes the `gate` at `capacity`
    connections and opens it again `hysteresis` below. Without a gate (ipc addresses, not Linux) it can only log.

    The events reach it late (libzmq accepts in its own thread), so a burst of peers can overshoot the capacity, past
    the descriptors the process has. libzmq then retries its accept for as long as a connection waits in the
    listening socket's queue: the spin. With a gate the budget therefore holds spare descriptors, one per connection
    the listening socket may queue and a few more. When libzmq fails to accept for want of descriptors, the door is
    shut (nothing more reaches the queue, which holds at most the backlog and one) and the budget empties the queue
    itself: it frees a spare, accepts with it and closes what it accepted, until the queue is empty, and takes the
    spare back. libzmq, which retries its accept all the time, often takes the freed descriptor first: that admits
    one queued peer, and the next spare is used. The spares outnumber what the queue can hold, so it empties either
    way. The door opens again once enough peers left."""

    def __init__(
        self,
        what: str,
        open_files: OpenFiles,
        descriptors_in_use: int,
        gate: Optional[SynGate],
        backlog: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`backlog`: the listening socket's; connections it queued when the door closed still come in."""
        self.what = what
        self.open_files = open_files
        self._spares_wanted = backlog + 8 if gate is not None else 0
        self._spares: List[int] = []
        self.capacity = max(
            1, open_files.soft - descriptors_in_use - reserve(open_files) - backlog - self._spares_wanted
        )
        self.hysteresis = max(1, self.capacity // 100)
        self.gate = gate
        self._hold_spares()
        self.connections = 0
        self.refused_while_full = 0  # failed accepts (out of descriptors anyway), for the log
        self.turned_away = 0  # queued connections accepted and closed at once, for the log
        self._clock = clock
        self._last_logged: Dict[str, float] = {}  # kind of line -> when it was last logged
        self._warned_near = False

    def describe(self) -> str:
        door = "" if self.gate is not None else "; past it, new connections fail (no socket filter here)"
        return f"can hold {self.capacity} peers on the {self.what} ({self.open_files.describe()}){door}"

    def accepted(self) -> None:
        self.connections += 1
        if self.connections >= self.capacity:
            if self.gate is None:
                self._say(
                    "full",
                    logging.WARNING,
                    f"{self.connections} peers connected to the {self.what}, the most the "
                    f"{self.open_files.describe()} allows: further connections will fail; {HOW_TO_RAISE}",
                )
            elif not self.gate.closed:
                self.gate.close()
                self._say(
                    "full",
                    logging.WARNING,
                    f"{self.connections} peers connected to the {self.what}, the most the "
                    f"{self.open_files.describe()} allows: new connections wait (in TCP's retries) until peers "
                    f"leave; {HOW_TO_RAISE}",
                )
        elif not self._warned_near and self.connections >= self.capacity * 9 // 10:
            self._warned_near = True
            self._say(
                "near",
                logging.WARNING,
                f"{self.connections} peers connected to the {self.what}, near the {self.capacity} the "
                f"{self.open_files.describe()} allows; {HOW_TO_RAISE}",
            )

    def disconnected(self) -> None:
        self.connections = max(0, self.connections - 1)
        if (
            self.gate is not None
            and self.gate.closed
            and self.connections <= self.capacity - self.hysteresis
            and self._hold_spares()
        ):
            self.gate.open()
            self._say(
                "open", logging.INFO, f"{self.connections} peers connected to the {self.what}: accepting new ones again"
            )
        if self.connections < self.capacity * 8 // 10:
            self._warned_near = False

    def accept_failed(self, error: int) -> None:
        """libzmq could not accept: out of descriptors before the count says so (a burst, other files), or a passing
        error. libzmq retries at once, as long as the connection waits, so these come in floods: past the first, one
        costs a poll of the queue."""
        if error not in (errno.EMFILE, errno.ENFILE):
            return
        self.refused_while_full += 1
        gate = self.gate
        if gate is not None:
            gate.close()
            if gate.queued():
                self._turn_away_queued(gate)
        if self._due("failed"):
            turned_away = (
                f"; {self.turned_away} connection(s) it had queued were turned away, to retry"
                if self.turned_away
                else ""
            )
            logger.warning(
                f"could not accept a connection to the {self.what} ({os.strerror(error)}) with {self.connections} "
                f"peers connected, past what the {self.open_files.describe()} allows ({self.refused_while_full} "
                f"failed accept(s) so far{turned_away}): new connections wait (in TCP's retries) until peers leave; "
                f"{HOW_TO_RAISE}"
            )

    def close(self) -> None:
        self._release_spares()
        if self.gate is not None:
            self.gate.release()
            self.gate = None

    def _turn_away_queued(self, gate: SynGate) -> None:
        """Accept and close what the listening socket queued, a spare descriptor at a time (see the class)."""
        while self._spares:
            os.close(self._spares.pop())
            error = gate.turn_away()
            while error in _TURNED_AWAY_OR_GONE:
                if error == 0:
                    self.turned_away += 1
                error = gate.turn_away()
            if error not in _OUT_OF_DESCRIPTORS:
                break  # EAGAIN: the queue is empty (or accepting fails for good: nothing a descriptor mends)
            # libzmq took the descriptor just freed (a peer more) or another thread did: with the next spare
        self._hold_spares()

    def _hold_spares(self) -> bool:
        """Take the spare descriptors back (all, or False: still out of descriptors)."""
        try:
            while len(self._spares) < self._spares_wanted:
                self._spares.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            return False
        return True

    def _release_spares(self) -> None:
        for fd in self._spares:
            os.close(fd)
        self._spares.clear()

    def _say(self, kind: str, level: int, text: str) -> None:
        if self._due(kind):
            logger.log(level, text)

    def _due(self, kind: str) -> bool:
        """The first line of each kind, then at most one a minute: the door may close and open often."""
        now = self._clock()
        last = self._last_logged.get(kind)
        if last is None or now - last >= _LOG_EVERY_SECONDS:
            self._last_logged[kind] = now
            return True
        return False


def budget_for(router, what: str, open_files: OpenFiles, backlog: int) -> ConnectionBudget:
    """The connection budget of a ZeroMQ socket bound with `backlog`, with a door on its TCP listener where Linux
    allows one."""
    import zmq

    endpoint = router.getsockopt(zmq.LAST_ENDPOINT).decode()
    gate: Optional[SynGate] = None
    if endpoint.startswith("tcp://") and SynGate.available():
        listener = find_listening_socket(int(endpoint.rpartition(":")[2]))
        if listener is not None:
            gate = SynGate(listener)
    in_use = open_descriptors()
    return ConnectionBudget(what, open_files, in_use if in_use is not None else 0, gate, backlog)
