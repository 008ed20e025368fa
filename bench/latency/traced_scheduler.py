"""The scheduler's CLI with a per-task and per-event trace, for bench/latency/latency_trace.py (diagnosis, not timing).

    python bench/latency/traced_scheduler.py TRACE.json ADDRESS [scheduler options]   # as `python -m scaler.scheduler`

Run from anywhere: it imports the interpreter's own installation of Scaler, as `python -m scaler.scheduler` does from
a scratch directory. When the scheduler stops, TRACE.json holds:
- "events": [kind, start, wall seconds, thread CPU seconds, detail] for every drain of the ROUTER socket (detail:
  messages read), every flush of what the core queued (a drain ends with one), every timer tick and status, and
  every PyPy GC event (gc.hooks: "gc-minor" with the count since
  the last hook, "gc-step" with the states it went between, "gc-major"); event-loop callbacks over 0.5 ms ("callback").
- "tasks": [task id hex, message type, when core.receive got it] for every Task and TaskResult.
Times are time.monotonic(), which every process on the host shares, so they line up with the simulated peers' stamps.
The wrappers cost a few microseconds a drain: CPU figures from a traced run are not the scheduler's own.
"""

from __future__ import annotations

import asyncio.events
import gc
import json
import sys
import time
from typing import Any, Callable, List

_SLOW_CALLBACK_SECONDS = 0.0005


def install(events: List[list], tasks: List[list]) -> None:
    from scaler.scheduler import core, shell

    clock = time.monotonic
    cpu = time.thread_time

    def timed(kind: str, method: Callable, detail: Callable[[Any], Any] = lambda self: 0) -> Callable:
        def wrapper(self, *args):
            start, start_cpu = clock(), cpu()
            result = method(self, *args)
            events.append([kind, start, clock() - start, cpu() - start_cpu, detail(self)])
            return result

        return wrapper

    received = core.SchedulerCore.receive

    def receive(self, peer: bytes, messages: list, now: float) -> None:
        at = clock()
        for message in messages:
            task_id = getattr(message, "task_id", None)
            if task_id is not None:
                tasks.append([task_id.hex(), type(message).__name__, at])
        received(self, peer, messages, now)

    core.SchedulerCore.receive = receive
    core.SchedulerCore.tick = timed("tick", core.SchedulerCore.tick)
    shell.SchedulerShell._publish_status = timed("status", shell.SchedulerShell._publish_status)
    shell.SchedulerShell._flush = timed("flush", shell.SchedulerShell._flush)
    shell.SchedulerShell._on_readable = timed(
        "drain", shell.SchedulerShell._on_readable, lambda self: sum(self.core.received_counts)
    )

    run = asyncio.events.Handle._run

    def run_callback(handle) -> None:
        start, start_cpu = clock(), cpu()
        run(handle)
        wall = clock() - start
        if wall > _SLOW_CALLBACK_SECONDS:
            name = getattr(handle._callback, "__qualname__", repr(handle._callback))
            events.append(["callback", start, wall, cpu() - start_cpu, name])

    asyncio.events.Handle._run = run_callback

    hooks = getattr(gc, "hooks", None)  # PyPy only
    if hooks is not None:
        hooks.on_gc_minor = lambda stats: events.append(["gc-minor", clock(), stats.duration, 0.0, stats.count])
        hooks.on_gc_collect_step = lambda stats: events.append(
            ["gc-step", clock(), stats.duration, 0.0, f"{stats.oldstate}->{stats.newstate}"]
        )
        hooks.on_gc_collect = lambda stats: events.append(["gc-major", clock(), 0.0, 0.0, stats.count])


def main() -> None:
    from scaler.scheduler.cli import restart_with_gc_settings

    # as the scheduler's CLI starts again with its GC settings (PyPy reads them at start only): the CLI does so only
    # for a process of its own, not for this call of its main()
    restart_with_gc_settings(None)
    path = sys.argv[1]
    events: List[list] = []
    tasks: List[list] = []
    install(events, tasks)
    from scaler.scheduler.cli import main as scheduler_main

    try:
        scheduler_main(sys.argv[2:])
    finally:
        # "drain" counts cumulate: turn them into messages read by each drain
        total = 0
        for event in events:
            if event[0] == "drain":
                event[4], total = event[4] - total, event[4]
        with open(path, "w") as file:
            json.dump({"events": events, "tasks": tasks}, file)


if __name__ == "__main__":
    main()
