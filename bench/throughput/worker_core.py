"""CPU per no-op task in a worker's agent and processor, without sockets or processes: where the microseconds go.

    .venv/bin/python -m bench.throughput.worker_core --tasks 50000

Feeds WorkerCore (scaler/worker/core.py) what a busy worker sees: Task frames from the scheduler (256 per frame, as the
scheduler batches them, while the worker holds fewer than --queued tasks) and the processor's reports of their results,
and reads back its instructions and messages; the processor's side is a real TaskRunner (scaler/worker/processor.py)
running a no-op function. Each stage is timed on its own over the same tasks. The agent: decoding the scheduler's
frames, the core (queue, dispatch, results), encoding the processor's orders, decoding its reports, encoding the results
into frames for the scheduler. The processor: decoding its orders, running the tasks (deserialize, call, serialize,
progress), encoding its reports. Medians of --repeat runs, in CPU time (robust to other load); system calls not included
(bench/throughput/cpu_split.py measures everything). With a thousand tasks queued, as a scheduler keeps a worker by
default, each task's objects are colder in the CPU's caches when it runs and is answered: the core costs a third more
than with 256.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from typing import List

import cloudpickle

from scaler.protocol import (
    PROTOCOL_VERSION,
    Argument,
    ArgumentKind,
    HelloReply,
    ObjectKind,
    ObjectResponse,
    Task,
    decode_frame,
    encode_many,
)
from scaler.worker.channel import SharedProgress, decode_message, encode_message
from scaler.worker.core import WorkerCore
from scaler.worker.instructions import HandTasks
from scaler.worker.processor import TaskRunner
from scaler.worker.processor_messages import ProcessorOrders, ProcessorReport
from scaler.worker.settings import WorkerSettings

FRAME_TASKS = 256
# CPU time, not wall time: on a shared machine, time spent preempted would be charged to whichever stage ran.
_clock = time.process_time


def noop(value: int) -> int:
    return value


FUNCTION = os.urandom(32)


def make_frames(tasks: int) -> List[bytes]:
    prefix = os.urandom(8)
    messages = [
        Task(
            task_id=prefix + index.to_bytes(8, "big"),
            function_id=FUNCTION,
            args=[Argument(kind=ArgumentKind.inline, data=pickle.dumps(index))],
        )
        for index in range(tasks)
    ]
    return [encode_many(messages[start : start + FRAME_TASKS]) for start in range(0, tasks, FRAME_TASKS)]


def run_once(frames: List[bytes], tasks: int, queued: int) -> dict:
    now = 1000.0
    core = WorkerCore(WorkerSettings(address="tcp://127.0.0.1:1"), "Worker[bench]", "host", 1, now)
    core.connecting("W|bench", now)
    core.receive([HelloReply(protocol_version=PROTOCOL_VERSION, accepted=True, peer_timeout_ms=10**9)], now)
    function = cloudpickle.dumps(noop)
    core.receive([ObjectResponse(object_id=FUNCTION, found=True, kind=ObjectKind.function, payload=function)], now)
    core.durations[FUNCTION] = 0.00001  # a function seen to be short: handed in batches, as in steady state
    core.take_instructions()
    core.take_outgoing()
    number = core.active.number
    seconds = dict.fromkeys(["decode", "core", "orders", "reports", "encode", "p:orders", "p:run", "p:reports"], 0.0)
    runner = TaskRunner()
    progress_fd = SharedProgress.create_fd()
    progress = SharedProgress(progress_fd)
    os.close(progress_fd)
    sent: List[bytes] = []
    hands: List[HandTasks] = []
    fed = done = 0
    while done < tasks:
        # The scheduler keeps a worker's queue full: frames come while it holds fewer than `queued` tasks.
        while fed < len(frames) and (len(core.tasks) < queued or not hands):
            start = _clock()
            messages = decode_frame(frames[fed])
            seconds["decode"] += _clock() - start
            fed += 1
            start = _clock()
            core.receive(messages, now)
            hands += [i for i in core.take_instructions() if type(i) is HandTasks]
            seconds["core"] += _clock() - start
        hand = hands.pop(0)
        start = _clock()
        body = encode_message(hand_orders(hand))
        seconds["orders"] += _clock() - start
        start = _clock()
        handed = decode_message(body).tasks
        seconds["p:orders"] += _clock() - start
        start = _clock()
        results = []
        for task in handed:
            progress.start(task[0])
            results.append(runner.run(task))
            progress.finish(task[0])
        seconds["p:run"] += _clock() - start
        start = _clock()
        report = encode_message(ProcessorReport(results, [], None))
        seconds["p:reports"] += _clock() - start
        start = _clock()
        decoded: ProcessorReport = decode_message(report)
        seconds["reports"] += _clock() - start
        start = _clock()
        core.processor_report(number, decoded, now)
        hands += [i for i in core.take_instructions() if type(i) is HandTasks]
        outgoing = core.take_outgoing()
        seconds["core"] += _clock() - start
        start = _clock()
        sent.append(encode_many([message for message, _ in outgoing]))
        seconds["encode"] += _clock() - start
        done += len(results)
    answered = sum(len(decode_frame(frame)) for frame in sent)  # results leave in runs (outbox.SuccessResults)
    assert answered == tasks and not core.tasks, (answered, len(core.tasks))
    progress.close()
    return {stage: value / tasks * 1e6 for stage, value in seconds.items()}


def hand_orders(hand: HandTasks) -> ProcessorOrders:
    return ProcessorOrders(hand.tasks, [])


def median(values: List[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--queued",
        type=int,
        default=FRAME_TASKS,
        help="tasks the worker holds at once (a scheduler fills it up to per_worker_queue_size, 1000 by default): the"
        " more, the colder each task's objects in the CPU's caches when it runs and is answered",
    )
    args = parser.parse_args()
    frames = make_frames(args.tasks)
    runs = [run_once(frames, args.tasks, args.queued) for _ in range(args.repeat)]
    stages = list(runs[0])
    name = sys.implementation.name
    shape = f"{args.tasks:,} tasks, {args.queued} queued, median of {args.repeat} runs, {name}"
    print(f"\nCPU per no-op task in a worker ({shape})")
    totals = {"agent": 0.0, "processor": 0.0}
    for stage in stages:
        value = median([run[stage] for run in runs])
        side = "processor" if stage.startswith("p:") else "agent"
        totals[side] += value
        print(f"{side:<10}{stage.removeprefix('p:'):<10}{value:>8.2f} us")
    for side, total in totals.items():
        print(f"{side:<10}{'total':<10}{total:>8.2f} us")


if __name__ == "__main__":
    main()
