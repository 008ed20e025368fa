"""Drives the sans-IO WorkerCore with real encoded messages and simulated processors: no sockets, no processes.

A SimProcessor behaves as scaler/worker/processor.py does, one step at a time, so a test (or a seeded random walk)
chooses the interleaving: orders reach it only when it reads them (between tasks), it runs its pending tasks in order,
writes its progress (started, finished) as it goes, holds results until it reports, parks when its task blocks, and
skips what it was handed before an end-of-parking order. After every stimulus the harness runs core.validate().
"""

from __future__ import annotations

import os
from collections import deque
from typing import Deque, Dict, FrozenSet, List, Optional, Set, Tuple

import cloudpickle

from scaler.io.shared_bytes import SharedBytes
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
from scaler.worker.channel import decode_message, encode_message
from scaler.worker.core import WorkerCore
from scaler.worker.instructions import (
    AcceptDataKeys,
    AllowMemory,
    Connect,
    DropTasks,
    EndParking,
    Exit,
    FetchData,
    ForgetObjects,
    GiveSpares,
    HandTasks,
    KillProcessor,
    ReadBackHeld,
    SampleMemory,
    SendHeartbeat,
    SpillHeld,
    StartProcessor,
)
from scaler.worker.processor_messages import (
    OutputChunk,
    ProcessorArgument,
    ProcessorOrders,
    ProcessorReport,
    ProcessorResult,
    ProcessorTask,
)
from scaler.worker.settings import WorkerSettings

FUNCTION = b"f" * 32
SHORT_US = 20  # what a simulated task reports as its duration unless told otherwise


class SimProcessor:
    def __init__(self, number: int) -> None:
        self.number = number
        self.inbox: Deque[ProcessorOrders] = deque()  # sent, not read yet
        self.pending: Deque[ProcessorTask] = deque()
        self.to_drop: Set[bytes] = set()
        self.started = 0
        self.done = 0
        self.running: Optional[ProcessorTask] = None
        self.results: List[ProcessorResult] = []
        self.dropped: List[bytes] = []
        self.parked = False  # its running task blocked; it runs nothing else until the end-of-parking order
        self.skipping = False  # its parked task ended: it skips orders up to the end-of-parking one
        self.alive = True
        self.ran: List[bytes] = []  # every task id it started, in order
        self.forgotten: List[bytes] = []  # object ids it was told to drop on their own, not with a task
        self.spares: List[Tuple[bytes, SharedBytes]] = []  # files of freed results given back to it (spares.py)

    def read_orders(self) -> None:
        if self.skipping:
            while self.inbox:
                order = self.inbox.popleft()
                if order.end_of_parking:
                    self.skipping = False
                    break
            if self.skipping:
                return
        while self.inbox:
            order = self.inbox.popleft()
            if order.forget:  # dropped at once: no task it was handed may still need them
                assert not self.pending and self.running is None, f"forget {order.forget} reached a busy processor"
                self.forgotten.extend(order.forget)
            self.spares.extend(order.spares)
            self.pending.extend(order.tasks)
            self.to_drop.update(order.drops)

    def start_next(self) -> Optional[ProcessorTask]:
        """Start the next pending task (dropping those it was told to); None if there is none or it is busy."""
        if self.running is not None or self.skipping:
            return None
        while self.pending:
            task = self.pending.popleft()
            if task.task_id in self.to_drop:
                self.to_drop.discard(task.task_id)
                self.dropped.append(task.task_id)
                continue
            self.running = task
            self.started = task.seq
            self.ran.append(task.task_id)
            return task
        return None

    def finish(self, succeeded: bool = True, payload: Optional[bytes] = None, duration_us: int = SHORT_US) -> None:
        task = self.running
        assert task is not None, "nothing running"
        if payload is None:
            payload = cloudpickle.dumps(task.task_id)
        self.results.append(
            ProcessorResult(task.task_id, succeeded, payload, "" if succeeded else "boom", duration_us, 0, 0)
        )
        self.done = task.seq
        self.running = None
        if self.parked:
            self.parked = False
            self.skipping = True  # the agent took back what it handed before its end-of-parking order
            self.pending.clear()
            self.to_drop.clear()

    def report(self, blocked: Optional[bytes] = None) -> ProcessorReport:
        report = ProcessorReport(self.results, self.dropped, blocked)
        self.results, self.dropped = [], []
        return report


class Harness:
    def __init__(self, data_address: str = "", **settings) -> None:
        """`data_address`: where the shell would serve held results (none: the worker puts them, as without one)."""
        settings.setdefault("address", "tcp://127.0.0.1:1")
        settings.setdefault("heartbeat_interval_seconds", 1.0)
        settings.setdefault("death_timeout_seconds", 30.0)
        self.now = 1000.0
        settings_object = WorkerSettings(**settings)
        self.core = WorkerCore(settings_object, "Worker[test]", "host", 4242, self.now, data_address=data_address)
        self.processors: Dict[int, SimProcessor] = {}
        self.sent: List[object] = []  # every message the core sent, decoded
        self.heartbeats: List[SendHeartbeat] = []
        self.hands: List[HandTasks] = []
        self.fetches: List[FetchData] = []
        self.data_keys: List[FrozenSet[bytes]] = []  # what the data address was told to accept (AcceptDataKeys)
        self.exit: Optional[Exit] = None
        self.connections = 0
        self.killed: List[int] = []
        self.samples: List[SampleMemory] = []  # memory samples asked for (with a memory limit)
        self.moves: List[object] = []  # SpillHeld, ReadBackHeld and AllowMemory, in order
        self._step()

    # --- stimuli ------------------------------------------------------------------------------------------------------

    def send(self, *messages) -> List[object]:
        """Encode and decode (like off the wire), feed the core; returns what it sent back."""
        self._observe()
        self.core.receive(decode_frame(encode_many(messages)), self.now)
        return self._step()

    def tick(self, advance: float = 0.0) -> List[object]:
        self.now += advance
        self._observe()
        self.core.tick(self.now)
        return self._step()

    def report(self, number: int, blocked: Optional[bytes] = None) -> List[object]:
        self._observe()
        self.core.processor_report(number, self.processors[number].report(blocked), self.now)
        return self._step()

    def retire(self, deadline_seconds: float = 30.0) -> List[object]:
        """What the agent does on SIGTERM."""
        self.core.retire(deadline_seconds, "received SIGTERM", self.now)
        return self._step()

    def output(self, number: int, *chunks: tuple) -> List[object]:
        """What processor `number` wrote: (seq, stream, data) or (seq, stream, data, dropped) each."""
        self._observe()
        whole = [OutputChunk(*chunk, *(() if len(chunk) == 4 else (0,))) for chunk in chunks]
        self.core.processor_output(number, whole, self.now)
        return self._step()

    def block(self, number: int) -> List[object]:
        sim = self.processors[number]
        assert sim.running is not None and not sim.parked
        sim.parked = True
        return self.report(number, blocked=sim.running.task_id)

    def die(self, number: int, memory_peak: Optional[int] = None) -> List[object]:
        """`memory_peak`: the kernel killed it at its memory cgroup's limit (the shell read the cgroup's counter)."""
        self._observe()  # the shell reads a dead processor's last progress first
        self.processors[number].alive = False
        self.core.processor_died(number, "signal SIGKILL", self.now, memory_peak)
        return self._step()

    def memory(self, usage: Dict[int, int]) -> List[object]:
        """Answer the last SampleMemory with these figures (bytes by processor number), as the shell does."""
        self._observe()
        self.core.memory_sampled(usage, self.now)
        return self._step()

    def run(self, number: int, count: int = 1, **finish) -> List[object]:
        """Read orders, run `count` tasks, report: what a processor does with a batch."""
        sim = self.processors[number]
        for _ in range(count):
            sim.read_orders()
            if sim.start_next() is None:
                break
            sim.finish(**finish)
        return self.report(number)

    # --- helpers ------------------------------------------------------------------------------------------------------

    def connect(
        self,
        peer_timeout_ms: int = 5000,
        forwards_task_output: bool = True,
        holds_on_workers: bool = True,
        memory_pause: bool = True,
    ) -> None:
        self.send(
            HelloReply(
                protocol_version=PROTOCOL_VERSION,
                accepted=True,
                heartbeat_interval_ms=1000,
                peer_timeout_ms=peer_timeout_ms,
                forwards_task_output=forwards_task_output,
                holds_on_workers=holds_on_workers,
                memory_pause=memory_pause,
            )
        )

    @property
    def active(self) -> SimProcessor:
        return self.processors[self.core.active.number]

    def task(self, *object_ids: bytes, parent: bytes = b"", function_id: bytes = FUNCTION, **fields) -> Task:
        args = [Argument(kind=ArgumentKind.inline, data=cloudpickle.dumps(1))]
        args += [Argument(kind=ArgumentKind.object_ref, data=object_id) for object_id in object_ids]
        return Task(task_id=os.urandom(16), function_id=function_id, args=args, parent_task_id=parent, **fields)

    def serve(self, object_id: bytes, payload: bytes = b"payload") -> List[object]:
        return self.send(
            ObjectResponse(
                object_id=object_id,
                found=True,
                kind=ObjectKind.object,
                payload=payload,
                chunk_index=0,
                chunk_count=1,
                total_size=len(payload),
            )
        )

    def _observe(self) -> None:
        for number, sim in self.processors.items():
            if sim.alive:
                self.core.observe(number, sim.started, sim.done, self.now)

    def _step(self) -> List[object]:
        """Validate, carry out the core's instructions as the shell does, return what it sent (decoded)."""
        core = self.core
        core.validate()
        for instruction in core.take_instructions():
            kind = type(instruction)
            if kind is StartProcessor:
                assert instruction.number not in self.processors
                self.processors[instruction.number] = SimProcessor(instruction.number)
            elif kind is HandTasks:
                # through the channel's own encoding, as the processor receives them
                # shared payloads stand as their sizes: the simulated processor reads no payload
                orders = decode_message(encode_message(ProcessorOrders(instruction.tasks, [])))
                # read by name in tests (the processor unpacks the plain tuples)
                tasks = [
                    ProcessorTask(*task[:6], [ProcessorArgument(*a) for a in task[6]], *task[7:])
                    for task in orders.tasks
                ]
                orders = orders._replace(tasks=tasks)
                self.hands.append(HandTasks(instruction.number, orders.tasks, instruction.shared))
                self.processors[instruction.number].inbox.append(orders)
            elif kind is DropTasks:
                self.processors[instruction.number].inbox.append(ProcessorOrders([], list(instruction.task_ids)))
            elif kind is EndParking:
                self.processors[instruction.number].inbox.append(ProcessorOrders([], [], True))
            elif kind is FetchData:
                self.fetches.append(instruction)
            elif kind is AcceptDataKeys:
                self.data_keys.append(instruction.keys)
            elif kind is GiveSpares:
                self.processors[instruction.number].inbox.append(ProcessorOrders([], [], spares=instruction.spares))
            elif kind is ForgetObjects:
                self.processors[instruction.number].inbox.append(
                    ProcessorOrders([], [], False, list(instruction.object_ids))
                )
            elif kind is KillProcessor:
                self.processors[instruction.number].alive = False
                self.killed.append(instruction.number)
            elif kind is SendHeartbeat:
                self.heartbeats.append(instruction)
            elif kind is SampleMemory:
                self.samples.append(instruction)
            elif kind is SpillHeld or kind is ReadBackHeld or kind is AllowMemory:
                self.moves.append(instruction)  # the shell moves the bytes; the core counts them moved
            elif kind is Connect:
                self.connections += 1
                core.connecting(f"W|test|{self.connections}", self.now)
            elif kind is Exit:
                self.exit = instruction
            else:
                raise AssertionError(f"unknown instruction {instruction!r}")
        outgoing = core.take_outgoing()
        if not outgoing:
            return []
        sent = decode_frame(encode_many([message for message, _ in outgoing]))
        self.sent.extend(sent)
        return sent


def of_type(messages: List[object], message_type: type) -> List[object]:
    return [message for message in messages if type(message) is message_type]
