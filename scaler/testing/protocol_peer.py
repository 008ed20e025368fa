"""Internal: a real ROUTER speaking the Scaler protocol, playing scheduler and worker for client tests.

It answers the handshake, heartbeats, objects and disconnects like the scheduler, and runs tasks itself like a worker
(deserializing functions and arguments with cloudpickle or the client's shipped serializer). It records every message
it receives, with the index of the frame that carried it, so tests can check what the client put on the wire.
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple

import cloudpickle
import zmq

from scaler.config import DEFAULT_INLINE_LIMIT_BYTES
from scaler.protocol import (
    PROTOCOL_VERSION,
    ArgumentKind,
    ClientDisconnect,
    ClientHeartbeat,
    DisconnectReply,
    Goodbye,
    HeartbeatEcho,
    Hello,
    HelloReply,
    ObjectDelete,
    ObjectKind,
    ObjectPut,
    ObjectRequest,
    ObjectResponse,
    Task,
    TaskCancel,
    TaskResult,
    TaskStatus,
    decode_frame,
    encode,
    encode_many,
)


class _Stored:
    def __init__(self, kind: int, name: str, chunk_count: int) -> None:
        self.kind = kind
        self.name = name
        self.chunk_count = chunk_count
        self.chunks: List[bytes] = []

    @property
    def payload(self) -> bytes:
        return b"".join(self.chunks)


class ProtocolPeer:
    """Options: `refuse` (HelloReply reason), `answer_hello`, `execute` (False: hold tasks until release()),
    `answer_cancels` (False: ignore TaskCancel), `threaded` (run each task in its own thread, for nested tasks),
    `protected` (refuse shutdown), `answer` (a hook returning a TaskResult to send instead of running the task),
    `address` (bind there, as a scheduler restarted on the address of one that died, instead of a random port),
    `task_policies` (what its HelloReply says: False plays an older scheduler), `max_frame_bytes` (ZeroMQ drops a
    client that sends a larger frame; the HelloReply does not announce it, as an older scheduler's would not)."""

    def __init__(
        self,
        refuse: Optional[str] = None,
        answer_hello: bool = True,
        execute: bool = True,
        answer_cancels: bool = True,
        threaded: bool = False,
        protected: bool = True,
        heartbeat_interval_ms: int = 200,
        peer_timeout_ms: int = 30_000,
        answer: Optional[Callable[[Task], Optional[TaskResult]]] = None,
        address: Optional[str] = None,
        task_policies: bool = True,
        max_frame_bytes: Optional[int] = None,
    ) -> None:
        self.refuse = refuse
        self.task_policies = task_policies
        self.answer_hello = answer_hello
        self.execute = execute
        self.answer_cancels = answer_cancels
        self.threaded = threaded
        self.protected = protected
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.peer_timeout_ms = peer_timeout_ms
        self.answer = answer
        self.received: List[Tuple[int, Any]] = []  # (frame index, message)
        self.objects: Dict[bytes, _Stored] = {}
        self.held: Dict[bytes, Tuple[bytes, Task]] = {}
        self.finished: Dict[bytes, Tuple[int, Any, bytes, str]] = {}  # task id -> (status, value, payload, error)
        self._finished_changed = threading.Condition()
        self._frames = 0
        self._context = zmq.Context()
        self._router = self._context.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        self._router.setsockopt(zmq.SNDHWM, 0)  # as the scheduler: a ROUTER drops what exceeds its high-water mark
        self._router.setsockopt(zmq.RCVHWM, 0)
        if max_frame_bytes is not None:
            self._router.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
        if address is None:
            address = "tcp://127.0.0.1:{}".format(self._router.bind_to_random_port("tcp://127.0.0.1"))
        else:
            self._router.bind(address)
        self.address = address
        self._outbox: queue.SimpleQueue[Tuple[bytes, bytes]] = queue.SimpleQueue()
        self._commands: queue.SimpleQueue[Callable[[], Any]] = queue.SimpleQueue()
        self._hellos: Dict[bytes, Hello] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="protocol-peer", daemon=True)
        self._thread.start()

    # ---- test helpers ------------------------------------------------------------------------------------------------

    def __enter__(self) -> ProtocolPeer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._context.destroy(linger=0)

    def messages(self, message_type: type) -> List[Any]:
        return [message for _, message in list(self.received) if type(message) is message_type]

    def frames_of(self, message_type: type) -> List[int]:
        return [frame for frame, message in list(self.received) if type(message) is message_type]

    def counts(self) -> Counter:
        return Counter(type(message).__name__ for _, message in list(self.received))

    def puts_of_kind(self, kind: ObjectKind) -> List[ObjectPut]:
        return [put for put in self.messages(ObjectPut) if put.kind == kind]

    def send_to_all(self, message: Any) -> None:
        """Send `message` to every peer that said Hello."""

        def send() -> None:
            for identity in self._hellos:
                self._send(identity, message)

        self._commands.put(send)

    def release(self, task_id: bytes) -> None:
        """Run a task held because execute=False, even if the client canceled it meanwhile (a crossing result)."""
        self._commands.put(lambda: self._run_task(*self.held.pop(task_id)))

    # ---- the loop ----------------------------------------------------------------------------------------------------

    def _run(self) -> None:
        router = self._router
        while not self._stop.is_set():
            if router.poll(5):
                while True:
                    try:
                        identity, frame = router.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._frames += 1
                    for message in decode_frame(frame):
                        self.received.append((self._frames, message))
                        self._handle(identity, message)
            while True:
                try:
                    self._commands.get_nowait()()
                except queue.Empty:
                    break
            batches: Dict[bytes, List[bytes]] = {}
            while True:
                try:
                    identity, frame = self._outbox.get_nowait()
                except queue.Empty:
                    break
                batches.setdefault(identity, []).append(frame)
            for identity, frames in batches.items():  # many messages per frame, as the scheduler sends them
                router.send_multipart([identity, b"".join(frames)])
        router.close(linger=0)

    def _send(self, identity: bytes, message: Any) -> None:
        self._outbox.put((identity, encode(message)))

    def _handle(self, identity: bytes, message: Any) -> None:
        kind = type(message)
        if kind is Hello:
            resumed = identity in self._hellos  # a Hello again on a connection this peer knows: the session stays
            self._hellos[identity] = message
            if not self.answer_hello:
                return
            if self.refuse is not None:
                self._send(identity, HelloReply(protocol_version=PROTOCOL_VERSION, accepted=False, reason=self.refuse))
                return
            self._send(
                identity,
                HelloReply(
                    protocol_version=PROTOCOL_VERSION,
                    accepted=True,
                    heartbeat_interval_ms=self.heartbeat_interval_ms,
                    peer_timeout_ms=self.peer_timeout_ms,
                    resumed=resumed,
                    task_policies=self.task_policies,
                ),
            )
        elif kind is ClientHeartbeat:
            self._send(identity, HeartbeatEcho(sent_at_us=message.sent_at_us))
        elif kind is ObjectPut:
            stored = self.objects.get(message.object_id)
            if stored is None or len(stored.chunks) == stored.chunk_count:
                stored = _Stored(message.kind, message.name, message.chunk_count)
                self.objects[message.object_id] = stored
            stored.chunks.append(message.payload)
        elif kind is ObjectDelete:
            for object_id in message.object_ids:
                self.objects.pop(object_id, None)
        elif kind is ObjectRequest:
            for object_id in message.object_ids:
                stored = self.objects.get(object_id)
                if stored is None:
                    self._send(identity, ObjectResponse(object_id=object_id, found=False))
                    continue
                self._send(
                    identity,
                    ObjectResponse(
                        object_id=object_id,
                        found=True,
                        kind=stored.kind,
                        payload=stored.payload,
                        total_size=len(stored.payload),
                    ),
                )
        elif kind is Task:
            if self.answer is not None:
                result = self.answer(message)
                if result is not None:
                    self._send(identity, result)
                    return
            if not self.execute:
                self.held[message.task_id] = (identity, message)
            elif self.threaded:
                threading.Thread(target=self._run_task, args=(identity, message), daemon=True).start()
            else:
                self._run_task(identity, message)
        elif kind is TaskCancel and self.answer_cancels:
            for task_id in message.task_ids:
                if self.held.pop(task_id, None) is not None:
                    self._send(identity, TaskResult(task_id=task_id, status=TaskStatus.canceled))
                else:
                    self._send(identity, TaskResult(task_id=task_id, status=TaskStatus.not_found))
        elif kind is ClientDisconnect:
            if message.shutdown_cluster and self.protected:
                self._send(identity, DisconnectReply(accepted=False, reason="protected mode"))
            else:
                self._send(identity, DisconnectReply(accepted=True))
                if message.shutdown_cluster:
                    self._send(identity, Goodbye(reason="shutting down"))

    # ---- the "worker" ------------------------------------------------------------------------------------------------

    def _serializer(self, task: Task) -> Any:
        if not task.serializer_id:
            return cloudpickle
        return _Loads(cloudpickle.loads(self.objects[task.serializer_id].payload))

    def _run_task(self, identity: bytes, task: Task) -> None:
        serializer = self._serializer(task)
        for dependency in task.dependencies:
            stored = self.objects.get(dependency)
            if stored is not None and stored.kind == ObjectKind.result and dependency not in self.finished:
                # a result the client sent back to a scheduler that restarted: a finished dependency
                value = serializer.loads(stored.payload)
                self.finished[dependency] = (TaskStatus.success, value, stored.payload, "")
            with self._finished_changed:

                def finished(dependency: bytes = dependency) -> bool:
                    return dependency in self.finished

                self._finished_changed.wait_for(finished, timeout=20)
            status, _, payload, error_text = self.finished[dependency]
            if status != TaskStatus.success:
                self._finish(identity, task, status, None, payload, error_text)
                return
        try:
            function = serializer.loads(self.objects[task.function_id].payload)
            args, kwargs = [], {}
            for argument in task.args:
                if argument.kind == ArgumentKind.inline:
                    value = serializer.loads(argument.data)
                elif argument.kind == ArgumentKind.object_ref:
                    value = serializer.loads(self.objects[argument.data].payload)
                else:
                    value = self.finished[argument.data][1]
                if argument.name:
                    kwargs[argument.name] = value
                else:
                    args.append(value)
            value = function(*args, **kwargs)
            payload = serializer.dumps(value)
        except Exception as error:
            self._finish(identity, task, TaskStatus.failed, None, cloudpickle.dumps(error), traceback.format_exc())
            return
        self._finish(identity, task, TaskStatus.success, value, payload, "")

    def _finish(self, identity: bytes, task: Task, status: int, value: Any, payload: bytes, error_text: str) -> None:
        with self._finished_changed:
            self.finished[task.task_id] = (status, value, payload, error_text)
            self._finished_changed.notify_all()
        if not task.report_result:
            return
        profiling: Dict[str, Any] = dict(duration_us=1500, cpu_time_us=1000, peak_memory=4096) if task.profiling else {}
        if status == TaskStatus.success and len(payload) > DEFAULT_INLINE_LIMIT_BYTES:
            put = ObjectPut(object_id=task.task_id, kind=ObjectKind.result, payload=payload, total_size=len(payload))
            self._handle(identity, put)  # as the scheduler stores a worker's result object
            result = TaskResult(task_id=task.task_id, status=status, in_object=True, **profiling)
        else:
            result = TaskResult(
                task_id=task.task_id, status=status, payload=payload, error_text=error_text, **profiling
            )
        self._outbox.put((identity, encode_many([result])))


class _Loads:
    """A shipped Serializer seen through cloudpickle's loads/dumps names."""

    def __init__(self, serializer: Any) -> None:
        self.loads = serializer.deserialize
        self.dumps = serializer.serialize
