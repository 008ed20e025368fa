"""Time stamps at each step of a task's life in every process of a local cluster, for bench/latency/rtt_trace.py.

Diagnosis only, never imported by Scaler: bench/latency/rtt_site/sitecustomize.py installs it in every Python process
started with SCALER_RTT_TRACE=DIR and bench/latency/rtt_site on PYTHONPATH (the scheduler, the cluster launcher and, by
fork, its workers, their fork servers and processors); bench/latency/rtt_trace.py installs it in its own process, the
client. It wraps a few methods of the client's IO thread and connection, the scheduler's shell and core, the worker
agent, its processor link and outbox, and the processor, so that each records (time.perf_counter_ns(), event) as it
runs.

perf_counter_ns is CLOCK_MONOTONIC on Linux, one clock for every process of the host, so stamps from different
processes line up. Each process writes its stamps into a file of its own mapped in memory (DIR/<pid>.trace): no system
call per stamp, and the stamps survive a processor's SIGKILL. A fork starts a new file.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

ENV = "SCALER_RTT_TRACE"
EVENTS = [
    "c.start",  # the client's user thread: before submit()
    "c.queued",  # the task is queued: the user thread wakes the IO thread
    "c.poll",  # a zmq.Poller.poll returned something (the client's IO thread or the agent)
    "c.flushed",  # the IO thread encoded a frame of messages, about to send it
    "c.results",  # the IO thread hands results to the connection
    "c.settled",  # ... and has settled their futures
    "c.end",  # the user thread: result() returned
    "s.epoll",  # the scheduler's event loop: its selector returned events
    "s.drain",  # the scheduler's readable callback begins
    "s.task",  # SchedulerCore.receive got a Task
    "s.result",  # ... a TaskResult
    "s.flush",  # the shell took what the core queued, about to send it
    "s.sent",  # ... and has sent it
    "a.poll",
    "a.read",  # the agent reads the scheduler's socket
    "a.decoded",  # ... and the core has received what it read
    "a.handed",  # the agent encoded orders for a processor, about to write them
    "a.report",  # the agent reads a processor's channel
    "a.sent",  # the agent's outbox encoded a frame, about to send it
    "p.orders",  # the processor's wait for orders returned
    "p.run",  # TaskRunner.run begins
    "p.ran",  # ... ends
    "p.sent",  # the processor encoded a report, about to write it
    # before each thread goes to sleep (a poll, the event loop's select, the processor's wait for orders): with the
    # stamps after they wake (c.poll, a.poll, s.epoll, p.orders), how long each thread is awake per round trip
    "c.sleep",
    "a.sleep",
    "s.sleep",
    "p.sleep",
]
CODES = {name: code for code, name in enumerate(EVENTS)}
_RECORD = struct.Struct("<qH")
_COUNT = struct.Struct("<q")
_FILE_BYTES = 32 * 1024 * 1024


class _Recorder:
    def __init__(self, directory: str) -> None:
        self._directory = directory
        self._memory: Optional[mmap.mmap] = None
        self._offset = _COUNT.size
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._memory = None  # the parent's mapping: the child opens its own file on its first stamp
        self._offset = _COUNT.size

    def _open(self) -> mmap.mmap:
        path = os.path.join(self._directory, f"{os.getpid()}.trace")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.ftruncate(fd, _FILE_BYTES)
        self._memory = mmap.mmap(fd, _FILE_BYTES)
        os.close(fd)
        return self._memory

    def stamp(self, code: int, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        at = clock()
        memory = self._memory or self._open()
        offset = self._offset
        if offset + _RECORD.size > _FILE_BYTES:
            return
        _RECORD.pack_into(memory, offset, at, code)
        self._offset = offset + _RECORD.size
        _COUNT.pack_into(memory, 0, self._offset)


def read(directory: str) -> Dict[int, List[Tuple[int, str]]]:
    """pid -> [(ns, event)] of every trace file in `directory`."""
    traces = {}
    for name in os.listdir(directory):
        if not name.endswith(".trace"):
            continue
        with open(os.path.join(directory, name), "rb") as file:
            data = file.read()
        (end,) = _COUNT.unpack_from(data, 0)
        traces[int(name.split(".")[0])] = [
            (at, EVENTS[code]) for at, code in _RECORD.iter_unpack(data[_COUNT.size : end])
        ]
    return traces


def _wrap(
    cls: Any, name: str, before: Optional[int] = None, after: Optional[int] = None, after_if_result: bool = False
) -> None:
    """Stamp `before` the method runs and `after` it returns (with after_if_result, only if it returned something)."""
    method = getattr(cls, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            stamp(before)
        result = method(*args, **kwargs)
        if after is not None and (result or not after_if_result):
            stamp(after)
        return result

    setattr(cls, name, wrapper)


_recorder: Optional[_Recorder] = None


def stamp(code: int) -> None:
    _recorder.stamp(code)  # type: ignore[union-attr]


def install(directory: str) -> None:
    global _recorder
    _recorder = _Recorder(directory)
    import zmq

    from scaler.client.core import ClientCore
    from scaler.client.io_thread import IOThread
    from scaler.scheduler.core import SchedulerCore
    from scaler.scheduler.shell import SchedulerShell
    from scaler.worker.agent import WorkerAgent
    from scaler.worker.channel import MessageReader
    from scaler.worker.processor import TaskRunner
    from scaler.worker.processor_link import ProcessorLink

    role = {"poll": CODES["c.poll"], "sleep": CODES["c.sleep"]}  # the agent says otherwise when it starts

    poll = zmq.Poller.poll

    def traced_poll(self: Any, *args: Any) -> Any:
        stamp(role["sleep"])
        ready = poll(self, *args)
        if ready:
            stamp(role["poll"])
        return ready

    zmq.Poller.poll = traced_poll

    # the client
    _wrap(IOThread, "wake", before=CODES["c.queued"])  # before: the IO thread may stamp before it returns
    _wrap(IOThread, "_send_frame", after=CODES["c.flushed"])  # every frame of queued messages, encoded or joined
    _wrap(ClientCore, "_on_task_results", before=CODES["c.results"], after=CODES["c.settled"])

    # the scheduler
    _wrap(SchedulerShell, "_on_readable", before=CODES["s.drain"])
    receive = SchedulerCore.receive
    task_code, result_code = CODES["s.task"], CODES["s.result"]

    def traced_receive(self: Any, peer: bytes, messages: list, now: float) -> None:
        for message in messages:
            kind = type(message).__name__
            if kind == "Task":
                stamp(task_code)
            elif kind == "TaskResult":
                stamp(result_code)
        receive(self, peer, messages, now)

    SchedulerCore.receive = traced_receive
    _wrap(SchedulerCore, "take_outgoing", after=CODES["s.flush"], after_if_result=True)
    _wrap(SchedulerShell, "_flush", after=CODES["s.sent"], after_if_result=True)
    import selectors

    _wrap(selectors.EpollSelector, "select", before=CODES["s.sleep"], after=CODES["s.epoll"], after_if_result=True)

    # the worker agent
    agent_run = WorkerAgent.run

    def traced_agent_run(self: Any) -> int:
        role["poll"], role["sleep"] = CODES["a.poll"], CODES["a.sleep"]
        return agent_run(self)

    WorkerAgent.run = traced_agent_run
    _wrap(WorkerAgent, "_read_scheduler", before=CODES["a.read"], after=CODES["a.decoded"])
    _wrap(ProcessorLink, "_send", before=CODES["a.handed"])  # before: the processor may stamp before it returns
    _wrap(WorkerAgent, "_read_processor", before=CODES["a.report"])
    from scaler.worker import channel, outbox

    _wrap(outbox, "encode", after=CODES["a.sent"])  # the frame is encoded: it leaves next
    _wrap(outbox, "encode_many", after=CODES["a.sent"])

    # the processor (MessageReader.wait: only the processor waits on its channel)
    _wrap(MessageReader, "wait", before=CODES["p.sleep"], after=CODES["p.orders"])
    _wrap(TaskRunner, "run", before=CODES["p.run"], after=CODES["p.ran"])
    _wrap(channel, "send_encoded", before=CODES["p.sent"])  # encoded, about to be written
