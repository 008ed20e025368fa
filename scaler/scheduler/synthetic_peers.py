"""Internal: synthetic peers for the scheduler, sans-IO: one client and two workers, their frames and their answers.

The scheduler's JIT warm-up (scaler/scheduler/warmup.py) drives them against a private scheduler under PyPy, and
tests/scheduler/test_warmup.py against the core; imported by the scheduler at run time, so standard library and the
protocol only, Python 3.9 syntax (PyPy).
"""

from __future__ import annotations

from typing import Dict, List, Set, Tuple

from scaler.protocol import (
    PROTOCOL_VERSION,
    Argument,
    ArgumentKind,
    ClientDisconnect,
    ClientHeartbeat,
    Hello,
    ObjectKind,
    ObjectPut,
    ObjectRequest,
    Role,
    Task,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerHeartbeat,
    decode_frame_for_routing,
    encode,
    encode_many,
)

CLIENT = b"C|jit-warmup|0|client"
WORKERS = (b"W|jit-warmup|1|a", b"W|jit-warmup|2|b")
FUNCTION_ID = b"jit-warmup-function-id-32-bytes!"
FUNCTION = b"\x80\x05\x95\x14\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x03abs\x94\x93\x94."  # pickled abs
MAP_TASKS = 1024
# Not a power of two: levels of odd length, whose last node moves up a level, as in most real trees. A binary tree over
# L leaves has L - 1 inner nodes whatever L is.
TREE_LEAVES = 1000
FRAME_TASKS = 256  # the real client batches this many tasks of a map in a frame (a graph travels in one frame)
# Less than a round hands each worker: they fill up, and the paths of full workers (closed, then refilled in batches,
# ready tasks left waiting in the queue) are traced too. A real worker announces 1,000 by default and a graph or a map
# of a few thousand tasks fills it; a first graph found them untraced (docs/performance.md, "The first graph").
WORKER_CAPACITY = 256
TASKS_PER_ROUND = MAP_TASKS + 2 * TREE_LEAVES - 1
RESULTS_PER_ROUND = MAP_TASKS + 1  # what the client asks back: every map task, and of the tree only its root
_TASK = Task.WHICH
_RESULT = TaskResult.WHICH


class SyntheticPeers:
    """One client and two workers, sans-IO: the frames they send, and how the workers answer what they receive.

    Every frame is built once: a round's task ids are free again once its results are back, so each round sends the
    same bytes."""

    def __init__(self) -> None:
        self.client_frames = _frames([_task(number) for number in range(MAP_TASKS)]) + _tree_frames()
        self._results: Dict[bytes, bytes] = {}  # task id -> its encoded result
        for frame in self.client_frames:
            for task in decode_frame_for_routing(frame):
                result = TaskResult(task_id=task.task_id, status=TaskStatus.success, payload=b"\x80\x05K\x01.")
                self._results[task.task_id] = encode(result)
        self._fetched: Set[bytes] = set()  # the workers that asked for the function

    def hellos(self) -> List[Tuple[bytes, bytes]]:
        """(identity, frame) of each peer's Hello."""
        hellos = [(CLIENT, encode(Hello(protocol_version=PROTOCOL_VERSION, role=Role.client, name="jit-warmup")))]
        for worker in WORKERS:
            hello = Hello(
                protocol_version=PROTOCOL_VERSION, role=Role.worker, name=worker.decode(), capacity=WORKER_CAPACITY,
                task_policies=True,
            )  # fmt: skip
            hellos.append((worker, encode(hello)))
        return hellos

    @staticmethod
    def function() -> bytes:
        """The client's frame that puts the function its tasks call, as a real client does before its first task."""
        put = ObjectPut(
            object_id=FUNCTION_ID, kind=ObjectKind.function, name="abs", payload=FUNCTION, chunk_index=0,
            chunk_count=1, total_size=len(FUNCTION),
        )  # fmt: skip
        return encode(put)

    def answer(self, worker: bytes, frame: bytes) -> bytes:
        """`worker`'s reply to a frame from the scheduler: the results of its tasks, at once (b"" if none); with the
        first tasks it is sent, a request for their function ahead of them, as a real worker fetches what it lacks."""
        results = [self._results[m.task_id] for m in decode_frame_for_routing(frame) if m.WHICH == _TASK]
        if results and worker not in self._fetched:
            self._fetched.add(worker)
            results.insert(0, encode(ObjectRequest(object_ids=[FUNCTION_ID])))
        return b"".join(results)

    @staticmethod
    def results_in(frame: bytes) -> int:
        """How many results a frame to the client holds."""
        return sum(1 for message in decode_frame_for_routing(frame) if message.WHICH == _RESULT)

    @staticmethod
    def heartbeats(now: float) -> List[Tuple[bytes, bytes]]:
        sent_at_us = int(now * 1e6)
        beats = [(CLIENT, encode(ClientHeartbeat(sent_at_us=sent_at_us, interval_ms=1000)))]
        return beats + [(w, encode(WorkerHeartbeat(sent_at_us=sent_at_us, interval_ms=1000))) for w in WORKERS]

    @staticmethod
    def goodbyes() -> List[Tuple[bytes, bytes]]:
        return [(CLIENT, encode(ClientDisconnect()))] + [(w, encode(WorkerDisconnect())) for w in WORKERS]


def _task(number: int, dependencies: Tuple[bytes, ...] = (), report_result: bool = True) -> Task:
    if dependencies:
        args = [Argument(kind=ArgumentKind.task_ref, data=dependency) for dependency in dependencies]
    else:
        args = [Argument(kind=ArgumentKind.inline, data=b"\x80\x05K\x07.")]
    return Task(
        task_id=b"jit-warmup" + number.to_bytes(6, "big"),
        function_id=FUNCTION_ID,
        args=args,
        dependencies=list(dependencies),
        report_result=report_result,
    )


def _frames(tasks: List[Task]) -> List[bytes]:
    return [encode_many(tasks[i : i + FRAME_TASKS]) for i in range(0, len(tasks), FRAME_TASKS)]


def _tree_frames() -> List[bytes]:
    """A binary reduction tree over TREE_LEAVES leaves in one frame, as the client sends a graph: leaves first, the root
    last; a level of odd length moves its last node up as it is (bench/throughput/graph_tree.py builds the same
    tree)."""
    number = MAP_TASKS
    level = []
    for _ in range(TREE_LEAVES):
        level.append(_task(number, report_result=False))
        number += 1
    tasks = list(level)
    while len(level) > 1:
        above = []
        for left, right in zip(level[::2], level[1::2]):
            above.append(_task(number, (left.task_id, right.task_id), report_result=len(level) == 2))
            number += 1
        tasks += above
        if len(level) % 2:
            above.append(level[-1])
        level = above
    return [encode_many(tasks)]
