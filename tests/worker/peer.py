"""A stand-in scheduler for worker tests: a real ZeroMQ ROUTER in the test process speaking the real protocol.

The test drives it: every wait pumps the socket, answers heartbeats with HeartbeatEcho and ObjectRequests from
`objects` (like the scheduler would), records both, and hands every other message to the test.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import cloudpickle
import zmq

from scaler.io.sockets import create_router
from scaler.protocol import (
    PROTOCOL_VERSION,
    Argument,
    ArgumentKind,
    Goodbye,
    HeartbeatEcho,
    Hello,
    HelloReply,
    ObjectKind,
    ObjectRequest,
    ObjectResponse,
    Task,
    TaskResult,
    WorkerHeartbeat,
    WorkerRetire,
    decode_frame,
    encode_many,
)

Received = Tuple[bytes, Any]  # (the sender's routing id, the decoded message)


class SchedulerPeer:
    def __init__(
        self, heartbeat_interval_ms: int = 100, echo_heartbeats: bool = True, max_frame_bytes: Optional[int] = None
    ) -> None:
        """`max_frame_bytes`: ZeroMQ drops a worker that sends a larger frame; the HelloReply does not say so, as an
        older scheduler's would not."""
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.echo_heartbeats = echo_heartbeats
        self.chunk_bytes: Optional[int] = None  # set to serve objects in several ObjectResponse chunks
        self.objects: Dict[bytes, Tuple[int, bytes]] = {}  # object id -> (ObjectKind, payload)
        self.object_requests: List[bytes] = []  # every id any worker asked for, in order
        self.heartbeats: List[Tuple[float, bytes, WorkerHeartbeat]] = []  # (arrival time, worker, heartbeat)
        self.inbox: List[Received] = []
        # Answer a WorkerRetire with Goodbye(retired) at once, as a scheduler does to a worker with nothing left to
        # run, instead of handing it to the test: set by the fixtures as they stop their workers.
        self.let_retiring_workers_go = False
        self._context = zmq.Context()
        if max_frame_bytes is None:
            self._router = create_router(self._context, "tcp://127.0.0.1:*")
        else:
            self._router = create_router(self._context, "tcp://127.0.0.1:*", max_frame_bytes)
        self.address = self._router.getsockopt(zmq.LAST_ENDPOINT).decode()

    def close(self) -> None:
        self._router.close(linger=0)
        self._context.term()

    # --- talking ------------------------------------------------------------------------------------------------------

    def send(self, identity: bytes, *messages: Any) -> None:
        self._router.send_multipart([identity, encode_many(list(messages))])

    def pump(self, timeout_seconds: float) -> None:
        """Wait up to `timeout_seconds` for traffic, then handle every frame that is there."""
        if not self._router.poll(max(1, int(timeout_seconds * 1000))):
            return
        while True:
            try:
                identity, frame = self._router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            for message in decode_frame(frame):
                self._receive(identity, message)

    def wait_for(
        self, predicate: Callable[[Received], bool], timeout_seconds: float = 10.0, what: str = "a message"
    ) -> Received:
        """Take the first received (identity, message) matching `predicate`, pumping until one comes."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            for index, received in enumerate(self.inbox):
                if predicate(received):
                    return self.inbox.pop(index)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out after {timeout_seconds}s waiting for {what}; inbox: {self.inbox}")
            self.pump(min(remaining, 0.05))

    def expect(self, message_type: type, timeout_seconds: float = 10.0, **fields: Any) -> Any:
        """The first message of that type whose fields equal `fields`."""

        def matches(received: Received) -> bool:
            message = received[1]
            return type(message) is message_type and all(getattr(message, k) == v for k, v in fields.items())

        return self.wait_for(matches, timeout_seconds, f"{message_type.__name__}{fields or ''}")[1]

    def pump_for(self, seconds: float) -> None:
        """Keep answering heartbeats and object requests for a while (the worker must not think we died)."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            self.pump(min(remaining, 0.05))

    def accept(self, timeout_seconds: float = 15.0, **reply_fields: Any) -> Tuple[bytes, Hello]:
        """Wait for a worker's Hello and answer it; returns the worker's routing id and its Hello."""
        identity, hello = self.wait_for(lambda received: type(received[1]) is Hello, timeout_seconds, "Hello")
        reply = dict(
            protocol_version=PROTOCOL_VERSION,
            accepted=True,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            peer_timeout_ms=10 * self.heartbeat_interval_ms,
            forwards_task_output=True,
        )
        reply.update(reply_fields)
        self.send(identity, HelloReply(**reply))
        return identity, hello

    def _receive(self, identity: bytes, message: Any) -> None:
        if type(message) is WorkerHeartbeat:
            self.heartbeats.append((time.monotonic(), identity, message))
            if self.echo_heartbeats:
                self.send(identity, HeartbeatEcho(sent_at_us=message.sent_at_us))
        elif type(message) is WorkerRetire and self.let_retiring_workers_go:
            self.send(identity, Goodbye(reason="retired (test over)", retired=True))
        elif type(message) is ObjectRequest:
            self.object_requests.extend(message.object_ids)
            self.send(identity, *[response for object_id in message.object_ids for response in self._serve(object_id)])
        else:
            self.inbox.append((identity, message))

    def _serve(self, object_id: bytes) -> List[ObjectResponse]:
        if object_id not in self.objects:
            return [ObjectResponse(object_id=object_id, found=False)]
        kind, payload = self.objects[object_id]
        size = self.chunk_bytes or max(1, len(payload))
        chunks = [payload[start : start + size] for start in range(0, len(payload), size)] or [b""]
        return [
            ObjectResponse(
                object_id=object_id,
                found=True,
                kind=kind,
                payload=chunk,
                chunk_index=index,
                chunk_count=len(chunks),
                total_size=len(payload),
            )
            for index, chunk in enumerate(chunks)
        ]

    # --- what a client would send -------------------------------------------------------------------------------------

    def put_object(self, payload: bytes, kind: int = ObjectKind.object) -> bytes:
        object_id = hashlib.blake2b(payload, digest_size=16).digest()
        self.objects[object_id] = (kind, payload)
        return object_id

    def put_function(self, function: Callable, serializer: Any = cloudpickle) -> bytes:
        return self.put_object(_dumps(serializer, function), ObjectKind.function)

    def task(
        self,
        function: Callable,
        *args: Any,
        serializer: Any = cloudpickle,
        serializer_id: bytes = b"",
        profiling: bool = False,
        **kwargs: Any,
    ) -> Task:
        """A Task calling `function`: plain values go inline, Ref/TaskRef arguments by reference."""
        arguments = []
        for name, value in [*(("", arg) for arg in args), *kwargs.items()]:
            if isinstance(value, Ref):
                arguments.append(Argument(kind=ArgumentKind.object_ref, name=name, data=value.object_id))
            elif isinstance(value, TaskRef):
                arguments.append(Argument(kind=ArgumentKind.task_ref, name=name, data=value.task_id))
            else:
                arguments.append(Argument(kind=ArgumentKind.inline, name=name, data=_dumps(serializer, value)))
        return Task(
            task_id=os.urandom(16),
            function_id=self.put_function(function, serializer),
            args=arguments,
            profiling=profiling,
            serializer_id=serializer_id,
        )

    def result_of(self, task: Task, timeout_seconds: float = 10.0) -> TaskResult:
        return self.expect(TaskResult, timeout_seconds, task_id=task.task_id)

    def run(self, identity: bytes, task: Task, timeout_seconds: float = 10.0) -> TaskResult:
        self.send(identity, task)
        return self.result_of(task, timeout_seconds)


class Ref:
    """An objectRef argument for SchedulerPeer.task."""

    def __init__(self, object_id: bytes) -> None:
        self.object_id = object_id


class TaskRef:
    """A taskRef argument for SchedulerPeer.task: the result object of another task."""

    def __init__(self, task_id: bytes) -> None:
        self.task_id = task_id


def _dumps(serializer: Any, value: Any) -> bytes:
    return serializer.dumps(value) if serializer is cloudpickle else serializer.serialize(value)
