"""The agent <-> processor channel, driven by hand: a real processor from a real fork server, no agent."""

from __future__ import annotations

import itertools
import os
import socket
import sys
import threading
import time
from typing import Iterator, List

import cloudpickle
import pytest

from scaler.worker.channel import MessageReader, send_message
from scaler.worker.processor import TaskRunner, _Reporter
from scaler.worker.processor_messages import (
    ProcessorArgument,
    ProcessorOrders,
    ProcessorReport,
    ProcessorResult,
    ProcessorTask,
)
from scaler.worker.zygote import ProcessorZygote

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FUNCTION = b"f" * 16
OBJECT = b"x" * 16
PARENT_FUNCTION = b"p" * 16
_SEQ = itertools.count(1)  # tasks are created in the order they are handed, as the agent numbers them


def add_after(seconds, left, right):
    time.sleep(seconds)
    return left + right


def add_once_exists(path, left, right):
    """A long task, as long as the test wants: it ends once `path` exists (bounded, in case it never does)."""
    import os

    deadline = time.monotonic() + 30
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.005)
    return left + right


def wait_on_a_pending_future_until(path: str) -> str:
    """Blocks like a parent on its child (so it parks its processor) until `path` exists; bounded in case it never
    does."""
    import concurrent.futures
    import os

    from scaler.client.future import ScalerFuture

    never_settled = ScalerFuture(b"n" * 16)
    deadline = time.monotonic() + 30
    while not os.path.exists(path) and time.monotonic() < deadline:
        try:
            never_settled.result(timeout=0.01)
        except concurrent.futures.TimeoutError:
            pass
    return "parent done"


class Processor:
    def __init__(self, zygote: ProcessorZygote) -> None:
        forked = zygote.fork_processor(10)
        self.pid, self.sock, self.progress = forked.pid, forked.sock, forked.progress
        for fd in forked.output_fds:  # no task here streams its output
            os.close(fd)
        self.reader = MessageReader(self.sock)
        self.reports: List[ProcessorReport] = []  # read, not yet matched by wait_report
        self.history: List[ProcessorReport] = []  # every report read

    def order(self, tasks: List[ProcessorTask] = (), drops: List[bytes] = (), end_of_parking: bool = False) -> None:
        send_message(self.sock, ProcessorOrders(list(tasks), list(drops), end_of_parking))
        self.progress.post_orders()  # as the agent does (processor_link.py): it reads orders only when told

    def wait_report(self, condition, timeout: float = 10) -> ProcessorReport:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            read = self.reader.read_available()
            self.reports.extend(read)
            self.history.extend(read)
            for report in self.reports:
                if condition(report):
                    self.reports.remove(report)
                    return report
            time.sleep(0.005)
        raise AssertionError(f"no such report within {timeout}s; got {self.reports}")

    def report_with(self, task_id: bytes) -> ProcessorReport:
        return self.wait_report(lambda report: any(result.task_id == task_id for result in report.results))

    def result_of(self, task_id: bytes):
        report = self.report_with(task_id)
        return next(result for result in report.results if result.task_id == task_id)

    def wait_started(self, handed: ProcessorTask, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while self.progress.read()[0] < handed.seq:
            assert time.monotonic() < deadline, f"task {handed.task_id!r} never started"
            time.sleep(0.002)
        assert self.progress.read()[0] == handed.seq


@pytest.fixture
def processor() -> Iterator[Processor]:
    zygote = ProcessorZygote.start()
    yield Processor(zygote)
    zygote.stop(timeout_seconds=5)


def task(
    task_id: bytes, seconds: float, *, send_function: bool = False, send_object: bool = False, forget: List[bytes] = ()
) -> ProcessorTask:
    return ProcessorTask(
        seq=next(_SEQ),
        task_id=task_id,
        serializer_id=b"",
        serializer_payload=None,
        function_id=FUNCTION,
        function_payload=cloudpickle.dumps(add_after) if send_function else None,
        arguments=[
            ProcessorArgument("", b"", cloudpickle.dumps(seconds), False),
            ProcessorArgument("", OBJECT, cloudpickle.dumps(40) if send_object else None, True),
            ProcessorArgument("right", b"", cloudpickle.dumps(2), False),
        ],
        profiling=False,
        forget_object_ids=list(forget),
    )


def parent_task(task_id: bytes, marker: str) -> ProcessorTask:
    return ProcessorTask(
        seq=next(_SEQ),
        task_id=task_id,
        serializer_id=b"",
        serializer_payload=None,
        function_id=PARENT_FUNCTION,
        function_payload=cloudpickle.dumps(wait_on_a_pending_future_until),
        arguments=[ProcessorArgument("", b"", cloudpickle.dumps(marker), False)],
        profiling=False,
        forget_object_ids=[],
    )


def test_short_tasks_results_come_back_in_batches_and_objects_are_kept(processor):
    names = [b"t%d" % index for index in range(40)]
    handed = [task(names[0], 0, send_function=True, send_object=True), *(task(name, 0) for name in names[1:])]
    processor.order(handed)
    reports = []
    while sum(len(report.results) for report in reports) < len(names):
        reports.append(processor.wait_report(lambda report: True))
    results = [result for report in reports for result in report.results]
    assert [result.task_id for result in results] == names
    assert all(result.succeeded and cloudpickle.loads(result.payload) == 42 for result in results)
    assert len(reports) < len(names), "results travel together, not one report per task"
    assert processor.progress.read() == (handed[-1].seq, handed[-1].seq)  # the object and function were sent once


def test_objects_sent_with_a_task_that_fails_on_an_earlier_argument_are_kept():
    """The agent counts every object it sent with a task as held by the processor, even if the task failed before
    reaching it: a later task gets it without its bytes."""
    runner = TaskRunner()
    broken = ProcessorArgument("", b"b" * 16, b"not a pickle", True)
    first = task(b"first", 0, send_function=True, send_object=True)
    first = first._replace(arguments=[first.arguments[0], broken, *first.arguments[1:]])
    assert not runner.run(first).succeeded  # the broken object fails it before OBJECT is read
    result = runner.run(task(b"second", 0))  # OBJECT and the function without their bytes: held since the first
    assert result.succeeded and cloudpickle.loads(result.payload) == 42


def test_results_wait_for_half_of_the_batch_or_its_end():
    left, right = socket.socketpair()
    try:
        reporter = _Reporter(left, delay_seconds=3600)  # only the half-way rule and the end of the batch here
        reader = MessageReader(right)
        result = ProcessorResult(b"r", True, b"", "", 1, 0, 0)
        for _ in range(19):
            reporter.add(result)
        reporter.before_task(pending=21)  # not half-way yet
        reporter.add(result)
        reporter.before_task(pending=20)  # half-way: the agent hands more while the rest runs
        (report,) = reader.wait()
        assert len(report.results) == 20
        for _ in range(3):
            reporter.add(result)
        reporter.before_task(pending=1)  # a handful waits for the end of the batch
        reporter.flush()
        (report,) = reader.wait()
        assert len(report.results) == 3
    finally:
        left.close()
        right.close()


def test_results_held_before_a_task_leave_after_the_delay_without_the_main_thread():
    left, right = socket.socketpair()
    try:
        reporter = _Reporter(left, delay_seconds=0.005)
        reader = MessageReader(right)
        reporter.add(ProcessorResult(b"a", True, b"", "", 1, 0, 0))
        reporter.before_task(pending=10)  # held: the next task starts, and may run for ever
        (report,) = reader.wait()  # sent by the flusher thread
        assert [result.task_id for result in report.results] == [b"a"]
        reporter.add(ProcessorResult(b"b", True, b"", "", 1, 0, 0))
        reporter.before_task(pending=10)  # a new batch arms it again
        (report,) = reader.wait()
        assert [result.task_id for result in report.results] == [b"b"]
    finally:
        left.close()
        right.close()


def test_the_flusher_parks_once_nothing_waited_for_a_while_and_wakes_when_armed() -> None:
    """While results keep coming the flusher sleeps a delay at a time (no event per report); once nothing waited for
    _IDLE_WAKES_BEFORE_PARKING delays it parks, so an idle processor does not keep waking, and arming wakes it."""
    left, right = socket.socketpair()
    try:
        reporter = _Reporter(left, delay_seconds=0.001)
        reader = MessageReader(right)
        reporter.add(ProcessorResult(b"a", True, b"", "", 1, 0, 0))
        reporter.before_task(pending=10)  # starts the flusher
        (report,) = reader.wait()
        assert [result.task_id for result in report.results] == [b"a"]
        deadline = time.monotonic() + 30
        while not reporter._flusher_parked:
            assert time.monotonic() < deadline, "the flusher never parked"
            time.sleep(0.001)
        reporter.add(ProcessorResult(b"b", True, b"", "", 1, 0, 0))
        reporter.before_task(pending=10)  # wakes the parked flusher
        (report,) = reader.wait()
        assert [result.task_id for result in report.results] == [b"b"]
    finally:
        left.close()
        right.close()


def test_a_result_is_added_while_the_flusher_waits_to_write_a_large_report() -> None:
    """The flusher's write waits for the agent to read; the task's thread must not wait for that write to add its
    next result (it held the reporter's lock across the write, and the agent, writing orders, never read)."""
    left, right = socket.socketpair()
    try:
        reporter = _Reporter(left, delay_seconds=0.001)
        reporter.add(ProcessorResult(b"big", True, b"x" * (16 * 1024 * 1024), "", 1, 0, 0))
        reporter.before_task(pending=10)  # the flusher sends it soon: far more than the socket holds
        deadline = time.monotonic() + 10
        while reporter._results:  # taken: its write has begun, and waits for us
            assert time.monotonic() < deadline, "the flusher never took the result"
            time.sleep(0.001)
        adder = threading.Thread(target=reporter.add, args=(ProcessorResult(b"next", True, b"", "", 1, 0, 0),))
        adder.start()
        adder.join(5)
        assert not adder.is_alive(), "adding a result waited for the flusher's write"
        reader = MessageReader(right)
        reports = []
        while not reports:
            assert time.monotonic() < deadline
            reports = reader.wait()
        assert [result.task_id for result in reports[0].results] == [b"big"]
        reporter.flush()
        assert [result.task_id for report in reader.wait() for result in report.results] == [b"next"]
    finally:
        left.close()
        right.close()


def test_a_result_leaves_while_the_long_task_after_it_runs(processor, tmp_path):
    """Handed together (the agent expected both to be short), a finished task's result must not wait for the end of
    the next one: it leaves within RESULT_DELAY_SECONDS or so, whatever that task does."""
    processor.order([task(b"warm", 0, send_function=True, send_object=True)])
    assert processor.result_of(b"warm").succeeded
    marker = tmp_path / "long-task-may-end"
    short = task(b"short", 0)
    long = ProcessorTask(
        seq=next(_SEQ),
        task_id=b"long",
        serializer_id=b"",
        serializer_payload=None,
        function_id=b"L" * 16,
        function_payload=cloudpickle.dumps(add_once_exists),
        arguments=[ProcessorArgument("", b"", cloudpickle.dumps(str(marker)), False)]
        + [ProcessorArgument("", b"", cloudpickle.dumps(value), False) for value in (40, 2)],
        profiling=False,
        forget_object_ids=[],
    )
    processor.order([short, long])
    try:
        processor.wait_started(long)
        result = processor.result_of(b"short")  # fails (after its timeout) when the result waits for the long task
        assert result.succeeded
        assert processor.progress.read()[1] < long.seq, "the long task is still running"
    finally:
        marker.touch()
    assert processor.result_of(b"long").succeeded


def test_a_long_task_started_is_seen_in_the_progress_before_any_report(processor):
    slow = task(b"slow", 0.3, send_function=True, send_object=True)
    processor.order([slow])
    processor.wait_started(slow)
    assert processor.progress.read() == (slow.seq, 0) and not processor.reader.read_available()
    assert processor.result_of(b"slow").succeeded
    assert processor.progress.read() == (slow.seq, slow.seq)


def test_a_dropped_tasks_evictions_wait_for_the_tasks_handed_before_it(processor):
    processor.order([task(b"warm", 0, send_function=True, send_object=True)])
    assert processor.result_of(b"warm").succeeded
    busy = task(b"busy", 0.3)
    processor.order([busy, task(b"needs-object", 0)])
    processor.wait_started(busy)
    # Handed after "needs-object", this one carries the eviction of OBJECT; it is dropped before its turn.
    processor.order([task(b"evicts", 0, forget=[OBJECT])], drops=[b"evicts"])
    report = processor.report_with(b"needs-object")
    result = next(result for result in report.results if result.task_id == b"needs-object")
    assert result.succeeded, result.error_text
    assert report.dropped == [b"evicts"]


def test_drop_of_a_started_task_is_ignored(processor):
    slow = task(b"slow", 0.2, send_function=True, send_object=True)
    processor.order([slow])
    processor.wait_started(slow)
    processor.order(drops=[b"slow"])
    assert processor.result_of(b"slow").succeeded
    processor.order([task(b"next", 0)])
    assert processor.result_of(b"next").succeeded


def park(processor: Processor, marker: str) -> None:
    """Start a parent that waits on a pending future and wait for the processor to say it parked."""
    processor.order([parent_task(b"parent", marker)])
    processor.wait_report(lambda report: report.blocked == b"parent")


def test_tasks_skipped_at_the_end_of_a_parking_are_never_reported_dropped(processor, tmp_path):
    """The agent took back, at the parking, what it had handed ahead; once the parked task is done it may hand one of
    those tasks to this same processor again (as a spare made active). A late "dropped" for the skipped copy would
    then make the agent forget the new one, whose result it would discard: a task lost, and its parent waiting
    forever (the intermittent hang of fibonacci(15) on two workers)."""
    marker = tmp_path / "children-handed"
    park(processor, str(marker))
    # Handed before the agent read the parking report, then taken back by the agent's end-of-parking order.
    processor.order([task(b"child", 0, send_function=True, send_object=True)])
    processor.order(end_of_parking=True)
    marker.touch()
    assert processor.result_of(b"parent").succeeded
    again = task(b"child", 0)  # handed again; its function and object were counted as held already
    processor.order([again])
    report = processor.report_with(b"child")
    assert b"child" not in report.dropped
    child = next(result for result in report.results if result.task_id == b"child")
    assert child.succeeded and cloudpickle.loads(child.payload) == 42
    assert not [report.dropped for report in processor.history if report.dropped], "no drop was ever ordered"


def test_a_drop_ordered_right_after_the_end_of_a_parking_is_honored(processor, tmp_path):
    """Orders read in the same batch as the end-of-parking order are new ones: their tasks run, their drops apply."""
    marker = tmp_path / "orders-sent"
    park(processor, str(marker))
    processor.order(end_of_parking=True)
    processor.order([task(b"canceled", 0, send_function=True, send_object=True), task(b"kept", 0)])
    processor.order(drops=[b"canceled"])
    marker.touch()  # all of them are in the socket before the parked task ends and reads on
    assert processor.result_of(b"parent").succeeded
    assert processor.result_of(b"kept").succeeded
    assert [report.dropped for report in processor.history if report.dropped] == [[b"canceled"]]
    assert not any(result.task_id == b"canceled" for report in processor.history for result in report.results)
