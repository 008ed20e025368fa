"""Internal: warm PyPy's JIT before the scheduler serves: synthetic peers against a private scheduler in this process.

Under PyPy the scheduler's hot paths run in the interpreter until the JIT has traced them, which takes some thousands
of tasks. A fresh PyPy scheduler spent about 40 µs of CPU per task on a user's first 10,000-task graph, 12 to 15 on
the same graph later (measured: docs/performance.md, JIT warm-up). The first tasks of every cluster paid for it.

So before it serves, the scheduler runs, for `jit_warmup_seconds`, a private scheduler: a second SchedulerShell with
its own ZeroMQ context on an ipc endpoint in a temporary directory, in the same event loop, and one synthetic client
and two synthetic workers on DEALER sockets (SyntheticPeers, in synthetic_peers.py: a map, and a
reduction tree whose small results the core inlines into the tasks that read them; the workers answer every task at
once). The whole path is traced that way:
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
from typing import Any, Callable, Dict, Iterator, NamedTuple

import zmq

from scaler.scheduler.settings import SchedulerSettings
from scaler.scheduler.synthetic_peers import CLIENT, RESULTS_PER_ROUND, TASKS_PER_ROUND, WORKERS, SyntheticPeers

IS_PYPY = sys.implementation.name == "pypy"
STALL_SECONDS = 10.0  # a round of the private scheduler takes milliseconds: this long without progress is a failure


class WarmupReport(NamedTuple):
    rounds: int
    tasks: int
    seconds: float


def should_warm_up(seconds: float) -> bool:
    return IS_PYPY and seconds > 0


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
