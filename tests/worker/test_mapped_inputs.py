"""A task process's kept mappings of shared results (scaler/worker/mapped_inputs.py), with real memfds and the real
/proc/self/pagemap; and through a real TaskRunner, that a task changing its input in place never changes what the
next task reads."""

from __future__ import annotations

import os
import sys

import cloudpickle
import pytest

from scaler.io.shared_bytes import SharedBytes, shared_fd
from scaler.serializer import default_loads, dump_to_shared
from scaler.worker.mapped_inputs import MappedInputs
from scaler.worker.processor import TaskRunner
from scaler.worker.processor_messages import ProcessorTask

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.access("/proc/self/pagemap", os.R_OK),
    reason="kept mappings need /proc/self/pagemap",
)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

PAGE = os.sysconf("SC_PAGE_SIZE")
RESULT = b"r" * 16
OTHER = b"o" * 16


def shared(data: bytes) -> SharedBytes:
    """A result as a processor receives it: its own descriptor of the holder's memfd."""
    return SharedBytes.create(data)


def handed_again(payload: SharedBytes) -> SharedBytes:
    """The same memfd, handed with a later task (a new descriptor, as SCM_RIGHTS gives)."""
    return SharedBytes(os.dup(payload.fd), payload.size)


def test_a_result_read_by_several_tasks_is_mapped_once() -> None:
    mapped = MappedInputs(1 << 30, 8)
    payload = shared(b"a" * (3 * PAGE))
    first = mapped.view(RESULT, payload)
    assert bytes(first[:1]) == b"a" and not first.readonly, "writable: default_loads maps arrays in place"
    again = mapped.view(RESULT, handed_again(payload))
    assert again is first and mapped.kept_bytes() == 3 * PAGE


def test_a_result_a_task_changed_in_place_is_mapped_again_as_made() -> None:
    mapped = MappedInputs(1 << 30, 8)
    payload = shared(b"a" * (3 * PAGE))
    first = mapped.view(RESULT, payload)
    bytes(first)  # every page read, so present: only the written one differs
    first[PAGE + 5] = ord("z")  # what numpy does to an array read from it, changed in place
    again = mapped.view(RESULT, handed_again(payload))
    assert again is not first and bytes(again) == b"a" * (3 * PAGE), "the next task reads the result as it was made"
    assert bytes(first[PAGE + 5 : PAGE + 6]) == b"z", "the changing task's own view keeps its change"
    assert mapped.view(RESULT, handed_again(payload)) is again, "the fresh mapping is kept in its turn"


def test_a_result_in_another_file_is_mapped_from_that_file() -> None:
    """A spilled result, or one fetched again, comes in another file: the old mapping would show other memory."""
    mapped = MappedInputs(1 << 30, 8)
    payload = shared(b"a" * PAGE)
    first = mapped.view(RESULT, payload)
    moved = shared_fd("moved")
    os.write(moved, b"b" * PAGE)
    payload.move_to(moved)  # as spilling does: the same descriptor number, another file
    again = mapped.view(RESULT, payload)
    assert again is not first and bytes(again) == b"b" * PAGE


def test_the_least_recently_lent_go_first_past_either_bound() -> None:
    mapped = MappedInputs(3 * PAGE, 2)
    payloads = {bytes([index]) * 16: shared(bytes([index]) * PAGE) for index in range(3)}
    zero, one, two = payloads

    def kept(object_id: bytes, view: memoryview) -> bool:
        return mapped.view(object_id, handed_again(payloads[object_id])) is view

    views = {object_id: mapped.view(object_id, payload) for object_id, payload in payloads.items()}
    assert mapped.kept_bytes() == 2 * PAGE, "two at most"
    assert kept(one, views[one]) and kept(two, views[two]), "the last two lent"
    first_zero = views[zero]
    views[zero] = mapped.view(zero, handed_again(payloads[zero]))
    assert views[zero] is not first_zero, "the first went"  # one goes now, lent before two: two and zero are kept
    payloads[OTHER] = shared(b"x" * (2 * PAGE))
    views[OTHER] = mapped.view(OTHER, payloads[OTHER])  # 4 pages with two and zero: two, lent first, goes
    assert mapped.kept_bytes() == 3 * PAGE
    assert kept(OTHER, views[OTHER]) and kept(zero, views[zero])
    larger = shared(b"y" * (4 * PAGE))
    assert mapped.view(RESULT, larger) is not mapped.view(RESULT, handed_again(larger)), "past the bound: not kept"
    assert mapped.kept_bytes() == 3 * PAGE


def test_forgotten_results_are_no_longer_kept() -> None:
    mapped = MappedInputs(1 << 30, 8)
    payload = shared(b"a" * PAGE)
    first = mapped.view(RESULT, payload)
    mapped.forget([OTHER, RESULT])
    assert mapped.kept_bytes() == 0 and mapped.view(RESULT, handed_again(payload)) is not first


def test_without_pagemap_nothing_is_kept() -> None:
    mapped = MappedInputs(1 << 30, 8, pagemap_path="/nonexistent/pagemap")
    payload = shared(b"a" * PAGE)
    assert mapped.view(RESULT, payload) is not mapped.view(RESULT, handed_again(payload))
    assert mapped.kept_bytes() == 0


def view_of(block):
    return block[:]


def scale_in_place(block):
    block *= 2
    return float(block.sum())


def total(block):
    return float(block.sum())


def task(
    task_id: bytes, function, payload: SharedBytes, send_function: bool, object_id: bytes = RESULT
) -> ProcessorTask:
    function_id = function.__name__.encode()[:16].ljust(16, b"-")
    return ProcessorTask(
        seq=1,
        task_id=task_id,
        serializer_id=b"",
        serializer_payload=None,
        function_id=function_id,
        function_payload=cloudpickle.dumps(function) if send_function else None,
        arguments=[("", object_id, handed_again(payload), False)],
        profiling=False,
        forget_object_ids=[],
        stream_output=False,
    )


def test_a_task_that_changes_its_input_in_place_leaves_the_next_task_the_result_as_made() -> None:
    numpy = pytest.importorskip("numpy")
    payload = dump_to_shared(numpy.ones((512, 512)))  # 2 MiB: mapped, not copied, by default_loads
    runner = TaskRunner()
    for index in range(2):
        ran = runner.run(task(bytes([index]) * 16, scale_in_place, payload, send_function=index == 0))
        assert ran.succeeded and cloudpickle.loads(ran.payload) == 2 * 512 * 512, "each run doubles ones"
    ran = runner.run(task(b"t" * 16, total, payload, send_function=True))
    assert ran.succeeded and cloudpickle.loads(ran.payload) == 512 * 512
    assert default_loads(payload.private_view()).sum() == 512 * 512, "the holder's memory never changed"


def test_tasks_reading_a_result_unchanged_share_one_mapping() -> None:
    numpy = pytest.importorskip("numpy")
    payload = dump_to_shared(numpy.ones((512, 512)))
    runner = TaskRunner()
    first = runner._mapped.view(RESULT, handed_again(payload))
    for index in range(2):
        ran = runner.run(task(bytes([index]) * 16, total, payload, send_function=index == 0))
        assert ran.succeeded and cloudpickle.loads(ran.payload) == 512 * 512
    assert runner._mapped.view(RESULT, handed_again(payload)) is first


def test_a_result_that_is_a_view_of_a_kept_input_is_read_as_made_after_another_task_changed_that_input() -> None:
    """A task returns a view of its input: the object the processor keeps of that result (for a graph node run next)
    shares the kept mapping, which a later task is lent and changes in place. The node reads the result as made."""
    numpy = pytest.importorskip("numpy")
    payload = dump_to_shared(numpy.ones((512, 512)))
    runner = TaskRunner()
    viewed = runner.run(task(b"a" * 16, view_of, payload, send_function=True))
    assert viewed.succeeded and type(viewed.payload) is SharedBytes, "a large result, kept as the object too"
    changed = runner.run(task(b"d" * 16, scale_in_place, payload, send_function=True))
    assert changed.succeeded and cloudpickle.loads(changed.payload) == 2 * 512 * 512
    read = runner.run(task(b"e" * 16, total, viewed.payload, send_function=True, object_id=b"a" * 16))
    assert read.succeeded and cloudpickle.loads(read.payload) == 512 * 512


def test_a_result_spilled_to_disk_is_not_kept_mapped() -> None:
    """Kept, a mapping of a spilled result would pin its file (and its pages in the page cache)."""
    import tempfile

    mapped = MappedInputs(1 << 30, 8)
    with tempfile.TemporaryFile() as disk:
        disk.write(b"s" * PAGE)
        disk.flush()
        payload = SharedBytes(os.dup(disk.fileno()), PAGE)
        assert bytes(mapped.view(RESULT, payload)) == b"s" * PAGE
        assert mapped.kept_bytes() == 0


def every_other_row(block):
    return block[::2]


def test_a_view_of_a_made_object_that_views_a_kept_input_is_read_as_made_after_that_input_changed() -> None:
    """P returns a view of its kept input W; A is handed P's very object and returns a view of it in turn; B changes W
    in place through the same kept mapping. A's result, read next, is as A made it."""
    numpy = pytest.importorskip("numpy")
    payload = dump_to_shared(numpy.ones((512, 512)))
    runner = TaskRunner()
    viewed = runner.run(task(b"p" * 16, view_of, payload, send_function=True))
    assert viewed.succeeded and type(viewed.payload) is SharedBytes
    halved = runner.run(task(b"a" * 16, every_other_row, viewed.payload, send_function=True, object_id=b"p" * 16))
    assert halved.succeeded and type(halved.payload) is SharedBytes
    changed = runner.run(task(b"b" * 16, scale_in_place, payload, send_function=True))
    assert changed.succeeded and cloudpickle.loads(changed.payload) == 2 * 512 * 512
    read = runner.run(task(b"c" * 16, total, halved.payload, send_function=True, object_id=b"a" * 16))
    assert read.succeeded and cloudpickle.loads(read.payload) == 256 * 512


def said_in_environment(block):
    import os

    return os.environ["SCALER_TEST_KEPT_SAID"]


def test_the_runner_says_what_it_keeps_mapped_before_the_task_runs_and_as_it_forgets(monkeypatch) -> None:
    """The agent's memory samples leave out what a processor keeps mapped (the worker counts it as held results):
    said before the function runs, since the agent samples while it runs."""
    numpy = pytest.importorskip("numpy")
    payload = dump_to_shared(numpy.ones((512, 512)))
    monkeypatch.setenv("SCALER_TEST_KEPT_SAID", "nothing said")
    said: list = []

    def say(kept: int) -> None:
        said.append(kept)
        os.environ["SCALER_TEST_KEPT_SAID"] = str(kept)  # where the task reads it

    runner = TaskRunner(say)
    ran = runner.run(task(b"t" * 16, said_in_environment, payload, send_function=True))
    assert ran.succeeded and cloudpickle.loads(ran.payload) == str(payload.size), "said before the function ran"
    runner.run(task(b"u" * 16, total, payload, send_function=True))
    assert said == [payload.size], "said once: unchanged since"
    runner.forget([RESULT])
    assert said == [payload.size, 0]
