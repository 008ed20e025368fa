"""Internal: drives the sans-IO scheduler core with real encoded messages, no sockets: the core's own test bench.

After every step the core's invariants are asserted (`SchedulerCore.validate`)."""

from __future__ import annotations

from typing import Dict, List, Optional

from scaler.protocol import (
    PROTOCOL_VERSION,
    Argument,
    ArgumentKind,
    HeldResult,
    Hello,
    HelloReply,
    Resource,
    Role,
    Task,
    TaskResult,
    TaskStatus,
    decode_frame,
    decode_frame_for_routing,
    encode_many,
)
from scaler.scheduler.core import SchedulerCore
from scaler.scheduler.settings import SchedulerSettings

CLIENT = b"C|test|1|client"
WORKER_A = b"W|test|2|a"
WORKER_B = b"W|test|3|b"
SHELL_TICK_SECONDS = 0.1


class Harness:
    def __init__(self, validate: bool = True, **settings) -> None:
        """`validate=False` only where a test takes so many steps over so many tasks that validating each is
        quadratic; such a test calls `core.validate()` itself where it matters."""
        settings.setdefault("address", "tcp://127.0.0.1:1")
        self.validate = validate
        self.now = 1000.0
        self.core = SchedulerCore(SchedulerSettings(**settings), self.now)
        self._task_counter = 0

    def send(self, peer: bytes, *messages) -> Dict[bytes, List[object]]:
        """Encode, decode (so each message carries .raw like off the wire), feed the core, return what it sent."""
        self.core.receive(peer, decode_frame_for_routing(encode_many(messages)), self.now)  # as the shell reads
        if self.validate:
            self.core.validate()
        return self.outbox()

    def tick(self, advance: float = 0.0) -> Dict[bytes, List[object]]:
        """Let `advance` seconds pass as the shell does, ticking every 0.1 s (a longer gap is a stall, forgiven)."""
        end = self.now + advance
        while self.now + SHELL_TICK_SECONDS < end:
            self.now += SHELL_TICK_SECONDS
            self.core.tick(self.now)
            if self.validate:
                self.core.validate()
        self.now = end
        self.core.tick(self.now)
        if self.validate:
            self.core.validate()
        return self.outbox()

    def outbox(self) -> Dict[bytes, List[object]]:
        return {peer: decode_frame(b"".join(chunks)) for peer, chunks in self.core.take_outgoing().items()}

    def connect_client(
        self,
        peer: bytes = CLIENT,
        fetches_from_holders: bool = False,
        data_address: str = "",
        actors: Optional[List[bytes]] = None,
    ) -> HelloReply:
        """`actors`: those it created, registering again after losing its scheduler."""
        hello = Hello(
            protocol_version=PROTOCOL_VERSION,
            role=Role.client,
            name="client",
            fetches_from_holders=fetches_from_holders,
            data_address=data_address,
            actors=list(actors or []),
        )
        (reply,) = self.send(peer, hello)[peer]
        assert isinstance(reply, HelloReply) and reply.accepted, reply
        return reply

    def connect_worker(
        self,
        peer: bytes = WORKER_A,
        capacity: int = 10,
        resources: Optional[Dict[str, float]] = None,
        data_address: str = "",
        fetches_from_holders: bool = False,
        takes_handoffs: Optional[bool] = None,
        held_results: Optional[Dict[bytes, int]] = None,
        memory_limit: int = 0,
        actor_slots: int = 0,
        actors: Optional[List[bytes]] = None,
    ) -> HelloReply:
        """`takes_handoffs`: by default, whether it has a data address (as our workers say). `held_results`: object id
        -> size of the results it still holds, registering again after losing its scheduler; `actors`, the actors
        it still hosts then."""
        hello = Hello(
            protocol_version=PROTOCOL_VERSION,
            role=Role.worker,
            name=peer.decode(),
            capacity=capacity,
            resources=[Resource(name=name, amount=amount) for name, amount in (resources or {}).items()],
            task_policies=True,
            data_address=data_address,
            fetches_from_holders=fetches_from_holders,
            takes_handoffs=bool(data_address) if takes_handoffs is None else takes_handoffs,
            held_results=[HeldResult(object_id=key, size=size) for key, size in (held_results or {}).items()],
            memory_limit=memory_limit,
            actor_slots=actor_slots,
            actors=list(actors or []),
        )
        reply = self.send(peer, hello)[peer][0]  # ready tasks may follow the reply at once
        assert isinstance(reply, HelloReply) and reply.accepted, reply
        return reply

    def task(self, dependencies: Optional[List[bytes]] = None, report_result: bool = True, **fields) -> Task:
        self._task_counter += 1
        args = [Argument(kind=ArgumentKind.task_ref, data=d) for d in dependencies or []]
        return Task(
            task_id=self._task_counter.to_bytes(16, "big"),
            function_id=fields.pop("function_id", b"f" * 16),
            args=args or [Argument(kind=ArgumentKind.inline, data=b"arg")],
            dependencies=list(dependencies or []),
            report_result=report_result,
            **fields,
        )


def result(task: Task, status: TaskStatus = TaskStatus.success, payload: bytes = b"ok", **fields) -> TaskResult:
    return TaskResult(task_id=task.task_id, status=status, payload=payload, **fields)


def of_type(messages: List[object], message_type: type) -> List[object]:
    return [m for m in messages if type(m) is message_type]
