"""The agent <-> processor channel, driven by hand: a real processor from a real fork server, no agent."""

from __future__ import annotations

import sys
import time
from typing import Iterator, List

import cloudpickle
import pytest

from scaler.worker.channel import (
    MessageReader,
    ProcessorArgument,
    ProcessorOrders,
    ProcessorReport,
    ProcessorTask,
    send_message,
)
from scaler.worker.zygote import ProcessorZygote

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FUNCTION = b"f" * 16
OBJECT = b"x" * 16


def add_after(seconds, left, right):
    time.sleep(seconds)
    return left + right


class Processor:
    def __init__(self, zygote: ProcessorZygote) -> None:
        self.pid, self.sock = zygote.fork_processor(10)
        self.reader = MessageReader(self.sock)
        self.reports: List[ProcessorReport] = []

    def order(self, tasks: List[ProcessorTask] = (), drops: List[bytes] = ()) -> None:
        send_message(self.sock, ProcessorOrders(list(tasks), list(drops)))

    def wait_report(self, condition, timeout: float = 10) -> ProcessorReport:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.reports.extend(self.reader.read_available())
            for report in self.reports:
                if condition(report):
                    self.reports.remove(report)
                    return report
            time.sleep(0.005)
        raise AssertionError(f"no such report within {timeout}s; got {self.reports}")

    def result_of(self, task_id: bytes):
        return self.wait_report(lambda report: report.result is not None and report.result.task_id == task_id).result


@pytest.fixture
def processor() -> Iterator[Processor]:
    zygote = ProcessorZygote.start()
    yield Processor(zygote)
    zygote.stop(timeout_seconds=5)


def task(
    task_id: bytes, seconds: float, *, send_function: bool = False, send_object: bool = False, forget: List[bytes] = ()
) -> ProcessorTask:
    return ProcessorTask(
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


def test_reports_start_and_result_and_keeps_objects(processor):
    processor.order([task(b"a", 0, send_function=True, send_object=True), task(b"b", 0)])
    assert processor.wait_report(lambda report: report.started == b"a")
    first = processor.result_of(b"a")
    assert first.succeeded and cloudpickle.loads(first.payload) == 42
    second = processor.result_of(b"b")  # the object and the function were sent once, with the first task
    assert second.succeeded and cloudpickle.loads(second.payload) == 42


def test_a_dropped_tasks_evictions_wait_for_the_tasks_handed_before_it(processor):
    processor.order([task(b"warm", 0, send_function=True, send_object=True)])
    assert processor.result_of(b"warm").succeeded
    processor.order([task(b"busy", 0.3), task(b"needs-object", 0)])
    processor.wait_report(lambda report: report.started == b"busy")
    # Handed after "needs-object", this one carries the eviction of OBJECT; it is dropped before its turn.
    processor.order([task(b"evicts", 0, forget=[OBJECT])], drops=[b"evicts"])
    report = processor.wait_report(lambda r: r.result is not None and r.result.task_id == b"needs-object")
    assert report.result.succeeded, report.result.error_text
    assert report.dropped == [b"evicts"] and report.started is None


def test_drop_of_a_started_task_is_ignored(processor):
    processor.order([task(b"slow", 0.2, send_function=True, send_object=True)])
    processor.wait_report(lambda report: report.started == b"slow")
    processor.order(drops=[b"slow"])
    assert processor.result_of(b"slow").succeeded
    processor.order([task(b"next", 0)])
    assert processor.result_of(b"next").succeeded
