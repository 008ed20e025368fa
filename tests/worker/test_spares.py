"""A task process's spare files (scaler/worker/spares.py), with real memfds, mappings and a real TaskRunner: a file
given back is written over only once nothing in the process maps its old result, and then holds the new one whole."""

from __future__ import annotations

import gc
import os

import cloudpickle
import pytest

from scaler.io.shared_bytes import SharedBytes
from scaler.serializer import default_loads, dump_to_shared
from scaler.worker.processor import TaskRunner
from scaler.worker.processor_messages import ProcessorTask
from scaler.worker.spares import SPARE_COUNT, SpareFiles

OLD = b"o" * 16  # the freed result's object id
KB = 1024

KEPT: list = []  # what a task keeps of its input beyond its run, as a cache in a user's module would


def keep(block):
    KEPT.append(block)
    return float(block.sum())


def total(block):
    return float(block.sum())


def full(value):
    import numpy

    return numpy.full((512, 512), value)


def inode(payload: SharedBytes) -> int:
    return os.fstat(payload.fd).st_ino


def given_back(payload: SharedBytes) -> SharedBytes:
    """The holder's file, as the agent gives it back (a new descriptor, as SCM_RIGHTS passes it)."""
    return SharedBytes(os.dup(payload.fd), payload.size)


def task(task_id: bytes, function, arguments: list) -> ProcessorTask:
    return ProcessorTask(
        seq=1,
        task_id=task_id,
        serializer_id=b"",
        serializer_payload=None,
        function_id=function.__name__.encode()[:16].ljust(16, b"-"),
        function_payload=cloudpickle.dumps(function),
        arguments=arguments,
        profiling=False,
        forget_object_ids=[],
        stream_output=False,
    )


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_a_spare_is_written_over_only_once_no_array_of_its_old_result_lives() -> None:
    numpy = pytest.importorskip("numpy")
    runner = TaskRunner()
    old = dump_to_shared(numpy.full((512, 512), 3.0))  # 2 MiB, read in place by default_loads
    read = runner.run(task(b"k" * 16, keep, [("", OLD, given_back(old), False)]))
    assert read.succeeded and len(KEPT) == 1
    runner.forget([OLD])  # the agent freed it: the runner's own mapping goes
    runner.spares.offer([(OLD, given_back(old))])

    made = runner.run(task(b"a" * 16, full, [("", b"", cloudpickle.dumps(7.0), False)]))
    assert made.succeeded and type(made.payload) is SharedBytes
    assert inode(made.payload) != inode(old), "an array a task kept still maps the old result: a new file"
    assert float(KEPT[0].sum()) == 3.0 * 512 * 512, "what the task kept is unchanged"

    KEPT.clear()
    gc.collect()
    again = runner.run(task(b"b" * 16, full, [("", b"", cloudpickle.dumps(5.0), False)]))
    assert again.succeeded and type(again.payload) is SharedBytes
    assert inode(again.payload) == inode(old), "nothing maps it any more: written over"
    assert (default_loads(again.payload.private_view()) == 5.0).all()
    assert runner.spares.take() is None


def test_a_spare_larger_than_the_new_result_holds_exactly_the_new_result() -> None:
    numpy = pytest.importorskip("numpy")
    spares = SpareFiles()
    old = SharedBytes.create(b"x" * (600 * KB))
    spares.offer([(OLD, given_back(old))])
    value = numpy.arange(10_000, dtype=numpy.int64)
    written = dump_to_shared(value, spares.take())
    assert inode(written) == inode(old) and os.fstat(written.fd).st_size == written.size < 600 * KB
    assert (default_loads(written.private_view()) == value).all()

    spares.offer([(b"n" * 16, written)])
    copied = SharedBytes.create(b"y" * (100 * KB), spares.take())  # a custom serializer's bytes
    assert inode(copied) == inode(old) and copied.size == os.fstat(copied.fd).st_size == 100 * KB
    assert copied.to_bytes() == b"y" * (100 * KB)


def test_spares_past_the_bound_are_closed_and_the_rest_said() -> None:
    said = []
    spares = SpareFiles(said.append)
    files = [SharedBytes.create(bytes([index]) * KB) for index in range(SPARE_COUNT + 2)]
    kept = [file.fd for file in files[:SPARE_COUNT]]
    closed = [file.fd for file in files[SPARE_COUNT:]]
    spares.offer([(bytes([index]) * 16, file) for index, file in enumerate(files)])
    assert all(file.fd == -1 for file in files), "their descriptors are the spares' now"
    del files
    gc.collect()
    assert all(is_open(fd) for fd in kept) and not any(is_open(fd) for fd in closed)
    assert said[-1] == spares.ready_bytes() == SPARE_COUNT * KB
    taken = spares.take()
    assert taken is not None and said[-1] == (SPARE_COUNT - 1) * KB


def test_a_spare_waits_for_the_mapping_kept_for_the_next_reader_until_its_result_is_forgotten() -> None:
    numpy = pytest.importorskip("numpy")
    runner = TaskRunner()
    old = dump_to_shared(numpy.ones((512, 512)))
    read = runner.run(task(b"s" * 16, total, [("", OLD, given_back(old), False)]))
    assert read.succeeded
    runner.spares.offer([(OLD, given_back(old))])  # before the eviction reached the processor
    assert runner.spares.take() is None, "the runner keeps a mapping of it for the next task reading it"
    runner.forget([OLD])
    spare = runner.spares.take()
    assert spare is not None and inode(spare) == inode(old)


def test_an_idle_process_closes_its_spares() -> None:
    said = []
    spares = SpareFiles(said.append)
    ready, waiting = SharedBytes.create(b"r" * KB), SharedBytes.create(b"w" * KB)
    mapping = waiting.private_view()
    spares.mapped(b"w" * 16, mapping)  # a task still maps it: it waits
    fds = [ready.fd, waiting.fd]
    spares.offer([(b"r" * 16, ready), (b"w" * 16, waiting)])
    del ready, waiting
    spares.release()
    gc.collect()
    assert not any(is_open(fd) for fd in fds) and spares.take() is None and said[-1] == 0
    assert bytes(mapping[:1]) == b"w", "a mapping outlives the file's descriptor"


def test_notes_of_mappings_stay_few_however_often_an_input_is_read() -> None:
    """A mapping kept for the next reader is noted again by every task that reads it: one note still. Mappings made
    anew and dropped by task after task leave at most a bounded number of notes behind."""
    spares = SpareFiles()
    shared = SharedBytes.create(b"k" * KB)
    kept = shared.private_view()
    for _ in range(5000):
        spares.mapped(OLD, kept)
    assert len(spares._mappings[OLD]) == 1
    for _ in range(5000):
        spares.mapped(b"n" * 16, shared.private_view())  # each gone as the next is made
    assert len(spares._mappings[b"n" * 16]) <= 1024
    spares.offer([(OLD, shared)])
    assert spares.take() is None, "still mapped: it waits"
    del kept
    assert spares.take() is not None
