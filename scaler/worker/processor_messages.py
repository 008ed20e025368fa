"""Internal: the messages between a worker agent and its processors, as types: what channel.py carries and what a
preloading processor's first report means (preload.py), the chunks of a task's output that capture.py reads, and how
long a finished task's result may wait for the next. No sockets here: the worker's sans-IO core (core.py) reads these
without loading the channel."""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

from scaler.io.shared_bytes import SharedBytes

# A finished task's result waits for the results of the tasks after it, so short tasks batch, but not much longer than
# this: checked between tasks, and by a thread of the processor once a task has run this long (processor.py), so that
# a task that runs long never holds back the results of the tasks before it.
RESULT_DELAY_SECONDS = 0.005


class ProcessorArgument(NamedTuple):
    name: str  # keyword, or "" for a positional argument
    object_id: bytes  # b"" for an inline argument
    payload: Any  # bytes or SharedBytes; None when the processor already holds object_id
    cacheable: bool  # objects and functions are kept by the processor; graph results are used once


class ProcessorTask(NamedTuple):
    seq: int  # 1, 2, 3...: the order it was handed in; the processor writes it to the shared progress as it runs
    task_id: bytes
    serializer_id: bytes  # b"" means cloudpickle
    serializer_payload: Optional[bytes]
    function_id: bytes
    function_payload: Optional[bytes]
    arguments: List[ProcessorArgument]
    profiling: bool
    forget_object_ids: List[bytes]  # objects the agent evicted: the processor drops its copies
    stream_output: bool = False  # capture what it writes to fds 1 and 2 for its client (capture.py)


class ProcessorOrders(NamedTuple):
    tasks: List[ProcessorTask]  # plain tuples of that shape as sent and as read: cheaper to encode and to unpack
    drops: List[bytes]  # ids of tasks sent earlier: drop each one that has not started
    # The agent's answer to a parking: every task sent before this order was taken back, so a parked processor skips
    # them all, up to this order, once its blocked task is done, and never reports them (the agent may hand them to it
    # again later); tasks and drops sent after this order are new and handled as usual.
    end_of_parking: bool = False
    # objects to drop now; sent only to a processor that was handed no task it has not answered (see core.py)
    forget: Tuple[bytes, ...] = ()
    # The shared payloads of the tasks' arguments, in order: in the tasks, each is its size (an int) in place of its
    # bytes, its descriptor sent beside (set by the core as it builds the tasks: no scan per task to find them).
    shared: Sequence[SharedBytes] = ()
    # Files of freed results this processor wrote, by object id, to write its next results into (spares.py); in
    # orders of their own, never with tasks
    spares: Sequence[Tuple[bytes, SharedBytes]] = ()


class ProcessorResult(NamedTuple):
    task_id: bytes
    succeeded: bool
    payload: Any  # serialized return value (bytes, or SharedBytes when large), or the cloudpickled exception
    error_text: str
    duration_us: int  # always measured: the agent learns from it how far ahead it may feed the processor
    cpu_time_us: int  # profiling only
    peak_memory: int  # profiling only


class ProcessorReport(NamedTuple):
    results: List[ProcessorResult]  # of the tasks finished since the last report, in the order they ran
    dropped: List[bytes]  # tasks dropped on the agent's drop orders, never started; nothing else
    blocked: Optional[bytes] = None  # the running task waits on a future: this processor runs nothing else for now
    streamed: bool = False  # a task it answers had streamOutput: read the output pipes first (capture.py)
    shared: Sequence[SharedBytes] = ()  # the results' shared payloads, each an int (its size) in its result, in order


class OutputChunk(NamedTuple):
    seq: int  # the processor's number for the task (ProcessorTask.seq)
    stream: int  # STDOUT or STDERR (capture.py)
    data: bytes  # what it wrote, in order; may end mid-line
    dropped: int  # bytes of its output over the limit, dropped since its previous chunk of this kind


def preload_failure(report: ProcessorReport) -> Optional[str]:
    """The traceback a preloading processor's first report carries, or None if its preload returned."""
    if report.results and not report.results[0].task_id:
        return report.results[0].error_text or "the preload failed"
    return None
