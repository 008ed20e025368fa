"""Warm PyPy's JIT before the scheduler serves: a synthetic workload through a private SchedulerCore.

Under PyPy the scheduler's hot paths run in the interpreter until the JIT has traced them, which takes some thousands
of tasks. The first 10,000-task graph cost the core about 41 µs of CPU per task, the same graph again 9 to 11 µs (in
one process, cores of their own). Without a warm-up, a user's first graph or map after the scheduler starts pays that.

So before it reports itself ready, the scheduler runs, for `jit_warmup_seconds`, what the shell would do for one
client and two workers, minus the sockets: frames of Tasks (a map, and a reduction tree whose small results the core
inlines) decoded as the shell decodes them, fed to a SchedulerCore of its own, what the core sends taken, joined and
decoded, the workers' results fed back, heartbeats and ticks in between, then the peers leave. Only the code is shared
with the real core: traces are per code path, not per object. Nothing is logged from the private core.

On CPython there is nothing to warm: the setting is ignored there.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, List, NamedTuple, Tuple

from scaler.protocol import (
    PROTOCOL_VERSION,
    Argument,
    ArgumentKind,
    ClientDisconnect,
    ClientHeartbeat,
    Hello,
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
from scaler.scheduler.core import SchedulerCore
from scaler.scheduler.settings import SchedulerSettings

IS_PYPY = sys.implementation.name == "pypy"
CLIENT = b"C|jit-warmup|0|client"
WORKERS = (b"W|jit-warmup|1|a", b"W|jit-warmup|2|b")
MAP_TASKS = 1024
TREE_LEAVES = 256
FRAME_TASKS = 256  # the real client batches this many tasks in a frame
# virtual seconds per round: heartbeats every round keep the private peers far from any timeout
ROUND_SECONDS = 0.01
_TASK = Task.WHICH


class WarmupReport(NamedTuple):
    rounds: int
    tasks: int
    seconds: float


def should_warm_up(seconds: float) -> bool:
    return IS_PYPY and seconds > 0


def warm_up(seconds: float, clock: Callable[[], float] = time.monotonic) -> WarmupReport:
    """Route synthetic work through a private core for about `seconds` (at least one round); what it did."""
    start = clock()
    with _silenced_scaler_loggers():
        workload = _Workload()
        rounds = 0
        while True:
            workload.round()
            rounds += 1
            if clock() - start >= seconds:
                break
        workload.leave()
    del workload
    gc.collect()
    return WarmupReport(rounds, rounds * (MAP_TASKS + 2 * TREE_LEAVES - 1), clock() - start)


class _Workload:
    """One client, two workers, and frames built once: task ids are free again once their results are back."""

    def __init__(self) -> None:
        self.now = 0.0
        self.core = SchedulerCore(SchedulerSettings("tcp://127.0.0.1:0"), self.now)
        self.frames = _map_frames() + _tree_frames()
        self.results: Dict[bytes, bytes] = {}  # task id -> its encoded result
        for frame in self.frames:
            for task in decode_frame_for_routing(frame):
                self.results[task.task_id] = encode(
                    TaskResult(task_id=task.task_id, status=TaskStatus.success, payload=b"\x80\x05K\x01.")
                )
        self._send(CLIENT, encode(Hello(protocol_version=PROTOCOL_VERSION, role=Role.client, name="jit-warmup")))
        for worker in WORKERS:
            hello = Hello(
                protocol_version=PROTOCOL_VERSION,
                role=Role.worker,
                name=worker.decode(),
                capacity=1000,
                task_policies=True,
            )
            self._send(worker, encode(hello))
        self.core.take_outgoing()

    def round(self) -> None:
        core = self.core
        self.now += ROUND_SECONDS
        for frame in self.frames:
            self._send(CLIENT, frame)
        while True:  # the workers answer what they were sent until nothing is left in flight
            outgoing = core.take_outgoing()
            answered = False
            for peer, chunks in outgoing.items():
                if peer == CLIENT:
                    continue
                results = [
                    self.results[m.task_id] for m in decode_frame_for_routing(b"".join(chunks)) if m.WHICH == _TASK
                ]
                if results:
                    self._send(peer, b"".join(results))
                    answered = True
            if not answered:
                break
        self._send(CLIENT, encode(ClientHeartbeat(sent_at_us=int(self.now * 1e6), interval_ms=1000)))
        for worker in WORKERS:
            self._send(worker, encode(WorkerHeartbeat(sent_at_us=int(self.now * 1e6), interval_ms=1000)))
        core.tick(self.now)
        core.take_outgoing()
        if core.tasks:
            raise AssertionError(f"JIT warm-up: {len(core.tasks)} synthetic tasks left in the private core")

    def leave(self) -> None:
        for worker in WORKERS:
            self._send(worker, encode(WorkerDisconnect()))
        self._send(CLIENT, encode(ClientDisconnect()))
        self.core.take_outgoing()

    def _send(self, peer: bytes, frame: bytes) -> None:
        self.core.receive(peer, decode_frame_for_routing(frame), self.now)


def _task(number: int, dependencies: Tuple[bytes, ...] = (), report_result: bool = True) -> Task:
    if dependencies:
        args = [Argument(kind=ArgumentKind.task_ref, data=dependency) for dependency in dependencies]
    else:
        args = [Argument(kind=ArgumentKind.inline, data=b"\x80\x05K\x07.")]
    return Task(
        task_id=b"jit-warmup" + number.to_bytes(6, "big"),
        function_id=b"jit-warmup-function-id-32-bytes!",
        args=args,
        dependencies=list(dependencies),
        report_result=report_result,
    )


def _frames(tasks: List[Task]) -> List[bytes]:
    return [encode_many(tasks[i : i + FRAME_TASKS]) for i in range(0, len(tasks), FRAME_TASKS)]


def _map_frames() -> List[bytes]:
    return _frames([_task(number) for number in range(MAP_TASKS)])


def _tree_frames() -> List[bytes]:
    """A binary reduction tree over TREE_LEAVES leaves (a power of two), as the client sends a graph: leaves first."""
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
        level = above
    return _frames(tasks)


@contextmanager
def _silenced_scaler_loggers() -> Iterator[None]:
    """The private core's peers connect and leave: nothing of it belongs in the scheduler's log."""
    loggers = [logging.getLogger(name) for name in list(logging.Logger.manager.loggerDict) if name.startswith("scaler")]
    disabled = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, was_disabled in zip(loggers, disabled):
            logger.disabled = was_disabled
