"""Internal: what a client sends a scheduler that lost its session (it restarted), so that nothing unanswered is lost.

The client's core (core.py) keeps, for every unanswered task, the message it was sent as (the Task object, or the bytes
already built by a template or for a frame of its own; a reference, not a copy), and the ledger keeps the ObjectPuts of
every object the scheduler should hold. A graph is kept as a GraphRecord, shared by its keys: its Task messages in the
order they were sent (dependencies first), and the results of keys other nodes of the graph depend on. On a new session
`resubmission` rebuilds, under the same task ids: every object, every unanswered task, and of each graph the nodes its
unanswered keys still need, in one frame, with the results received since sent back as result objects (the scheduler
links a node to a result object as to a finished dependency) instead of being computed again.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Set

from scaler.client.future import ScalerFuture
from scaler.client.objects import Outgoing, object_puts
from scaler.config import DEFAULT_INLINE_LIMIT_BYTES
from scaler.io.shared_bytes import SharedBytes
from scaler.protocol import Encoded, ObjectKind, TaskCancel, encode_many

_KIND_RESULT = int(ObjectKind.result)


class GraphRecord:
    """One submitted graph, kept while one of its keys is unanswered (the futures of its keys reference it)."""

    __slots__ = ("tasks", "futures", "unreported", "kept_results", "results")

    def __init__(self, tasks: List[Any], futures: Dict[bytes, ScalerFuture], unreported: List[bytes]) -> None:
        self.tasks = tasks  # Task messages, dependencies first, exactly as sent
        self.futures = futures  # task id -> future, for the requested keys
        self.unreported = unreported  # the task ids of the nodes not requested: cancelled with the graph
        # keys that other nodes depend on: their results are kept until the graph is answered, to send back
        self.kept_results: Set[bytes] = {
            dependency for task in tasks for dependency in task.dependencies if dependency in futures
        }
        self.results: Dict[bytes, Any] = {}  # payloads of the kept keys that succeeded

    def answered(self, task_id: bytes, payload: Any) -> None:
        """A key's result arrived (its serialized value: bytes-like, or the SharedBytes of a holder on this host). A
        writable buffer is copied: the user's arrays may be views of it, and modified in place."""
        if task_id in self.kept_results:
            if type(payload) is not bytes and type(payload) is not SharedBytes and not memoryview(payload).readonly:
                payload = bytes(payload)
            self.results[task_id] = payload

    def resubmission(self, fetching: Set[bytes]) -> List[Outgoing]:
        """The nodes the unanswered keys still need, as one frame behind the result objects they use; keys in
        `fetching` (their results are held, being fetched) are not made again."""
        by_id = {task.task_id: task for task in self.tasks}
        needed: Set[bytes] = set()
        results: List[Outgoing] = []
        sent_results: Set[bytes] = set()
        stack = [task_id for task_id, future in self.futures.items() if not future.done() and task_id not in fetching]
        while stack:
            task_id = stack.pop()
            if task_id in needed:
                continue
            needed.add(task_id)
            for dependency in by_id[task_id].dependencies:
                payload = self.results.get(dependency)
                if payload is None:
                    stack.append(dependency)  # not finished, failed, cancelled, or a node never reported: again
                elif dependency not in sent_results:
                    sent_results.add(dependency)
                    results.extend(object_puts(dependency, _KIND_RESULT, "", payload))
        if not needed:
            return []
        # A key the user cancelled stays cancelled, and so do the nodes that need it, as the scheduler decides.
        cancelled = [task_id for task_id in needed if task_id in self.futures and self.futures[task_id].cancelled()]
        out = results + [encode_many([task for task in self.tasks if task.task_id in needed])]
        if cancelled:
            out.append(TaskCancel(task_ids=cancelled))
        return out


def resubmission(
    ledger_puts: List[Outgoing],
    unanswered: Iterable[bytes],
    messages: Dict[bytes, Any],
    graphs: Dict[bytes, GraphRecord],
    fetching: Set[bytes],
) -> List[Outgoing]:
    """Objects first, then every unanswered task in submission order (`messages`: as sent), then the graphs' frames
    (`graphs`: the record of each graph key; keys in `fetching` are not made again)."""
    out = list(ledger_puts)
    records: Dict[int, GraphRecord] = {}
    for task_id in unanswered:
        graph = graphs.get(task_id)
        if graph is not None:
            records.setdefault(id(graph), graph)
            continue
        message = messages.get(task_id)
        if message is not None:
            if type(message) is bytes and len(message) <= DEFAULT_INLINE_LIMIT_BYTES:
                message = Encoded(message)  # a call encoded by template: batched with the others, as when first sent
            out.append(message)
    for graph in records.values():
        out.extend(graph.resubmission(fetching))
    return out
