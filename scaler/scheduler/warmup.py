"""Warm PyPy's JIT before the scheduler serves: synthetic peers against a private scheduler in this process.

Under PyPy the scheduler's hot paths run in the interpreter until the JIT has traced them, which takes some thousands
of tasks. A fresh PyPy scheduler spent about 40 µs of CPU per task on a user's first 10,000-task graph, 12 to 15 on
the same graph later (measured: docs/performance.md, JIT warm-up). The first tasks of every cluster paid for it.

So before it serves, the scheduler runs, for `jit_warmup_seconds`, a private scheduler: a second SchedulerShell with
its own ZeroMQ context on an ipc endpoint in a temporary directory, in the same event loop, and one synthetic client
and two synthetic workers on DEALER sockets (SyntheticPeers: a map, and a reduction tree whose small results the core
inlines into the tasks that read them; the workers answer every task at once). The whole path is traced that way:
the event loop, the shell's reading and sending, the codec and the core. The client first puts its function as an
object and each worker fetches it before its first results, as real peers do: without these object messages, PyPy
threw away the core's hottest loops when a real client connected (its guesses about the attributes of the core's
objects no longer held: PYPYLOG's jit-invalidate-quasi-immutable) and traced them again during the client's first
graph (docs/performance.md, "The first graph's retraced loops"). Only the code is shared with the real
scheduler (traces are per code path, not per object); nothing of the private one is logged, and it leaves nothing
behind. On CPython there is nothing to warm: the setting is ignored there.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Set, Tuple

import zmq

from scaler.protocol import (
    PROTOCOL_VERSION,
    Argument,
    ArgumentKind,
    ClientDisconnect,
    ClientHeartbeat,
    Hello,
    ObjectKind,
    ObjectPut,
    ObjectRequest,
    Role,
    Task,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerHeartbeat,
    decode_frame_for_routing,
    encode,
    encode_many,
)
from scaler.scheduler.settings import SchedulerSettings

IS_PYPY = sys.implementation.name == "pypy"
CLIENT = b"C|jit-warmup|0|client"
WORKERS = (b"W|jit-warmup|1|a", b"W|jit-warmup|2|b")
FUNCTION_ID = b"jit-warmup-function-id-32-bytes!"
FUNCTION = b"\x80\x05\x95\x14\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x03abs\x94\x93\x94."  # pickled abs
MAP_TASKS = 1024
# Not a power of two: levels of odd length, whose last node moves up a level, as in most real trees. A binary tree over
# L leaves has L - 1 inner nodes whatever L is.
TREE_LEAVES = 1000
FRAME_TASKS = 256  # the real client batches this many tasks of a map in a frame (a graph travels in one frame)
# Less than a round hands each worker: they fill up, and the paths of full workers (closed, then refilled in batches,
# ready tasks left waiting in the queue) are traced too. A real worker announces 1,000 by default and a graph or a map
# of a few thousand tasks fills it; a first graph found them untraced (docs/performance.md, "The first graph").
WORKER_CAPACITY = 256
TASKS_PER_ROUND = MAP_TASKS + 2 * TREE_LEAVES - 1
RESULTS_PER_ROUND = MAP_TASKS + 1  # what the client asks back: every map task, and of the tree only its root
STALL_SECONDS = 10.0  # a round of the private scheduler takes milliseconds: this long without progress is a failure
_TASK = Task.WHICH
_RESULT = TaskResult.WHICH


class WarmupReport(NamedTuple):
    rounds: int
    tasks: int
    seconds: float


def should_warm_up(seconds: float) -> bool:
    return IS_PYPY and seconds > 0


class SyntheticPeers:
    """One client and two workers, sans-IO: the frames they send, and how the workers answer what they receive.

    Every frame is built once: a round's task ids are free again once its results are back, so each round sends the
    same bytes."""

    def __init__(self) -> None:
        self.client_frames = _frames([_task(number) for number in range(MAP_TASKS)]) + _tree_frames()
        self._results: Dict[bytes, bytes] = {}  # task id -> its encoded result
        for frame in self.client_frames:
            for task in decode_frame_for_routing(frame):
                result = TaskResult(task_id=task.task_id, status=TaskStatus.success, payload=b"\x80\x05K\x01.")
                self._results[task.task_id] = encode(result)
        self._fetched: Set[bytes] = set()  # the workers that asked for the function

    def hellos(self) -> List[Tuple[bytes, bytes]]:
        """(identity, frame) of each peer's Hello."""
        hellos = [(CLIENT, encode(Hello(protocol_version=PROTOCOL_VERSION, role=Role.client, name="jit-warmup")))]
        for worker in WORKERS:
            hello = Hello(
                protocol_version=PROTOCOL_VERSION, role=Role.worker, name=worker.decode(), capacity=WORKER_CAPACITY,
                task_policies=True,
            )  # fmt: skip
            hellos.append((worker, encode(hello)))
        return hellos

    @staticmethod
    def function() -> bytes:
        """The client's frame that puts the function its tasks call, as a real client does before its first task."""
        put = ObjectPut(
            object_id=FUNCTION_ID, kind=ObjectKind.function, name="abs", payload=FUNCTION, chunk_index=0,
            chunk_count=1, total_size=len(FUNCTION),
        )  # fmt: skip
        return encode(put)

    def answer(self, worker: bytes, frame: bytes) -> bytes:
        """`worker`'s reply to a frame from the scheduler: the results of its tasks, at once (b"" if none); with the
        first tasks it is sent, a request for their function ahead of them, as a real worker fetches what it lacks."""
        results = [self._results[m.task_id] for m in decode_frame_for_routing(frame) if m.WHICH == _TASK]
        if results and worker not in self._fetched:
            self._fetched.add(worker)
            results.insert(0, encode(ObjectRequest(object_ids=[FUNCTION_ID])))
        return b"".join(results)

    @staticmethod
    def results_in(frame: bytes) -> int:
        """How many results a frame to the client holds."""
        return sum(1 for message in decode_frame_for_routing(frame) if message.WHICH == _RESULT)

    @staticmethod
    def heartbeats(now: float) -> List[Tuple[bytes, bytes]]:
        sent_at_us = int(now * 1e6)
        beats = [(CLIENT, encode(ClientHeartbeat(sent_at_us=sent_at_us, interval_ms=1000)))]
        return beats + [(w, encode(WorkerHeartbeat(sent_at_us=sent_at_us, interval_ms=1000))) for w in WORKERS]

    @staticmethod
    def goodbyes() -> List[Tuple[bytes, bytes]]:
        return [(CLIENT, encode(ClientDisconnect()))] + [(w, encode(WorkerDisconnect())) for w in WORKERS]


async def warm_up(
    seconds: float,
    make_shell: Callable[..., Any],
    interrupted: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.monotonic,
) -> WarmupReport:
    """Rounds of SyntheticPeers against a private scheduler (`make_shell(settings, handle_signals=False)`, a
    SchedulerShell) for about `seconds`, at least one round, fewer once `interrupted()`; what it did."""
    start = clock()
    directory = tempfile.mkdtemp(prefix="scaler-jit-warmup-")
    endpoint = f"ipc://{directory}/scheduler"
    settings = SchedulerSettings(endpoint, monitor_address=f"ipc://{directory}/monitor", jit_warmup_seconds=0.0)
    try:
        with _silenced_scaler_loggers():
            shell = make_shell(settings, handle_signals=False)
            serving = asyncio.ensure_future(shell.run())
            try:
                rounds = await _drive(SyntheticPeers(), endpoint, start + seconds, interrupted, clock)
                left = len(shell.core.tasks)
            finally:
                shell.stop("the JIT warm-up is over")
                await serving
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if left:
        raise RuntimeError(f"JIT warm-up: {left} synthetic tasks were left in the private scheduler")
    gc.collect()
    return WarmupReport(rounds, rounds * TASKS_PER_ROUND, clock() - start)


async def _drive(
    peers: SyntheticPeers, endpoint: str, deadline: float, interrupted: Callable[[], bool], clock: Callable[[], float]
) -> int:
    """The peers' side: rounds until `deadline` (or `interrupted()`), each sent, answered and every result counted."""
    context = zmq.Context()
    sockets: Dict[bytes, zmq.Socket] = {}
    try:
        for identity, hello in peers.hellos():
            socket = context.socket(zmq.DEALER)
            socket.setsockopt(zmq.IDENTITY, identity)
            socket.setsockopt(zmq.LINGER, 0)
            socket.connect(endpoint)
            socket.send(hello)
            sockets[identity] = socket
        client = sockets[CLIENT]
        client.send(peers.function())
        workers = [(worker, sockets[worker]) for worker in WORKERS]
        rounds = 0
        while True:
            for frame in peers.client_frames:
                client.send(frame)
            results = 0
            patience = clock() + STALL_SECONDS
            while results < RESULTS_PER_ROUND:
                progressed = False
                for worker, socket in workers:
                    for frame in _drain(socket):
                        progressed = True
                        reply = peers.answer(worker, frame)
                        if reply:
                            socket.send(reply)
                for frame in _drain(client):
                    progressed = True
                    results += peers.results_in(frame)
                if progressed:
                    patience = clock() + STALL_SECONDS
                elif clock() > patience:
                    raise RuntimeError(f"JIT warm-up: {results} of {RESULTS_PER_ROUND} results came back, then none")
                await asyncio.sleep(0)  # the private scheduler reads, routes and sends in this same loop
            rounds += 1
            for identity, beat in peers.heartbeats(clock()):
                sockets[identity].send(beat)
            if clock() >= deadline or interrupted():
                break
        for identity, goodbye in peers.goodbyes():
            sockets[identity].send(goodbye)
        return rounds
    finally:
        for socket in sockets.values():
            socket.close(linger=0)
        context.term()


def _drain(socket: zmq.Socket) -> Iterator[bytes]:
    while True:
        try:
            yield socket.recv(zmq.NOBLOCK)
        except zmq.Again:
            return


def _task(number: int, dependencies: Tuple[bytes, ...] = (), report_result: bool = True) -> Task:
    if dependencies:
        args = [Argument(kind=ArgumentKind.task_ref, data=dependency) for dependency in dependencies]
    else:
        args = [Argument(kind=ArgumentKind.inline, data=b"\x80\x05K\x07.")]
    return Task(
        task_id=b"jit-warmup" + number.to_bytes(6, "big"),
        function_id=FUNCTION_ID,
        args=args,
        dependencies=list(dependencies),
        report_result=report_result,
    )


def _frames(tasks: List[Task]) -> List[bytes]:
    return [encode_many(tasks[i : i + FRAME_TASKS]) for i in range(0, len(tasks), FRAME_TASKS)]


def _tree_frames() -> List[bytes]:
    """A binary reduction tree over TREE_LEAVES leaves in one frame, as the client sends a graph: leaves first, the root
    last; a level of odd length moves its last node up as it is (bench/graph_tree.py builds the same tree)."""
    number = MAP_TASKS
    level = []
    for _ in range(TREE_LEAVES):
        level.append(_task(number, report_result=False))
        number += 1
    tasks = list(level)
    while len(level) > 1:
        above = []
        for left, right in zip(level[::2], level[1::2]):
            above.append(_task(number, (left.task_id, right.task_id), report_result=len(level) == 2))
            number += 1
        tasks += above
        if len(level) % 2:
            above.append(level[-1])
        level = above
    return [encode_many(tasks)]


@contextmanager
def _silenced_scaler_loggers() -> Iterator[None]:
    """The private scheduler's peers connect and leave: nothing of it belongs in the scheduler's log."""
    loggers = [logging.getLogger(name) for name in list(logging.Logger.manager.loggerDict) if name.startswith("scaler")]
    disabled = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, was_disabled in zip(loggers, disabled):
            logger.disabled = was_disabled
