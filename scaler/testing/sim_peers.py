"""Internal: simulated Scaler workers and clients, thousands per process, each on its own ZeroMQ DEALER socket.

    python -m scaler.testing.sim_peers workers ADDRESS --count 4096 --capacity 16      # one process, 4,096 workers
    python -m scaler.testing.sim_peers clients ADDRESS --count 32 --scheduler-pid PID  # one process, 32 clients

Every simulated peer speaks the real protocol to a real scheduler: its own routing identity and connection, Hello and
HelloReply, heartbeats at the interval the scheduler names (a random phase each, so they do not arrive in step; each
peer follows the cadence its HelloReply and HeartbeatEchoes name, and says which it uses), and the answers the
scheduler expects (BalanceRequest answered with the tasks queued and not running).
A worker announces its capacity and answers each task after a simulated duration: at once, or after an exponential
time (it runs one task at a time and queues the rest, as a real worker does). A client submits tasks in frames of up to
256, as the real client batches them, and checks that every result comes back exactly once.

The peers are cheap so the scheduler stays the measured work: tasks are encoded from one template with the task id
spliced in, and a worker answers by splicing the id into a result template, never decoding a task. The sockets share one
context (its socket limit raised past ZeroMQ's default 1,023) and one epoll over their ZMQ_FDs.

A host is driven by JSON lines on stdin and answers on stdout (see `WorkerHost.command` and `ClientHost.command`);
`PeerHost` starts and drives one, for bench/scale/scale_sim.py, bench/throughput/scheduler_only.py and
tests/e2e/test_many_peers.py.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import select
import selectors
import struct
import subprocess
import sys
import time
from array import array
from collections import deque
from pathlib import Path
from typing import IO, Any, Deque, Dict, Iterator, List, Optional, Tuple, cast

import psutil
import zmq

from scaler.io.limits import raise_open_files_limit
from scaler.protocol import (
    PROTOCOL_VERSION,
    Argument,
    ArgumentKind,
    BalanceRequest,
    BalanceResponse,
    ClientHeartbeat,
    Goodbye,
    HeartbeatEcho,
    Hello,
    HelloReply,
    Role,
    Task,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerHeartbeat,
    decode_frame,
    encode,
)

_ROOT = Path(__file__).resolve().parents[2]  # where `python -m scaler.testing.sim_peers` finds this checkout
TASKS_PER_FRAME = 256  # scaler.config.DEFAULT_TASKS_PER_FRAME: what the real client puts in one frame
FUNCTION_ID = bytes(range(16))
_HEADER = struct.Struct("<II")  # Cap'n Proto stream framing: segment count - 1, words of the first segment
_MARKER = b"\xa5ID-MARKER-16B\x5a\xc3"  # 16 bytes, found once in each template
_CONNECT_WAVE = 128  # sockets connected per wave: the scheduler's listen backlog must not overflow
_CONNECT_WAVE_SECONDS = 0.02


def _template(message: Any) -> Tuple[bytes, bytes]:
    """The encoded message split around its 16-byte id, so that prefix + id + suffix encodes it with any id."""
    data = encode(message)
    at = data.find(_MARKER)
    if at < 0 or data.find(_MARKER, at + 1) >= 0:
        raise RuntimeError("the id marker must occur exactly once in a template")
    return data[:at], data[at + 16 :]


TASK_PREFIX, TASK_SUFFIX = _template(
    Task(task_id=_MARKER, function_id=FUNCTION_ID, args=[Argument(kind=ArgumentKind.inline, data=b"\x80\x05K\x07.")])
)
TASK_SIZE = len(TASK_PREFIX) + 16 + len(TASK_SUFFIX)
RESULT_PREFIX, RESULT_SUFFIX = _template(
    TaskResult(task_id=_MARKER, status=TaskStatus.success, payload=b"\x80\x05K\x00.")
)
RESULT_SIZE = len(RESULT_PREFIX) + 16 + len(RESULT_SUFFIX)


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _thread_files(pid: int, name: str) -> Iterator[str]:
    """The text of /proc/PID/task/*/NAME for each thread of the process; nothing once the process is gone, and nothing
    of a thread that ends meanwhile."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/{name}") as file:
                yield file.read()
        except OSError:
            continue


def io_thread_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process's ZeroMQ I/O threads (named ZMQbg/IO/N by libzmq): the share of a scheduler's CPU
    that reads and writes the sockets, apart from its main thread's."""
    total = 0
    for stat in _thread_files(pid, "stat"):
        name_end = stat.rindex(")")
        if stat[stat.index("(") + 1 : name_end].startswith("ZMQbg/IO"):
            fields = stat[name_end + 2 :].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")


def run_queue_seconds(pid: int) -> float:
    """Seconds the process's threads have waited for a CPU while runnable (Linux schedstat): how much the machine's
    other load delayed it, which no latency figure can show apart from the scheduler's own work."""
    total = 0
    for schedstat in _thread_files(pid, "schedstat"):
        try:
            total += int(schedstat.split()[1])
        except (IndexError, ValueError):
            continue  # a thread that ended while it was read
    return total / 1e9


def emit(event: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class Host:
    """One process's peers: a ZeroMQ context, an epoll over every socket's ZMQ_FD and stdin, and the timers."""

    def __init__(self, address: str, count: int, seed: int) -> None:
        raise_open_files_limit(2 * count + 256)  # a connection and a mailbox per socket
        self.address = address
        self.count = count
        self.connected = 0
        self.random = random.Random(seed)
        self.context = zmq.Context()
        self.context.set(zmq.MAX_SOCKETS, count + 64)
        self.epoll = select.epoll()
        self.by_fd: Dict[int, Any] = {}
        self.epoll.register(sys.stdin.fileno(), select.EPOLLIN)
        self.done = False
        self.heartbeats: List[Tuple[float, int, Any]] = []  # heap of (due, peer index, peer)
        self.heartbeat_messages: Dict[int, bytes] = {}  # interval in ms -> the encoded heartbeat stating it
        self.dirty: List[Any] = []  # peers with something to send
        self.start = time.monotonic()

    def open(self, peer: Any, identity: bytes, hello: bytes) -> None:
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.ROUTING_ID, identity)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.connect(self.address)
        peer.socket = sock
        fd = sock.fileno()
        self.by_fd[fd] = peer
        self.epoll.register(fd, select.EPOLLIN)
        sock.send(hello)
        # Arms ZMQ_FD: libzmq signals it only for a reader that found its queue empty once.
        if cast(int, sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
            self.read(peer)

    def run(self) -> None:
        stdin = sys.stdin.fileno()
        poll = self.epoll.poll
        by_fd = self.by_fd
        while not self.done:
            now = time.monotonic()
            timeout = max(0.0, min(self.next_timer(now), now + 0.05) - now)
            for fd, _ in poll(timeout):
                if fd == stdin:
                    line = sys.stdin.readline()
                    if not line:
                        self.done = True
                        break
                    emit(self.command(json.loads(line)))
                    continue
                peer = by_fd.get(fd)
                if peer is not None and peer.socket.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    self.read(peer)
            now = time.monotonic()
            self.timers(now)
            heartbeats = self.heartbeats
            while heartbeats and heartbeats[0][0] <= now:
                _, index, peer = heapq.heappop(heartbeats)
                if peer.socket is not None:
                    self.queue(peer, self.heartbeat_message(peer.interval_ms))
                    heapq.heappush(heartbeats, (now + peer.interval_ms / 1000.0, index, peer))
            self.flush()
        self.close()

    def hello_reply(self, peer: Any, message: HelloReply, role: str) -> None:
        """Accepted: heartbeats start, at the interval the scheduler named, at a random phase so they do not arrive in
        step; once every peer is in, the driver hears of it."""
        if not message.accepted:
            raise RuntimeError(f"the scheduler refused a simulated {role}: {message.reason}")
        if peer.connected:
            return
        peer.connected = True
        self.connected += 1
        peer.interval_ms = message.heartbeat_interval_ms or 1000
        due = time.monotonic() + self.random.random() * peer.interval_ms / 1000.0
        heapq.heappush(self.heartbeats, (due, peer.index, peer))
        if self.connected == self.count:
            emit({"event": "connected", f"{role}s": self.count})

    def flush(self) -> None:
        """Send what each peer has queued, one frame each; a send can swallow the edge of new input, so look again."""
        while self.dirty:
            dirty, self.dirty = self.dirty, []
            for peer in dirty:
                out = peer.out
                if not out:
                    continue
                peer.out = []
                sock = peer.socket
                sock.send(out[0] if len(out) == 1 else b"".join(out), zmq.NOBLOCK)
                if sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    self.read(peer)

    def queue(self, peer: Any, data: bytes) -> None:
        if not peer.out:
            self.dirty.append(peer)
        peer.out.append(data)

    def messages(self, frame: bytes):
        """(offset, end) of each message in a frame, without decoding it."""
        offset = 0
        size = len(frame)
        unpack = _HEADER.unpack_from
        while offset < size:
            segments, words = unpack(frame, offset)
            if segments:  # never written by our encoder; decode_frame handles it, the peers need not
                raise ValueError("multi-segment message from the scheduler")
            end = offset + 8 + words * 8
            yield offset, end
            offset = end

    def close(self) -> None:
        for peer in list(self.by_fd.values()):
            if peer.socket is not None:
                peer.socket.close(linger=0)
        self.context.term()

    # overridden
    def next_timer(self, now: float) -> float:
        return self.heartbeats[0][0] if self.heartbeats else now + 1.0

    def timers(self, now: float) -> None:
        pass

    def read(self, peer: Any) -> None:
        raise NotImplementedError

    def heartbeat_message(self, interval_ms: int) -> bytes:
        raise NotImplementedError

    def echo(self, peer: Any, message: HeartbeatEcho) -> None:
        """The cadence from now on, as the real peers follow it (0: unchanged)."""
        if message.heartbeat_interval_ms:
            peer.interval_ms = message.heartbeat_interval_ms

    def command(self, command: Dict[str, Any]) -> Dict[str, Any]:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------------------------------
# workers


class SimWorker:
    __slots__ = ("index", "socket", "out", "connected", "interval_ms", "queue", "running", "answered")

    def __init__(self, index: int) -> None:
        self.index = index
        self.socket: Optional[zmq.Socket] = None
        self.out: List[bytes] = []
        self.connected = False
        self.interval_ms = 1000  # heartbeat interval, as the scheduler named it
        self.queue: Deque[bytes] = deque()  # task ids received and not started
        self.running: Optional[bytes] = None
        self.answered = 0


class WorkerHost(Host):
    """Commands: {"cmd": "durations", "mean_ms": M} (0: answer at once; else exponential with mean M), {"cmd": "hold",
    "on": bool} (hold every task unanswered), {"cmd": "stats"}, {"cmd": "exit"} (WorkerDisconnect from each).
    Events: {"event": "connected", "workers": N} once all are accepted; {"event": "goodbye"} if the scheduler drops one.
    """

    def __init__(self, address: str, count: int, capacity: int, mean_ms: float, seed: int, name: str) -> None:
        super().__init__(address, count, seed)
        self.capacity = capacity
        self.mean_seconds = mean_ms / 1000.0
        self.hold = False
        self.name = name
        self.workers = [SimWorker(index) for index in range(count)]
        self.to_open = deque(self.workers)
        self.next_wave = 0.0
        self.finishing: List[Tuple[float, int, SimWorker]] = []  # (when, index, worker) of running tasks
        self.goodbyes = 0
        self.frames = 0  # frames the scheduler sent these workers: tasks per frame is what a frame's cost divides by
        self.trace: Optional[List[Tuple[bytes, float]]] = None  # while tracing: (task id, when its frame was read)

    def next_timer(self, now: float) -> float:
        deadline = super().next_timer(now)
        if self.finishing:
            deadline = min(deadline, self.finishing[0][0])
        if self.to_open:
            deadline = min(deadline, self.next_wave)
        return deadline

    def timers(self, now: float) -> None:
        if self.to_open and now >= self.next_wave:
            self.next_wave = now + _CONNECT_WAVE_SECONDS
            for _ in range(min(_CONNECT_WAVE, len(self.to_open))):
                worker = self.to_open.popleft()
                identity = f"W|sim|{self.name}|{os.getpid()}|{worker.index}".encode()
                hello = Hello(
                    protocol_version=PROTOCOL_VERSION,
                    role=Role.worker,
                    name=identity.decode(),
                    hostname="sim",
                    pid=os.getpid(),
                    capacity=self.capacity,
                )
                self.open(worker, identity, encode(hello))
        finishing = self.finishing
        while finishing and finishing[0][0] <= now:
            _, _, worker = heapq.heappop(finishing)
            assert worker.running is not None  # a finishing worker runs a task
            self.answer(worker, worker.running)
            worker.running = None
            self.start_next(worker, now)

    def answer(self, worker: SimWorker, task_id: bytes) -> None:
        worker.answered += 1
        self.queue(worker, RESULT_PREFIX + task_id + RESULT_SUFFIX)

    def start_next(self, worker: SimWorker, now: float) -> None:
        if worker.running is not None or not worker.queue or self.hold:
            return
        if self.mean_seconds <= 0:
            while worker.queue:
                self.answer(worker, worker.queue.popleft())
            return
        task_id = worker.queue.popleft()
        worker.running = task_id
        heapq.heappush(self.finishing, (now + self.random.expovariate(1.0 / self.mean_seconds), worker.index, worker))

    def read(self, worker: SimWorker) -> None:
        sock = worker.socket
        prefix = TASK_PREFIX
        id_at = len(prefix)
        task_size = TASK_SIZE
        instant = self.mean_seconds <= 0 and not self.hold
        trace = self.trace
        read_at = time.monotonic() if trace is not None else 0.0
        assert sock is not None  # read only while open
        while True:
            try:
                frame = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.frames += 1
            started = False
            for offset, end in self.messages(frame):
                if end - offset == task_size and frame.startswith(prefix, offset):
                    task_id = frame[offset + id_at : offset + id_at + 16]
                    if trace is not None:
                        trace.append((task_id, read_at))
                    if instant:
                        worker.answered += 1
                        if not worker.out:
                            self.dirty.append(worker)
                        worker.out.append(RESULT_PREFIX + task_id + RESULT_SUFFIX)
                    else:
                        worker.queue.append(task_id)
                        started = True
                    continue
                self.control(worker, decode_frame(frame[offset:end])[0])
            if started:
                self.start_next(worker, time.monotonic())

    def control(self, worker: SimWorker, message: Any) -> None:
        if isinstance(message, HeartbeatEcho):
            self.echo(worker, message)
            return
        if isinstance(message, BalanceRequest):  # hand back queued tasks that have not started, newest first
            moved = [worker.queue.pop() for _ in range(min(message.count, len(worker.queue)))]
            moved.reverse()
            self.queue(worker, encode(BalanceResponse(task_ids=moved)))
        elif isinstance(message, HelloReply):
            self.hello_reply(worker, message, "worker")
        elif isinstance(message, Goodbye):
            self.goodbyes += 1
            if self.goodbyes == 1:
                emit({"event": "goodbye", "reason": message.reason})
        else:
            raise RuntimeError(f"a simulated worker got an unexpected {type(message).__name__}")

    def heartbeat_message(self, interval_ms: int) -> bytes:
        data = self.heartbeat_messages.get(interval_ms)
        if data is None:  # processor up, idle
            data = self.heartbeat_messages[interval_ms] = encode(
                WorkerHeartbeat(sent_at_us=1, flags=1, interval_ms=interval_ms)
            )
        return data

    def command(self, command: Dict[str, Any]) -> Dict[str, Any]:
        name = command["cmd"]
        if name == "durations":
            self.mean_seconds = command["mean_ms"] / 1000.0
        elif name == "hold":
            self.hold = command["on"]
            if not self.hold:
                now = time.monotonic()
                for worker in self.workers:
                    self.start_next(worker, now)
        elif name == "trace":  # {"on": true}, then {"on": false, "path": P}: [[task id hex, when read], ...] to P
            if command["on"]:
                self.trace = []
            elif self.trace is not None:
                with open(command["path"], "w") as file:
                    json.dump([[task_id.hex(), at] for task_id, at in self.trace], file)
                self.trace = None
        elif name == "exit":
            for worker in self.workers:
                if worker.socket is not None:
                    worker.out = [encode(WorkerDisconnect(reason="simulation over"))]
                    self.dirty.append(worker)
            self.flush()
            self.done = True
        elif name != "stats":
            raise ValueError(f"unknown command {command!r}")
        return {
            "event": "ack",
            "cmd": name,
            "answered": sum(w.answered for w in self.workers),
            "held": sum(len(w.queue) + (w.running is not None) for w in self.workers),
            "connected": self.connected,
            "frames": self.frames,
            "cpu": cpu_seconds(os.getpid()),
        }


# ---------------------------------------------------------------------------------------------------------------------
# clients


class SimClient:
    __slots__ = (
        "index",
        "socket",
        "out",
        "connected",
        "interval_ms",
        "prefix",
        "next_number",
        "state",
        "sent_at",
        "outstanding",
    )

    def __init__(self, index: int, run_id: int) -> None:
        self.index = index
        self.socket: Optional[zmq.Socket] = None
        self.out: List[bytes] = []
        self.connected = False
        self.interval_ms = 1000  # heartbeat interval, as the scheduler named it
        self.prefix = struct.pack(">II", run_id, index)  # 8 bytes; a counter makes the other 8 of the task id
        self.next_number = 0
        self.state = bytearray()  # per task number: 1 submitted, 2 answered
        self.sent_at = array("d")
        self.outstanding = 0


class ClientHost(Host):
    """Commands (each answers when done):
    {"cmd": "closed", "window": N, "warmup": S, "seconds": S}: each client keeps N tasks outstanding; measured after
        the warm-up: results/s, latency percentiles, CPU seconds of the scheduler and of the peers.
    {"cmd": "open", "rate": R, "warmup": S, "seconds": S}: all clients together submit R tasks/s, paced every ms.
        With "trace": true in either, {"cmd": "dump", "path": P} then writes each measured task's id, when it was
        sent and its latency to P (bench/latency/latency_trace.py).
    {"cmd": "burst", "tasks": N}: submit N tasks now (spread over the clients) and answer once sent.
    {"cmd": "drain", "timeout": S}: wait until every submitted task is answered; fails if any is missing.
    {"cmd": "exit"}
    A result that was not expected (never submitted, or already answered) or is not a success stops the host."""

    def __init__(self, address: str, count: int, scheduler_pid: int, watch_pids: List[int], seed: int) -> None:
        super().__init__(address, count, seed)
        self.scheduler_pid = scheduler_pid
        self.watch_pids = watch_pids
        self.run_id = seed & 0xFFFFFFFF
        self.clients = [SimClient(index, self.run_id) for index in range(count)]
        self.mode = "idle"
        self.window = 0
        self.rate = 0.0
        self.paced_since = 0.0
        self.paced_sent = 0
        self.measuring = False
        self.answered = 0
        self.latencies = array("d")
        self.pacing_lags = array("d")  # open mode: how late each tick submitted the task first due in it
        self.tracing = False  # with "trace" in a phase command: each measured task's id and when it was sent, too
        self.traced_ids: List[bytes] = []
        self.traced_sent = array("d")
        self.phase: Optional[Dict[str, Any]] = None
        self.unexpected = 0
        self.frames = 0  # frames the scheduler sent these clients: results per frame, as tasks per frame to workers
        for client in self.clients:
            identity = b"C|sim|" + str(os.getpid()).encode() + b"|" + str(client.index).encode()
            hello = Hello(protocol_version=PROTOCOL_VERSION, role=Role.client, name=identity.decode(), hostname="sim")
            self.open(client, identity, encode(hello))

    # ---- submitting

    def submit(self, client: SimClient, count: int, now: float) -> None:
        """Queue `count` new tasks on a client, in frames of at most 256."""
        while count > 0:
            batch = min(count, TASKS_PER_FRAME)
            count -= batch
            first = client.next_number
            client.next_number = first + batch
            client.state.extend(b"\x01" * batch)
            client.sent_at.extend([now] * batch)
            client.outstanding += batch
            prefix = TASK_PREFIX + client.prefix
            parts = [prefix + number.to_bytes(8, "big") + TASK_SUFFIX for number in range(first, first + batch)]
            self.queue(client, b"".join(parts))

    def top_up(self, now: float) -> None:
        if self.mode == "closed":
            window = self.window
            for client in self.clients:
                room = window - client.outstanding
                if room >= TASKS_PER_FRAME:
                    self.submit(client, room - room % TASKS_PER_FRAME, now)
        elif self.mode == "open":
            due = int((now - self.paced_since) * self.rate) - self.paced_sent
            if due <= 0:
                return
            if self.measuring:  # task number paced_sent (0-based) was due at (paced_sent + 1) / rate
                self.pacing_lags.append(now - self.paced_since - (self.paced_sent + 1) / self.rate)
            self.paced_sent += due
            share, extra = divmod(due, self.count)
            start = self.paced_sent % self.count  # rotate who gets the remainder
            for offset in range(self.count):
                client = self.clients[(start + offset) % self.count]
                n = share + (1 if offset < extra else 0)
                if n:
                    self.submit(client, n, now)

    # ---- receiving

    def read(self, client: SimClient) -> None:
        sock = client.socket
        assert sock is not None  # read only while open
        prefix = RESULT_PREFIX + client.prefix
        number_at = len(prefix)
        result_size = RESULT_SIZE
        state = client.state
        now = time.monotonic()
        measuring = self.measuring
        while True:
            try:
                frame = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            self.frames += 1
            for offset, end in self.messages(frame):
                if end - offset == result_size and frame.startswith(prefix, offset):
                    number = int.from_bytes(frame[offset + number_at : offset + number_at + 8], "big")
                    if number >= len(state) or state[number] != 1:
                        self.fail(f"client {client.index}: result for task {number} not outstanding (twice?)")
                    state[number] = 2
                    client.outstanding -= 1
                    if measuring:
                        self.answered += 1
                        self.latencies.append(now - client.sent_at[number])
                        if self.tracing:
                            self.traced_ids.append(frame[offset + len(RESULT_PREFIX) : offset + number_at + 8])
                            self.traced_sent.append(client.sent_at[number])
                    continue
                self.control(client, decode_frame(frame[offset:end])[0])
        if self.mode == "closed":
            room = self.window - client.outstanding
            if room >= TASKS_PER_FRAME:
                self.submit(client, room - room % TASKS_PER_FRAME, now)

    def control(self, client: SimClient, message: Any) -> None:
        if isinstance(message, HeartbeatEcho):
            self.echo(client, message)
            return
        if isinstance(message, HelloReply):
            self.hello_reply(client, message, "client")
            return
        if isinstance(message, TaskResult):
            self.fail(f"client {client.index}: a result that is not a plain success: {message!r}")
        if isinstance(message, Goodbye):
            self.fail(f"client {client.index}: the scheduler said goodbye: {message.reason}")
        self.fail(f"client {client.index}: unexpected {type(message).__name__}")

    def fail(self, reason: str) -> None:
        emit({"event": "error", "reason": reason})
        raise SystemExit(1)

    def heartbeat_message(self, interval_ms: int) -> bytes:
        data = self.heartbeat_messages.get(interval_ms)
        if data is None:
            data = self.heartbeat_messages[interval_ms] = encode(ClientHeartbeat(sent_at_us=1, interval_ms=interval_ms))
        return data

    # ---- phases

    def next_timer(self, now: float) -> float:
        deadline = super().next_timer(now)
        if self.mode == "open":
            deadline = min(deadline, now + 0.001)
        if self.phase is not None:
            deadline = min(deadline, self.phase["next"])
        return deadline

    def timers(self, now: float) -> None:
        if self.mode == "open":
            self.top_up(time.monotonic())  # the time each task leaves: reading results may have taken a while
        phase = self.phase
        if phase is None or now < phase["next"]:
            return
        if phase["step"] == "warmup":
            phase["step"] = "measure"
            phase["next"] = now + phase["seconds"]
            phase["begin"] = self.sample(now)
            self.measuring = True
            self.answered = 0
            self.latencies = array("d")
            self.pacing_lags = array("d")
            self.traced_ids = []
            self.traced_sent = array("d")
        elif phase["step"] == "measure":
            self.measuring = False
            end = self.sample(now)
            begin = phase["begin"]
            self.phase = None
            self.mode = "idle"
            self.reply(self.figures(begin, end))
        elif phase["step"] == "drain":
            if not any(client.outstanding for client in self.clients):
                self.phase = None
                self.reply(self.totals())
            elif now > phase["deadline"]:
                missing = sum(client.outstanding for client in self.clients)
                self.fail(f"{missing} results still missing after {phase['timeout']}s")
            else:
                phase["next"] = now + 0.01

    def sample(self, now: float) -> Dict[str, Any]:
        peers = [os.getpid(), *self.watch_pids]
        return {
            "time": now,
            "answered": self.answered,
            "frames": self.frames,
            "submitted": sum(client.next_number for client in self.clients),
            "scheduler_cpu": cpu_seconds(self.scheduler_pid),
            "scheduler_io_cpu": io_thread_cpu_seconds(self.scheduler_pid),
            "scheduler_waited": run_queue_seconds(self.scheduler_pid),
            "client_host_cpu": cpu_seconds(os.getpid()),
            "peers_cpu": sum(cpu_seconds(pid) for pid in peers),
            "peers_waited": sum(run_queue_seconds(pid) for pid in peers),
        }

    def figures(self, begin: Dict[str, Any], end: Dict[str, Any]) -> Dict[str, Any]:
        seconds = end["time"] - begin["time"]
        routed = self.answered
        latencies = sorted(self.latencies)

        lags = sorted(self.pacing_lags)

        def percentile(p: float, values: List[float] = latencies) -> Optional[float]:
            return values[min(len(values) - 1, int(p * len(values)))] * 1000 if values else None

        def per_second(key: str) -> float:
            return (end[key] - begin[key]) / seconds

        def per_task_us(key: str) -> float:
            return (end[key] - begin[key]) / max(1, routed) * 1e6

        return {
            "event": "measured",
            "seconds": seconds,
            "routed": routed,
            "tasks_per_second": routed / seconds,
            "results_per_client_frame": routed / max(1, end["frames"] - begin["frames"]),
            "scheduler_cpu_seconds": end["scheduler_cpu"] - begin["scheduler_cpu"],
            "scheduler_cpu_us_per_task": per_task_us("scheduler_cpu"),
            "scheduler_cpu_cores": per_second("scheduler_cpu"),
            # of it, ZeroMQ's I/O thread: what frames cost in system calls, which grows as tasks per frame shrink
            "scheduler_io_cpu_us_per_task": per_task_us("scheduler_io_cpu"),
            # the share of the phase the scheduler's threads were runnable but waited for a CPU (the machine's load)
            "scheduler_waited_share": per_second("scheduler_waited"),
            "peers_cpu_cores": per_second("peers_cpu"),
            "client_host_cpu_cores": per_second("client_host_cpu"),
            "peers_waited_share": per_second("peers_waited"),
            "submitted_per_second": per_second("submitted"),
            "outstanding_at_end": sum(client.outstanding for client in self.clients),
            "latency_p50_ms": percentile(0.50),
            "latency_p90_ms": percentile(0.90),
            "latency_p99_ms": percentile(0.99),
            "latency_max_ms": latencies[-1] * 1000 if latencies else None,
            "pacing_lag_p99_ms": percentile(0.99, lags),
        }

    def totals(self) -> Dict[str, Any]:
        submitted = sum(client.next_number for client in self.clients)
        answered = sum(client.state.count(2) for client in self.clients)
        return {"event": "drained", "submitted": submitted, "answered": answered}

    def reply(self, event: Dict[str, Any]) -> None:
        emit(event)

    def command(self, command: Dict[str, Any]) -> Dict[str, Any]:
        """Phases answer later, through `reply`; the immediate answer only acknowledges them."""
        name = command["cmd"]
        now = time.monotonic()
        if name in ("closed", "open"):
            self.mode = name
            self.window = int(command.get("window", 0))
            self.rate = float(command.get("rate", 0.0))
            self.paced_since = now
            self.paced_sent = 0
            self.phase = {"step": "warmup", "next": now + command["warmup"], "seconds": command["seconds"]}
            self.tracing = bool(command.get("trace", False))
            self.top_up(now)
        elif name == "burst":
            share, extra = divmod(int(command["tasks"]), self.count)
            for client in self.clients:
                self.submit(client, share + (1 if client.index < extra else 0), now)
            self.flush()
        elif name == "drain":
            self.mode = "idle"
            timeout = float(command["timeout"])
            self.phase = {"step": "drain", "next": now, "deadline": now + timeout, "timeout": timeout}
        elif name == "dump":  # the last measured phase's tasks, when traced: [[task id hex, sent, latency], ...]
            with open(command["path"], "w") as file:
                rows = zip(self.traced_ids, self.traced_sent, self.latencies)
                json.dump([[task_id.hex(), sent, latency] for task_id, sent, latency in rows], file)
        elif name == "exit":
            self.done = True
        elif name != "stats":
            raise ValueError(f"unknown command {command!r}")
        return {"event": "ack", "cmd": name, "outstanding": sum(client.outstanding for client in self.clients)}


# ---------------------------------------------------------------------------------------------------------------------
# the driver, in the benchmark's or the test's process


class PeerHost:
    """A process of simulated peers (`python -m scaler.testing.sim_peers ROLE ...`), driven by JSON lines: `ask` a
    command and get its acknowledgement, `expect` the events that come later."""

    def __init__(self, python: str, args: List[str], log_path: Path) -> None:
        self._log = open(log_path, "wb")
        self.log_path = log_path
        self.popen = subprocess.Popen(
            [python, "-m", "scaler.testing.sim_peers", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=_ROOT,
        )
        self.pid = self.popen.pid
        self._stdin = cast(IO[bytes], self.popen.stdin)  # both pipes, as asked
        self._stdout = cast(IO[bytes], self.popen.stdout)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._stdout, selectors.EVENT_READ)
        self._buffer = b""

    def send(self, command: Dict[str, Any]) -> None:
        self._stdin.write((json.dumps(command) + "\n").encode())
        self._stdin.flush()

    def expect(self, event: str, timeout: float) -> Dict[str, Any]:
        """The next message of kind `event`; raises on an error event, an exit or the timeout."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                message = json.loads(line)
                if message.get("event") == "error":
                    raise RuntimeError(f"simulated peers (pid {self.pid}): {message['reason']}")
                if message.get("event") == event:
                    return message
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {event!r} from simulated peers (pid {self.pid}) within {timeout}s")
            if self._selector.select(min(left, 1.0)):
                chunk = os.read(self._stdout.fileno(), 65536)
                if not chunk:
                    self.popen.wait(5)
                    raise RuntimeError(
                        f"simulated peers (pid {self.pid}) exited with {self.popen.returncode}:\n{self.log()}"
                    )
                self._buffer += chunk

    def ask(self, command: Dict[str, Any], timeout: float = 60.0) -> Dict[str, Any]:
        self.send(command)
        return self.expect("ack", timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.popen.poll() is None:
            try:
                self.ask({"cmd": "exit"}, timeout=10)
            except (OSError, RuntimeError, TimeoutError):
                pass
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self._selector.close()
        self._log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", choices=("workers", "clients"))
    parser.add_argument("address")
    parser.add_argument("--count", type=int, required=True, help="simulated peers in this process")
    parser.add_argument("--capacity", type=int, default=16, help="workers: tasks each accepts at once")
    parser.add_argument("--mean-ms", type=float, default=0.0, help="workers: mean task duration (0: answer at once)")
    parser.add_argument("--scheduler-pid", type=int, default=0, help="clients: whose CPU time to measure")
    parser.add_argument("--watch-pid", type=int, action="append", default=[], help="clients: peer hosts' pids (CPU)")
    parser.add_argument("--name", default="0", help="workers: part of each identity, unique per host")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.count < 1:
        parser.error("--count must be >= 1")
    if args.role == "workers":
        WorkerHost(args.address, args.count, args.capacity, args.mean_ms, args.seed, args.name).run()
    else:
        ClientHost(args.address, args.count, args.scheduler_pid, args.watch_pid, args.seed).run()


if __name__ == "__main__":
    main()
