"""Actor method calls on Scaler and on Dask distributed, in one run: how many a second, and their round trip.

    .venv/bin/python -m bench.peers.actors                                   # PyPy scheduler when .venv-pypy exists
    .venv/bin/python -m bench.peers.actors --calls 10000 --round-trips 1000 --threads 4 --repeat 5
    .venv/bin/python -m bench.peers.actors --calls 200 --round-trips 50 --repeat 1   # a quick check that it runs

The actor is a counter (Counter below) whose `increment()` adds one and returns the new count. Workloads, each on a
fresh actor created (and warmed up by a few calls) before timing and freed after:
- calls: CALLS `increment()` calls made back to back from one client thread, then every result waited for. Calls a
  second, from the first call to the last result.
- round trip: ROUND_TRIPS calls one at a time, each waited for before the next. The median and the 90th percentile
  of the round trips, in microseconds.
- threads: THREADS client threads (0: left out) sharing one actor, each making CALLS / THREADS calls back to back
  then waiting for its results. Calls a second.
Every figure is checked: each call's result is a distinct count (no increment lost or doubled), the counter's final
value (asked of it after the calls) is the number of calls, and in the round trip each result is the previous plus
one. Scaler's handle keeps one thread's calls in their order, so there each thread's results must also be increasing;
Dask does not promise that order (each call takes a connection of a pool), so it is not asked of Dask.

For reference, the same calls are also made as plain Scaler tasks on the same cluster (`client.submit(plus_one,
count)`, the count kept in the client): what an actor call costs over a task (the table's last column).

Engines, started as bench/data/engines.py starts them: Scaler (this checkout), `scaler_cluster -n WORKERS` and the
scheduler on PyPy when .venv-pypy exists (or --scheduler-python); an actor runs in a process of its own on a worker,
and its calls go through the scheduler. Dask distributed, a LocalCluster of WORKERS processes x 1 thread, its
scheduler in this process (as LocalCluster always does); an actor lives in a worker process (`client.submit(Counter,
actor=True)`), and the client calls it directly, not through the scheduler. Both clients run in this process. Both
clusters start once and stay up; each round runs every workload on each engine, the engine that goes first
changing from round to round, so that a slow stretch of a shared machine falls on each in turn. The table gives
medians over --repeat rounds (with the smallest and largest) and the ratio Scaler / Dask of the medians (for calls a
second, above 1 means Scaler is faster; for round trips, below 1).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import cloudpickle

from bench.data.engines import DaskEngine, ScalerEngine
from bench.latency.latency import percentile
from bench.localcluster import CPYTHON, PYPY, median

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import bench/: ship Counter by value

WARMUP_CALLS = 20  # on each fresh actor before timing: its connections, the method's encoded call


class Counter:
    """The actor of every workload."""

    def __init__(self) -> None:
        self.count = 0

    def increment(self) -> int:
        self.count += 1
        return self.count

    def value(self) -> int:
        return self.count


class ActorEngine:
    """One engine's actors: create one, call increment (a future), wait for a future, free one."""

    name = ""
    ordered = False  # whether one thread's calls run in the order they were made

    def create(self) -> Any:
        raise NotImplementedError

    def increment(self, actor: Any) -> Any:
        raise NotImplementedError

    def result(self, future: Any) -> int:
        raise NotImplementedError

    def value(self, actor: Any) -> int:
        raise NotImplementedError

    def free(self, actor: Any) -> None:
        raise NotImplementedError


class ScalerActors(ActorEngine):
    name = "Scaler"
    ordered = True

    def __init__(self, client: Any) -> None:
        self.client = client

    def create(self) -> Any:
        handle = self.client.actor(Counter)
        handle.created.result()
        return handle

    def increment(self, actor: Any) -> Any:
        return actor.increment()

    def result(self, future: Any) -> int:
        return future.result()

    def value(self, actor: Any) -> int:
        return actor.value().result()

    def free(self, actor: Any) -> None:
        actor.close()


def plus_one(value: int) -> int:
    return value + 1


class ScalerTasks(ActorEngine):
    """Not an actor: the same calls as no-op tasks, `client.submit(plus_one, count)`, whose results are the counts
    an actor would return. What an actor call costs over a task, on the same cluster."""

    name = "tasks"
    ordered = True

    def __init__(self, client: Any) -> None:
        self.client = client

    def create(self) -> Any:
        return [0, threading.Lock()]  # the count so far (kept here), and its lock for the threads workload

    def increment(self, actor: Any) -> Any:
        with actor[1]:
            count = actor[0]
            actor[0] = count + 1
            return self.client.submit(plus_one, count)  # under the lock: one thread's calls go in their order

    def result(self, future: Any) -> int:
        return future.result()

    def value(self, actor: Any) -> int:
        return actor[0]

    def free(self, actor: Any) -> None:
        pass


class DaskActors(ActorEngine):
    name = "Dask"

    def __init__(self, client: Any) -> None:
        self.client = client

    def create(self) -> Any:
        future = self.client.submit(Counter, actor=True, pure=False)
        return future, future.result()

    def increment(self, actor: Any) -> Any:
        return actor[1].increment()

    def result(self, future: Any) -> int:
        return future.result()

    def value(self, actor: Any) -> int:
        return actor[1].value().result()

    def free(self, actor: Any) -> None:
        actor[0].release()  # the actor goes with its key


@contextlib.contextmanager
def fresh_actor(engine: ActorEngine) -> Iterator[Any]:
    actor = engine.create()
    try:
        for _ in range(WARMUP_CALLS):
            engine.result(engine.increment(actor))
        yield actor
    finally:
        engine.free(actor)


def check(engine: ActorEngine, results: List[int], first: int, calls: int, ordered: bool, what: str) -> None:
    """`results` of `calls` increments from a count of `first - 1`: each count once; in order when `ordered`."""
    if ordered and engine.ordered and results != sorted(results):
        raise AssertionError(f"{engine.name} {what}: one thread's calls ran out of order")
    if sorted(results) != list(range(first, first + calls)):
        raise AssertionError(f"{engine.name} {what}: the increments' results are not {first} to {first + calls - 1}")


def check_final(engine: ActorEngine, actor: Any, expected: int, what: str) -> None:
    value = engine.value(actor)
    if value != expected:
        raise AssertionError(f"{engine.name} {what}: the counter ends at {value}, not {expected}")


def run_calls(engine: ActorEngine, calls: int) -> Dict[str, float]:
    with fresh_actor(engine) as actor:
        start = time.perf_counter()
        futures = [engine.increment(actor) for _ in range(calls)]
        results = [engine.result(future) for future in futures]
        seconds = time.perf_counter() - start
        check(engine, results, WARMUP_CALLS + 1, calls, True, "calls")
        check_final(engine, actor, WARMUP_CALLS + calls, "calls")
    return {"calls/s": calls / seconds}


def run_round_trips(engine: ActorEngine, calls: int) -> Dict[str, float]:
    seconds: List[float] = []
    clock = time.perf_counter
    with fresh_actor(engine) as actor:
        for i in range(calls):
            start = clock()
            value = engine.result(engine.increment(actor))
            seconds.append(clock() - start)
            if value != WARMUP_CALLS + i + 1:
                raise AssertionError(f"{engine.name} round trip: call {i + 1} returned {value}")
        check_final(engine, actor, WARMUP_CALLS + calls, "round trip")
    return {"median us": median(seconds) * 1e6, "p90 us": percentile(seconds, 0.9) * 1e6}


def run_threads(engine: ActorEngine, calls: int, threads: int) -> Dict[str, float]:
    each = calls // threads
    results: List[List[int]] = [[] for _ in range(threads)]
    errors: List[BaseException] = []
    with fresh_actor(engine) as actor:
        barrier = threading.Barrier(threads + 1)

        def caller(index: int) -> None:
            try:
                barrier.wait()
                futures = [engine.increment(actor) for _ in range(each)]
                results[index] = [engine.result(future) for future in futures]
            except BaseException as error:  # raised again in the main thread
                errors.append(error)

        workers = [threading.Thread(target=caller, args=(index,), name=f"caller-{index}") for index in range(threads)]
        for worker in workers:
            worker.start()
        barrier.wait()
        start = time.perf_counter()
        for worker in workers:
            worker.join()
        seconds = time.perf_counter() - start
        if errors:
            raise errors[0]
        for own in results:
            if engine.ordered and own != sorted(own):
                raise AssertionError(f"{engine.name} threads: one thread's calls ran out of order")
        check(engine, [value for own in results for value in own], WARMUP_CALLS + 1, each * threads, False, "threads")
        check_final(engine, actor, WARMUP_CALLS + each * threads, "threads")
    return {"calls/s": each * threads / seconds}


# (workload, figure, the table's label, which way is better): the table's rows
ROWS: List[Tuple[str, str, str, str]] = [
    ("calls", "calls/s", "calls a second", "higher"),
    ("round trip", "median us", "round trip, median us", "lower"),
    ("round trip", "p90 us", "round trip, p90 us", "lower"),
    ("threads", "calls/s", "{threads} threads, calls a second", "higher"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=10_000, help="increment calls of the calls and threads workloads")
    parser.add_argument("--round-trips", type=int, default=1_000, help="calls of the round-trip workload")
    parser.add_argument("--threads", type=int, default=4, help="client threads of the threads workload (0: skip it)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of each engine")
    default_scheduler = PYPY if os.path.exists(PYPY) else CPYTHON
    parser.add_argument("--scheduler-python", default=default_scheduler, help="Scaler's scheduler's interpreter")
    parser.add_argument("--json", type=Path, help="also write every round's figures and the medians here")
    args = parser.parse_args()
    if args.calls < 1 or args.round_trips < 1 or args.repeat < 1 or args.workers < 1 or args.threads < 0:
        parser.error("--calls, --round-trips, --repeat and --workers must be >= 1, --threads >= 0")
    if args.threads > args.calls:
        parser.error("--threads must be at most --calls")
    dask_engine = DaskEngine()
    if dask_engine.skip_reason:
        sys.exit(f"Dask distributed: {dask_engine.skip_reason}")

    import dask
    import distributed

    from scaler import Client

    workloads: Dict[str, Callable[[ActorEngine], Dict[str, float]]] = {
        "calls": lambda engine: run_calls(engine, args.calls),
        "round trip": lambda engine: run_round_trips(engine, args.round_trips),
    }
    if args.threads:
        workloads["threads"] = lambda engine: run_threads(engine, args.calls, args.threads)

    scaler_engine = ScalerEngine(args.scheduler_python)
    with (
        # what Dask's client side keeps on disk (its scratch space's lock files) goes, and goes with the run
        tempfile.TemporaryDirectory(prefix="d-") as dask_scratch,
        dask.config.set({"temporary-directory": dask_scratch}),
        scaler_engine.cluster(args.workers) as scaler_cluster,
        Client(scaler_cluster.address) as scaler_client,
        dask_engine.cluster(args.workers) as dask_cluster,
        distributed.Client(dask_cluster.address) as dask_client,
    ):
        clusters = [scaler_cluster, dask_cluster, scaler_cluster]
        engines: List[ActorEngine] = [ScalerActors(scaler_client), DaskActors(dask_client), ScalerTasks(scaler_client)]
        figures: Dict[str, Dict[str, List[float]]] = {engine.name: {} for engine in engines}
        for round_number in range(args.repeat):
            shift = round_number % len(engines)
            order = engines[shift:] + engines[:shift]  # who goes first changes from round to round
            for workload, run in workloads.items():
                for engine in order:
                    for figure, value in run(engine).items():
                        figures[engine.name].setdefault(f"{workload}: {figure}", []).append(value)
            for cluster, engine in zip(clusters, engines):
                if cluster.problem() or cluster.workers_lost():
                    sys.exit(f"{engine.name}: {cluster.problem() or 'a worker was lost'}")
            line = "; ".join(f"{engine.name} {latest(figures[engine.name])}" for engine in engines)
            print(f"round {round_number + 1}: {line}", flush=True)

    scaler_label = f"{scaler_engine.label}, an actor in a process of its own"
    dask_label = f"{dask_engine.label}, an actor in a worker process"
    print(f"\n{scaler_label}; {dask_label}")
    threads = f", {args.threads} threads x {args.calls // args.threads:,} calls" if args.threads else ""
    print(
        f"{args.calls:,} back-to-back calls, {args.round_trips:,} round trips{threads}; {args.workers} workers each; "
        f"medians of {args.repeat} rounds; every result checked"
    )
    header = f"{'workload':<28}{'Scaler (range)':>24}{'Dask (range)':>22}{'Scaler / Dask':>15}{'tasks':>9}"
    print(header)
    print("-" * len(header))
    summary = []
    for workload, figure, label, better in ROWS:
        key = f"{workload}: {figure}"
        if key not in figures["Scaler"]:
            continue
        scaler_values, dask_values = figures["Scaler"][key], figures["Dask"][key]
        ours, theirs, tasks = median(scaler_values), median(dask_values), median(figures["tasks"][key])
        label = label.format(threads=args.threads)
        cells = [
            f"{median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})" for values in (scaler_values, dask_values)
        ]
        print(f"{label:<28}{cells[0]:>24}{cells[1]:>22}{ours / theirs:>15.3f}{tasks:>9,.0f}")
        summary.append({"figure": key, "scaler": ours, "dask": theirs, "ratio": ours / theirs, "better": better})
        summary[-1]["scaler_tasks"] = tasks
    print(
        "Scaler / Dask: above 1, Scaler is faster in calls a second; below 1, in round trips. tasks: the same calls "
        "as Scaler tasks (client.submit of a no-op), for reference"
    )
    if args.json:
        document = {
            "params": {name: value for name, value in vars(args).items() if name != "json"},
            "engines": {"Scaler": scaler_label, "Dask": dask_label, "tasks": "the same calls as Scaler tasks"},
            "rounds": figures,
            "summary": summary,
        }
        args.json.write_text(json.dumps(document, indent=1) + "\n")


def latest(figures: Dict[str, List[float]]) -> str:
    return ", ".join(f"{key} {values[-1]:,.0f}" for key, values in figures.items())


if __name__ == "__main__":
    main()
