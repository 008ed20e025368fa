"""Where one small task's round trip goes: bench/latency/latency.py's loop, stamped at each step in every process.

    .venv/bin/python -m bench.latency.rtt_trace                      # PyPy scheduler, 2 workers, 3,000 round trips
    .venv/bin/python -m bench.latency.rtt_trace --scheduler-python .venv/bin/python --count 5000

Every process of the cluster and the client records time.perf_counter_ns() (CLOCK_MONOTONIC: one clock for the whole
host) at each step of a task's life (bench/latency/rtt_tracer.py, installed by bench/latency/rtt_site/sitecustomize.py
through SCALER_RTT_TRACE). With one task in flight at a time, each step of a round trip is the first stamp of its kind
after the step before; the table gives the median microseconds of each step over the timed round trips, and their sum.
Before it: what each thread does after passing the task or its result on, until it sleeps again (beside the round trip,
but competing with it for the CPUs), the stamps of each kind per round trip (a loop that spins shows there), and the
mean time each sleeping thread is awake per round trip. The wrappers add a few microseconds to the round trip (a Python
call and a stamp per step): take the round trip itself from bench/latency/latency.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from bench.latency import rtt_tracer
from bench.latency.latency import increment, percentile
from bench.localcluster import PYPY, LocalCluster, median

BENCH = Path(__file__).resolve().parent

# (event that ends the step, what the step is); the first step starts at c.start. "poll" events are the last of their
# kind before the event after them (the wake-up that led to it); every other event is the first after the step before.
STEPS: List[Tuple[str, str]] = [
    ("c.queued", "client: submit() encodes and queues the task"),
    ("c.poll", "client: user thread -> IO thread wake-up (socketpair)"),
    ("c.flushed", "client: IO thread takes the task, frames it"),
    ("s.epoll", "ZeroMQ: client -> scheduler's event loop wakes"),
    ("s.drain", "scheduler: event loop to the readable callback"),
    ("s.task", "scheduler: reads and decodes the frame"),
    ("s.flush", "scheduler: core places the task"),
    ("s.sent", "scheduler: sends it (2 zmq sends)"),
    ("a.poll", "ZeroMQ: scheduler -> agent (from the end of the send)"),
    ("a.read", "agent: poll return to reading the socket"),
    ("a.decoded", "agent: reads, decodes, core.receive"),
    ("a.handed", "agent: instructions, orders written to the processor"),
    ("p.orders", "Unix socket: agent -> processor wake-up"),
    ("p.run", "processor: decodes orders, before the task runs"),
    ("p.ran", "processor: runs the task (deserialize, call, serialize)"),
    ("p.sent", "processor: reports the result"),
    ("a.poll", "Unix socket: processor -> agent wake-up"),
    ("a.report", "agent: poll return to reading the report"),
    ("a.sent", "agent: core.processor_report, encode, send"),
    ("s.epoll", "ZeroMQ: agent -> scheduler's event loop wakes"),
    ("s.drain", "scheduler: event loop to the readable callback"),
    ("s.result", "scheduler: reads and decodes the frame"),
    ("s.flush", "scheduler: core routes the result"),
    ("s.sent", "scheduler: sends it"),
    ("c.poll", "ZeroMQ: scheduler -> client (from the end of the send)"),
    ("c.results", "client: IO thread reads and decodes the frame"),
    ("c.settled", "client: settles the future"),
    ("c.end", "client: IO thread -> user thread wake-up, result()"),
]


MISSING: Dict[str, int] = {}  # round trips left out, by the first stamp missing


def round_trip_steps(events: List[Tuple[int, str, int]], start: int, end: int) -> Optional[List[int]]:
    """The nanoseconds of each step of the round trip from `start` to `end` (c.start, c.end), None if a stamp is
    missing. `events`: (ns, event, pid) of every process, sorted by time."""
    import bisect

    index = bisect.bisect_left(events, (start,))
    times = [start]
    polls: List[int] = []  # indexes in `times` of poll steps, resolved once the event after them is known
    agent = None  # the pid of the agent that ran this task: the other agent's stamps are not this task's
    for event, _ in STEPS:
        if event.endswith(".poll"):
            polls.append(len(times))
            times.append(-1)
            continue
        while index < len(events) and events[index][0] <= end:
            at, name, pid = events[index]
            index += 1
            if name == event and (agent is None or not name.startswith("a.") or pid == agent):
                if name == "a.read":
                    agent = pid
                times.append(at)
                break
        else:
            MISSING[event] = MISSING.get(event, 0) + 1
            return None
    for slot in polls:
        # from two steps back: a send's end is stamped after it returns, and the receiver may wake before that
        before, after = times[max(0, slot - 2)], times[slot + 1]
        kind = STEPS[slot - 1][0]
        wakes = [
            at
            for at, name, pid in events[bisect.bisect_left(events, (before,)) : bisect.bisect_right(events, (after,))]
            if name == kind and (kind != "a.poll" or pid == agent)
        ]
        if not wakes:
            MISSING[kind] = MISSING.get(kind, 0) + 1
            return None
        times[slot] = wakes[-1]
    return [later - earlier for earlier, later in zip(times, times[1:])]


_WAKES = {"c.poll": "c.sleep", "a.poll": "a.sleep", "s.epoll": "s.sleep", "p.orders": "p.sleep"}
_THREADS = {"c": "client IO thread", "a": "agent", "s": "scheduler", "p": "processor"}


def awake(events: List[Tuple[int, str, int]], first: int, last: int, trips: int) -> str:
    """Microseconds per round trip each sleeping thread (the client's IO thread, the scheduler's event loop, each
    agent, each processor) spent between a wake-up and its next sleep, from `first` to `last`."""
    sleeps = set(_WAKES.values())
    woke: Dict[Tuple[int, str], int] = {}
    total: Dict[Tuple[int, str], int] = {}
    for at, name, pid in events:
        if not first <= at <= last:
            continue
        if name in _WAKES:
            woke[(pid, name[0])] = at
        elif name in sleeps:
            since = woke.pop((pid, name[0]), None)
            if since is not None:
                total[(pid, name[0])] = total.get((pid, name[0]), 0) + at - since
    return ", ".join(
        f"{_THREADS[kind]} {nanoseconds / trips / 1000:.1f} us"
        for (_, kind), nanoseconds in sorted(total.items(), key=lambda item: item[0][1])
        if nanoseconds / trips >= 500
    )


# Work a thread does after it passed the task or its result on, beside the round trip (it competes for the CPUs):
# (after this event, until this thread's next sleep)
TAILS: List[Tuple[str, str, str]] = [
    ("c.flushed", "c.sleep", "client IO thread, after sending the task"),
    ("s.sent", "s.sleep", "scheduler, after each send"),
    ("a.handed", "a.sleep", "agent, after writing the orders"),
    ("p.sent", "p.sleep", "processor, after writing its report"),
    ("a.sent", "a.sleep", "agent, after sending the result"),
    ("c.settled", "c.sleep", "client IO thread, after settling the future"),
]


def tails(events: List[Tuple[int, str, int]], trips: List[Tuple[int, int]]) -> List[List[float]]:
    """Microseconds of each TAILS entry, for every time its event occurred in the round trips."""
    import bisect

    found: List[List[float]] = [[] for _ in TAILS]
    for start, end in trips:
        low, high = bisect.bisect_left(events, (start,)), bisect.bisect_right(events, (end,))
        window = events[low:high]
        for number, (after, sleep, _) in enumerate(TAILS):
            for index, (at, name, pid) in enumerate(window):
                if name != after:
                    continue
                for later, later_name, later_pid in window[index + 1 :]:
                    if later_name == sleep and later_pid == pid:
                        found[number].append((later - at) / 1000)
                        break
    return found


def trace(scheduler_python: str, workers: int, count: int, warmup: int) -> Tuple[List[List[int]], List[int]]:
    """(steps of each traced round trip, nanoseconds of every round trip) on a fresh cluster."""
    from scaler import Client

    directory = tempfile.mkdtemp(prefix="scaler-rtt-")
    os.environ[rtt_tracer.ENV] = directory
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH / "rtt_site"), os.environ.get("PYTHONPATH")]))
    rtt_tracer.install(directory)
    clock = time.perf_counter_ns
    start_code, end_code = rtt_tracer.CODES["c.start"], rtt_tracer.CODES["c.end"]
    trips: List[Tuple[int, int]] = []
    try:
        with LocalCluster(scheduler_python, workers=workers) as cluster:
            with Client(cluster.address) as client:
                for i in range(warmup + count):
                    rtt_tracer.stamp(start_code)
                    start = clock()
                    value = client.submit(increment, i).result()
                    end = clock()
                    rtt_tracer.stamp(end_code)
                    if value != i + 1:
                        raise AssertionError(f"increment({i}) returned {value!r}")
                    if i >= warmup:
                        trips.append((start, end))
        traces = rtt_tracer.read(directory)
    finally:
        for name in os.listdir(directory):
            os.unlink(os.path.join(directory, name))
        os.rmdir(directory)
    events = sorted((at, name, pid) for pid, stamps in traces.items() for at, name in stamps)
    own = [at for at, name in traces[os.getpid()] if name in ("c.start", "c.end")]
    stamped = list(zip(own[0::2], own[1::2]))[warmup:]
    steps = [s for s in (round_trip_steps(events, start, end) for start, end in stamped) if s is not None]
    for (_, _, label), values in zip(TAILS, tails(events, stamped)):
        if values:
            print(f"beside the round trip: {label:<46}{median(values):>7.1f} us (median of {len(values):,})")
    first, last = stamped[0][0], stamped[-1][1]
    counts: Dict[str, int] = {}
    for at, name, _ in events:
        if first <= at <= last:
            counts[name] = counts.get(name, 0) + 1
    print("stamps per round trip:", ", ".join(f"{name} {count / len(stamped):.2f}" for name, count in counts.items()))
    print(
        "mean time awake per round trip (from waking to going to sleep again):",
        awake(events, first, last, len(stamped)),
    )
    return steps, [end - start for start, end in trips]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scheduler-python", default=PYPY)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--count", type=int, default=3000, help="traced round trips")
    parser.add_argument("--warmup", type=int, default=300, help="round trips before tracing")
    args = parser.parse_args()
    steps, round_trips = trace(args.scheduler_python, args.workers, args.count, args.warmup)
    print(
        f"{len(steps):,} of {args.count:,} round trips traced in full (after {args.warmup} warm-up, {args.workers} "
        f"workers); median round trip {median(round_trips) / 1000:.1f} us (traced, so a little slower)"
    )
    if MISSING:
        print("left out for want of a stamp:", ", ".join(f"{name} {count}" for name, count in MISSING.items()))
    if not steps:
        sys.exit(
            "rtt_trace: no round trip has every stamp; bench/latency/rtt_tracer.py wraps a method that no longer runs"
        )
    header = f"{'#':>3} {'step':<58}{'median us':>10}{'p90 us':>9}"
    print(header)
    print("-" * len(header))
    total = 0.0
    for number, (_, label) in enumerate(STEPS):
        values = [trip[number] / 1000 for trip in steps]
        total += median(values)
        print(f"{number + 1:>3} {label:<58}{median(values):>10.1f}{percentile(values, 0.9):>9.1f}")
    print(f"{'':>3} {'sum of the medians':<58}{total:>10.1f}")
    print(f"{'':>3} {'median of the sums':<58}{median([sum(trip) / 1000 for trip in steps]):>10.1f}")


if __name__ == "__main__":
    main()
