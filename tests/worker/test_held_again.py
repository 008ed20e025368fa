"""A result held again under the id of a copy the scheduler deleted but a task still pins (the scheduler made it
again here): the new copy stays held, and is charged once, in the worker's core with simulated processors."""

from __future__ import annotations

from scaler.io.shared_bytes import SharedBytes
from scaler.protocol import Argument, ArgumentKind, ObjectDelete, Task, TaskCancel, TaskResult
from tests.worker.core_harness import FUNCTION
from tests.worker.test_core import connected, teach_short

KB = 1000


def test_a_result_made_again_while_its_deleted_copy_is_pinned_stays_held_and_charged_once() -> None:
    harness = connected(data_address="tcp://127.0.0.1:5555", memory_limit="100MB")
    harness.core.memory_enforcement = "cgroup"
    teach_short(harness)  # tasks are handed ahead from now on
    core = harness.core
    made = harness.task()
    harness.send(made)
    processor = harness.active
    harness.run(processor.number, payload=SharedBytes.create(b"x" * (300 * KB)))
    assert core.cache.held_payload(made.task_id) is not None

    # a reader handed ahead behind another task, canceled: it pins the result until its processor lets it go
    ahead = harness.task()
    reader = Task(
        task_id=b"r" * 16, function_id=FUNCTION, args=[Argument(kind=ArgumentKind.task_ref, data=made.task_id)]
    )
    harness.send(ahead, reader)
    processor.read_orders()
    assert processor.start_next().task_id == ahead.task_id
    harness.send(TaskCancel(task_ids=[reader.task_id]))
    harness.send(ObjectDelete(object_ids=[made.task_id]))  # freed by the scheduler, still pinned here
    again = Task(task_id=made.task_id, function_id=FUNCTION, args=made.args)  # lost elsewhere: made again here
    harness.send(again)
    processor.finish()  # `ahead`
    processor.read_orders()
    assert processor.start_next().task_id == made.task_id  # the canceled reader was dropped
    processor.finish(payload=SharedBytes.create(b"y" * (300 * KB)))
    harness.report(processor.number)  # the result, then the reader's drop, which unpins the old copy

    (told,) = [message for message in harness.sent if type(message) is TaskResult][-1:]
    assert told.task_id == made.task_id and told.held_bytes == 300 * KB, "the scheduler is told it is held again"
    held = core.cache.held_payload(made.task_id)
    assert held is not None and bytes(held.view()[:1]) == b"y", "the new copy is held"
    assert core._allowances[processor.number] == 300 * KB, "charged once, for the copy held"
