"""Which freed results' files the worker's core gives back to the processor that wrote them (scaler/worker/spares.py):
only those no other process was handed, that the agent never mapped or served; with simulated processors, every
invariant checked after each step."""

from __future__ import annotations

from scaler.io.shared_bytes import SharedBytes
from scaler.protocol import Argument, ArgumentKind, ObjectDelete, Task
from tests.worker.core_harness import FUNCTION, Harness
from tests.worker.test_core import connected, teach_short

KB = 1000
MB = 1000 * KB


def held_result(harness: Harness, size: int = 2 * MB) -> Task:
    """A task run on the active processor, whose result of `size` bytes the worker holds (a shared memory file)."""
    made = harness.task()
    harness.send(made)
    harness.run(harness.active.number, payload=SharedBytes.create(b"x" * size))
    assert type(harness.core.cache.held_payload(made.task_id)) is SharedBytes
    return made


def reader_of(made: Task) -> Task:
    return Task(task_id=b"r" * 16, function_id=FUNCTION, args=[Argument(kind=ArgumentKind.task_ref, data=made.task_id)])


def given_back(harness: Harness) -> dict:
    """Processor number -> the object ids whose files it was given back."""
    for processor in harness.processors.values():
        processor.read_orders()
    return {number: [object_id for object_id, _ in sim.spares] for number, sim in harness.processors.items()}


def test_a_freed_result_its_writer_alone_read_goes_back_to_its_writer() -> None:
    harness = connected(data_address="tcp://127.0.0.1:5555")
    teach_short(harness)
    made = held_result(harness)
    payload = harness.core.cache.held_payload(made.task_id)
    harness.send(reader_of(made))
    harness.run(harness.active.number)
    harness.send(ObjectDelete(object_ids=[made.task_id]))
    assert given_back(harness) == {harness.active.number: [made.task_id]}
    assert harness.active.spares[0][1] is payload, "its very file"


def test_a_small_freed_result_is_not_given_back() -> None:
    """Writing over a file of less than 1 MiB saves less than passing it back costs."""
    harness = connected(data_address="tcp://127.0.0.1:5555")
    teach_short(harness)
    made = held_result(harness, 300 * KB)
    harness.send(ObjectDelete(object_ids=[made.task_id]))
    assert not any(given_back(harness).values())


def test_a_freed_result_read_by_another_processor_is_not_given_back() -> None:
    harness = connected(data_address="tcp://127.0.0.1:5555")
    teach_short(harness)
    made = held_result(harness)
    writer = harness.active
    blocker = harness.task()
    harness.send(blocker)
    writer.read_orders()
    writer.start_next()
    harness.block(writer.number)  # its task waits on a future: another processor runs the next tasks
    assert harness.active is not writer
    harness.send(reader_of(made))
    harness.run(harness.active.number)
    harness.send(ObjectDelete(object_ids=[made.task_id]))
    assert not any(given_back(harness).values()), "the other processor may still map it"


def test_a_freed_result_the_agent_served_or_mapped_is_not_given_back() -> None:
    harness = connected(data_address="tcp://127.0.0.1:5555")
    teach_short(harness)
    made = held_result(harness)
    payload = harness.core.cache.held_payload(made.task_id)
    payload.sent_view()  # as the data server sends it to a peer: what ZeroMQ has not sent yet still maps it
    harness.send(ObjectDelete(object_ids=[made.task_id]))
    assert not any(given_back(harness).values())


def test_no_file_goes_back_under_memory_cgroups() -> None:
    """The core allows a processor's cgroup the results it wrote while they are held; a file given back would keep
    pages charged there that it no longer allows."""
    harness = connected(data_address="tcp://127.0.0.1:5555", memory_limit="100MB")
    harness.core.memory_enforcement = "cgroup"
    teach_short(harness)
    made = held_result(harness)
    harness.send(ObjectDelete(object_ids=[made.task_id]))
    assert not any(given_back(harness).values())
