"""The scheduler's drain loop at a low rate, in isolation: read until zmq.Again, ask ZMQ_EVENTS before each frame, or
ask it before the second frame only and then read until zmq.Again (what the scheduler does).

    .venv-pypy/bin/python -m bench.latency.drain_loop

At a low rate each wake-up of the scheduler reads one or two frames (bench/latency/latency_trace.py: a median of 2 at
2,000 tasks/s with 1,024 workers), so what ends a drain costs as much as a frame. A ROUTER socket gets 1, 2, 8 or 64
frames from DEALERs over loopback TCP, then one drain reads them, as SchedulerShell._on_readable does (both parts of
each frame, ZMQ_RCVMORE, then ZMQ_EVENTS after the flush); the thread CPU per drain, blocks of each way interleaved, the
first two blocks of each left out (JIT warm-up).
"""

from __future__ import annotations

import statistics
import time
from typing import Dict, List, Tuple

import zmq

_NOBLOCK = int(zmq.NOBLOCK)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_RCVMORE = int(zmq.RCVMORE)
_MAX_FRAMES = 4096
_LOOKS = 2  # as scaler/scheduler/shell.py (_EVENTS_LOOKS): ZMQ_EVENTS before the second frame only


def drain(router: zmq.Socket, looks_from: int, looks_until: int) -> int:
    """One drain: before reading frame number `frames` (from 0), when looks_from <= frames < looks_until, ask ZMQ_EVENTS
    and stop if nothing waits; otherwise read, and stop at zmq.Again."""
    frames = 0
    while frames < _MAX_FRAMES:
        if looks_from <= frames < looks_until and not router.getsockopt(_EVENTS) & _POLLIN:
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


# (looks_from, looks_until) of each way: read until zmq.Again; ZMQ_EVENTS before every frame; what
# SchedulerShell._on_readable does: the first frame read at once (the socket woke us), ZMQ_EVENTS before the second,
# then reading until zmq.Again (a long drain pays one exception, not a look per frame)
WAYS = {
    "until zmq.Again, µs a drain": (0, 0),
    "ZMQ_EVENTS first": (0, _MAX_FRAMES),
    "ZMQ_EVENTS once, then zmq.Again (the scheduler's)": (1, _LOOKS),
}


def block(router: zmq.Socket, dealers: List[zmq.Socket], looks: Tuple[int, int], per_drain: int) -> float:
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
        drain(router, *looks)
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
    print(f"| frames a drain | {' | '.join(WAYS)} |\n|---:|{'---:|' * len(WAYS)}")
    for per_drain in (1, 2, 8, 64):
        runs: Dict[str, List[float]] = {way: [] for way in WAYS}
        for repeat in range(6):
            for way, looks in WAYS.items():
                spent = block(router, dealers, looks, per_drain)
                if repeat >= 2:
                    runs[way].append(spent)
        cells = [f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})" for values in runs.values()]
        print(f"| {per_drain} | {' | '.join(cells)} |")
    for socket in [router, *dealers]:
        socket.close(linger=0)
    context.term()


if __name__ == "__main__":
    main()
