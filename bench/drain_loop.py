"""The scheduler's drain loop at a low rate, in isolation: read until zmq.Again, ask ZMQ_EVENTS before each frame, or
ask it before the second frame only and then read until zmq.Again (what the scheduler does).

    .venv-pypy/bin/python bench/drain_loop.py

At a low rate each wake-up of the scheduler reads one or two frames (bench/latency_trace.py: a median of 2 at 2,000
tasks/s with 1,024 workers), so what ends a drain costs as much as a frame. A ROUTER socket gets 1, 2 or 8 frames
from DEALERs over loopback TCP, then one drain reads them, as SchedulerShell._on_readable does (both parts of each
frame, ZMQ_RCVMORE, then ZMQ_EVENTS after the flush); the thread CPU per drain, blocks of both loops interleaved,
the first two blocks of each left out (JIT warm-up).
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, List

import zmq

_NOBLOCK = int(zmq.NOBLOCK)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_RCVMORE = int(zmq.RCVMORE)
_MAX_FRAMES = 4096
_LOOKS = 2  # as scaler/scheduler/shell.py (_EVENTS_LOOKS): ZMQ_EVENTS before the second frame only


def until_again(router: zmq.Socket) -> int:
    frames = 0
    while frames < _MAX_FRAMES:
        try:
            router.recv(_NOBLOCK)
        except zmq.Again:
            break
        router.recv(_NOBLOCK)
        frames += 1
        router.getsockopt(_RCVMORE)
    router.getsockopt(_EVENTS)
    return frames


def events_first(router: zmq.Socket) -> int:
    frames = 0
    while frames < _MAX_FRAMES and router.getsockopt(_EVENTS) & _POLLIN:
        router.recv(_NOBLOCK)
        router.recv(_NOBLOCK)
        frames += 1
        router.getsockopt(_RCVMORE)
    router.getsockopt(_EVENTS)
    return frames


def events_then_again(router: zmq.Socket) -> int:
    """What SchedulerShell._on_readable does: the first frame read at once (the socket woke us), ZMQ_EVENTS before the
    second, then reading until zmq.Again (a long drain pays one exception, not a look per frame)."""
    frames = 0
    while frames < _MAX_FRAMES:
        if 0 < frames < _LOOKS and not router.getsockopt(_EVENTS) & _POLLIN:
            break
        try:
            router.recv(_NOBLOCK)
        except zmq.Again:
            break
        router.recv(_NOBLOCK)
        frames += 1
        router.getsockopt(_RCVMORE)
    router.getsockopt(_EVENTS)
    return frames


def block(router: zmq.Socket, dealers: List[zmq.Socket], drain: Callable[[zmq.Socket], int], per_drain: int) -> float:
    """Thread CPU microseconds per drain of `per_drain` frames, over 3,000 drains (a frame that lands late is read by
    the next drain: the drains of a block read `per_drain` frames on average)."""
    poller = zmq.Poller()
    poller.register(router, zmq.POLLIN)
    spent = 0.0
    drains = 3000
    for index in range(drains):
        for offset in range(per_drain):
            dealers[(index + offset) % len(dealers)].send(b"x" * 90)
        while not router.getsockopt(_EVENTS) & _POLLIN:
            poller.poll(100)
        time.sleep(0.001)  # the other frames land too
        start = time.thread_time()
        drain(router)
        spent += time.thread_time() - start
    return spent / drains * 1e6


def main() -> None:
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealers = []
    for index in range(8):
        dealer = context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.ROUTING_ID, b"worker-%d" % index)
        dealer.connect(f"tcp://127.0.0.1:{port}")
        dealers.append(dealer)
    time.sleep(0.3)
    print(
        "| frames a drain | until zmq.Again, µs a drain | ZMQ_EVENTS first "
        "| ZMQ_EVENTS once, then zmq.Again (the scheduler's) |"
        "\n|---:|---:|---:|---:|"
    )
    for per_drain in (1, 2, 8, 64):
        runs = {until_again: [], events_first: [], events_then_again: []}
        for repeat in range(6):
            for drain in runs:
                spent = block(router, dealers, drain, per_drain)
                if repeat >= 2:
                    runs[drain].append(spent)
        cells = [f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})" for values in runs.values()]
        print(f"| {per_drain} | {' | '.join(cells)} |")
    for socket in [router, *dealers]:
        socket.close(linger=0)
    context.term()


if __name__ == "__main__":
    main()
