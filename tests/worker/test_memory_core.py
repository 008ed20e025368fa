"""The worker core's memory limit, without sockets or processes: sampling, stopping a task past the limit (the
watchdog's and the kernel's), pausing and resuming (docs/guide/memory.md)."""

from __future__ import annotations

import cloudpickle
import pytest

from scaler import config
from scaler.errors import MemoryLimitError
from scaler.io.shared_bytes import SharedBytes
from scaler.protocol import Hello, ObjectDelete, Task, TaskResult, TaskStatus, heartbeat_flags
from scaler.worker.core import MEMORY_SAMPLE_SECONDS
from scaler.worker.instructions import AllowMemory, ReadBackHeld, SpillHeld
from scaler.worker.settings import WorkerSettings
from tests.worker.core_harness import Harness, SimProcessor, of_type
from tests.worker.test_core import connected, results

MB = 1_000_000
LIMIT = 400 * MB  # spill at 240 MB, pause at 320 MB, stop at 380 MB (the default fractions)


def limited(**settings) -> Harness:
    return connected(memory_limit="400MB", **settings)


def start_first(harness: Harness, *tasks: Task) -> SimProcessor:
    """Send the tasks; the active processor starts the first one."""
    harness.send(*tasks)
    sim = harness.active
    sim.read_orders()
    assert sim.start_next() is not None
    return sim


def test_sizes_parse_with_powers_of_ten_and_of_two() -> None:
    assert config.parse_size("400MB") == 400 * MB
    assert config.parse_size("400 mb") == 400 * MB
    assert config.parse_size("1GiB") == 2**30 and config.parse_size("1.5KiB") == 1536
    assert config.parse_size("4096") == 4096 and config.parse_size("2GB") == 2 * 10**9
    for bad in ("", "MB", "12 parsecs", "-1GB", "0"):
        with pytest.raises(ValueError):
            config.parse_size(bad)
    with pytest.raises(ValueError, match="memory_limit"):
        WorkerSettings("tcp://127.0.0.1:1", memory_limit="lots")
    with pytest.raises(ValueError, match="memory_pause_fraction"):
        WorkerSettings("tcp://127.0.0.1:1", memory_pause_fraction=1.5)
    assert config.size_text(400 * MB) == "400 MB" and config.size_text(2**30) == "1 GiB"


def test_without_a_limit_nothing_is_sampled_and_the_hello_says_none() -> None:
    harness = connected()
    harness.send(harness.task())
    harness.tick(3)
    assert not harness.samples and harness.core.memory_limit == 0
    (hello,) = of_type(harness.sent, Hello)
    assert hello.memory_limit == 0


def test_the_hello_names_the_limit_and_samples_come_often_only_while_a_task_runs() -> None:
    harness = limited()
    (hello,) = of_type(harness.sent, Hello)
    assert hello.memory_limit == LIMIT
    harness.tick(0)
    idle_sample = harness.samples[-1]
    assert idle_sample.numbers == [harness.core.active.number]
    assert idle_sample.exact_above == 240 * MB, "PSS is read only near the lowest threshold (spilling's)"
    assert harness.core.next_deadline() == pytest.approx(harness.now + 1.0), "idle: once a heartbeat interval"
    harness.tick(0.5)
    harness.send(harness.task())
    assert harness.core.next_deadline() == pytest.approx(harness.now + MEMORY_SAMPLE_SECONDS), "a task came: at once"
    harness.tick(MEMORY_SAMPLE_SECONDS)
    assert harness.core.next_deadline() == pytest.approx(harness.now + MEMORY_SAMPLE_SECONDS), "while it runs"


def test_a_task_past_the_stop_threshold_fails_with_memory_limit_error_and_the_queue_goes_on() -> None:
    harness = limited()
    big, queued = harness.task(), harness.task()
    sim = start_first(harness, big, queued)
    harness.tick(MEMORY_SAMPLE_SECONDS)
    number = sim.number
    assert not of_type(harness.memory({number: 300 * MB}), TaskResult), "below the stop threshold: runs on"
    sent = harness.memory({number: 390 * MB})
    result = results(sent)[big.task_id]
    assert result.status == TaskStatus.failed
    error = cloudpickle.loads(result.payload)
    assert isinstance(error, MemoryLimitError) and isinstance(error, MemoryError)
    assert error.limit_bytes == LIMIT and error.peak_bytes == 390 * MB
    assert "limit of 400 MB" in str(error) and "390 MB at its peak" in str(error) and "watchdog" in str(error)
    assert harness.killed == [number] and harness.core.active.number != number, "its processor replaced"
    assert queued.task_id in harness.core.tasks, "the task queued behind it is not lost"
    assert not harness.core.memory_paused, "the memory went with the process: no pause"
    assert results(harness.run(harness.core.active.number))[queued.task_id].status == TaskStatus.success


def test_a_bloated_idle_processor_is_replaced_without_failing_anything() -> None:
    harness = limited()
    number = harness.core.active.number
    harness.tick(0)
    assert not of_type(harness.memory({number: 390 * MB}), TaskResult)
    assert harness.killed == [number] and harness.core.active.number != number


def test_held_results_alone_past_the_threshold_pause_but_stop_nothing() -> None:
    harness = limited()
    harness.core.cache.hold(b"r" * 16, b"x" * (385 * MB), harness.now)  # bytes, not shared memory: never spilled
    sim = start_first(harness, harness.task())
    harness.tick(MEMORY_SAMPLE_SECONDS)
    assert harness.samples[-1].exact_above < 0, "near the threshold already: PSS at once"
    assert not of_type(harness.memory({sim.number: 10 * MB}), TaskResult) and not harness.killed
    assert harness.core.memory_paused and harness.core.memory_used == 395 * MB


def test_pausing_stops_dispatch_and_says_so_in_a_heartbeat_at_once_then_resumes() -> None:
    harness = limited()
    first, second = harness.task(), harness.task()
    sim = start_first(harness, first, second)
    hands = len(harness.hands)
    harness.tick(MEMORY_SAMPLE_SECONDS)
    beats = len(harness.heartbeats)
    harness.memory({sim.number: 330 * MB})
    assert harness.core.memory_paused
    assert len(harness.heartbeats) == beats + 1, "the scheduler hears of the pause at once"
    assert harness.heartbeats[-1].heartbeat.flags & heartbeat_flags.MEMORY_PAUSED
    sim.finish()
    harness.report(sim.number)
    assert len(harness.hands) == hands, "paused: the queued task is not handed"
    assert second.task_id in harness.core.tasks and not harness.core.tasks[second.task_id].processor
    harness.tick(MEMORY_SAMPLE_SECONDS)
    harness.memory({sim.number: 100 * MB})
    assert not harness.core.memory_paused
    assert not harness.heartbeats[-1].heartbeat.flags & heartbeat_flags.MEMORY_PAUSED
    assert len(harness.hands) == hands + 1, "resumed: the queued task is handed"


def test_the_pause_flag_goes_only_to_a_scheduler_that_understands_it() -> None:
    harness = Harness(memory_limit="400MB")
    harness.connect(memory_pause=False)
    harness.tick(0)
    harness.memory({harness.core.active.number: 330 * MB})
    assert harness.core.memory_paused
    assert not harness.heartbeats[-1].heartbeat.flags & heartbeat_flags.MEMORY_PAUSED


def test_a_kill_by_the_kernel_at_the_cgroup_limit_is_a_memory_limit_error() -> None:
    harness = limited()
    task, queued = harness.task(), harness.task()
    sim = start_first(harness, task, queued)
    result = results(harness.die(sim.number, memory_peak=LIMIT))[task.task_id]
    error = cloudpickle.loads(result.payload)
    assert isinstance(error, MemoryLimitError) and "kernel (memory cgroup)" in str(error)
    assert error.peak_bytes == LIMIT
    assert queued.task_id in harness.core.tasks


def test_a_death_without_the_cgroup_counter_is_still_a_processor_death() -> None:
    harness = limited()
    task = harness.task()
    sim = start_first(harness, task)
    result = results(harness.die(sim.number))[task.task_id]
    assert type(cloudpickle.loads(result.payload)).__name__ == "ProcessorDiedError"


# ---- spilling held results -------------------------------------------------------------------------------------------

KB = 1000


def holding(*sizes: int) -> Harness:
    """A worker with a 1 MB limit (spill at 600 KB) holding results of these sizes, the first one used longest ago."""
    harness = connected(memory_limit="1MB")
    for index, size in enumerate(sizes):
        harness.core.cache.hold(bytes([index]) * 16, SharedBytes.create(b"x" * size), harness.now)
        harness.now += 0.01
    harness.tick(0)
    return harness


def spills(harness: Harness) -> list:
    return [instruction for instruction in harness.moves if type(instruction) is SpillHeld]


def test_held_results_past_the_spill_threshold_go_to_disk_least_recently_used_first() -> None:
    harness = holding(200 * KB, 200 * KB, 200 * KB, 200 * KB)  # 800 KB held, 200 KB over
    number = harness.core.active.number
    harness.memory({number: 50 * KB})  # 850 KB: 250 KB over, two results to move
    (spill,) = spills(harness)
    assert spill.object_ids == [bytes([0]) * 16, bytes([1]) * 16], "the oldest first, until under the threshold"
    assert harness.core.spilled_bytes == 400 * KB and harness.core.memory_used == 450 * KB
    assert not harness.core.memory_paused
    harness.tick(1.0)
    assert harness.heartbeats[-1].heartbeat.spilled_bytes == 400 * KB, "the scheduler hears of it"
    harness.memory({number: 50 * KB})
    assert len(spills(harness)) == 1, "under the threshold now: nothing more moves"


def test_a_spilled_result_that_is_used_comes_back_when_there_is_room() -> None:
    harness = holding(200 * KB, 200 * KB, 200 * KB, 200 * KB)
    number = harness.core.active.number
    harness.memory({number: 50 * KB})
    first = bytes([0]) * 16
    harness.core.held_payload(first)  # served while memory is still near the threshold: read from disk
    harness.tick(0)
    assert not [m for m in harness.moves if type(m) is ReadBackHeld]
    harness.core._forget_objects(harness.core.cache.delete([bytes([2]) * 16, bytes([3]) * 16]))  # freed: room
    harness.memory({number: 50 * KB})  # 50 KB of processor, nothing held in memory
    assert harness.core.held_payload(first) is not None
    harness.tick(0)
    (read_back,) = [m for m in harness.moves if type(m) is ReadBackHeld]
    assert read_back.object_ids == [first] and harness.core.spilled_bytes == 200 * KB


def test_a_spill_the_disk_refused_leaves_the_result_counted_in_memory() -> None:
    harness = holding(400 * KB, 400 * KB)
    harness.memory({harness.core.active.number: 0})
    (spill,) = spills(harness)
    harness.core.held_not_moved(spill.object_ids, [])
    assert harness.core.spilled_bytes == 0 and not harness.core.spilled


def test_freed_results_leave_the_spilled_count() -> None:
    harness = holding(400 * KB, 400 * KB)
    harness.memory({harness.core.active.number: 0})
    (spill,) = spills(harness)
    harness.core._forget_objects(harness.core.cache.delete(spill.object_ids))
    assert harness.core.spilled_bytes == 0


def test_each_functions_peak_goes_in_the_next_heartbeat_once_it_rises() -> None:
    harness = limited()
    task = harness.task()
    sim = start_first(harness, task)
    harness.tick(MEMORY_SAMPLE_SECONDS)
    harness.memory({sim.number: 50 * MB})
    harness.tick(MEMORY_SAMPLE_SECONDS)
    harness.memory({sim.number: 120 * MB})
    harness.tick(MEMORY_SAMPLE_SECONDS)
    harness.memory({sim.number: 80 * MB})
    harness.tick(1.0)
    (peak,) = harness.heartbeats[-1].heartbeat.function_peaks
    assert peak.function_id == task.function_id and peak.peak_bytes == 120 * MB
    harness.tick(MEMORY_SAMPLE_SECONDS)
    harness.memory({sim.number: 100 * MB})
    harness.tick(1.0)
    assert not harness.heartbeats[-1].heartbeat.function_peaks, "reported once, until it rises again"


def test_with_cgroups_a_processor_is_allowed_the_held_results_it_wrote_until_they_leave_memory() -> None:
    harness = connected(memory_limit="1MB", data_address="tcp://127.0.0.1:5555")
    harness.core.memory_enforcement = "cgroup"  # as the shell sets it when it made cgroups
    tasks = [harness.task(), harness.task()]
    sim = start_first(harness, *tasks)
    number = sim.number
    sim.finish(payload=SharedBytes.create(b"x" * (300 * KB)))
    harness.report(number)
    harness.tick(0.001)  # the second result is the more recently used
    sim.read_orders()
    assert sim.start_next() is not None
    sim.finish(payload=SharedBytes.create(b"y" * (400 * KB)))
    harness.report(number)
    allowed = [move for move in harness.moves if type(move) is AllowMemory]
    assert allowed[-1] == AllowMemory(number, 700 * KB), "the kernel charges them to its cgroup: allowed on top"
    harness.tick(MEMORY_SAMPLE_SECONDS)
    harness.memory({number: 50 * KB})  # 750 KB: past the spill threshold (600 KB), the oldest result goes to disk
    assert any(type(move) is SpillHeld for move in harness.moves)
    assert [move for move in harness.moves if type(move) is AllowMemory][-1] == AllowMemory(number, 700 * KB), (
        "spilled, its pages may still be the processor's (it keeps its last result's memfd): still allowed"
    )
    harness.send(ObjectDelete(object_ids=[tasks[0].task_id]))  # the scheduler freed one
    assert [move for move in harness.moves if type(move) is AllowMemory][-1] == AllowMemory(number, 400 * KB)


def test_processors_drop_what_they_kept_of_spilled_results() -> None:
    """A processor may keep a held result mapped (scaler/worker/mapped_inputs.py): told of the spill, it lets the
    mapping go, or the memory spilling gave back would stay in use."""
    harness = holding(400 * KB, 400 * KB)
    sim = harness.active
    harness.memory({sim.number: 0})
    (spill,) = spills(harness)
    sim.read_orders()
    assert sim.forgotten == spill.object_ids, "idle: told at once"


def test_a_busy_processor_drops_what_it_kept_of_spilled_results_once_its_tasks_are_answered() -> None:
    """Told with its next task only, a processor that is handed none for a while (parked, a spare) would keep the
    mappings of spilled results all that time: the evictions go as soon as the tasks handed before them are answered."""
    harness = holding(400 * KB, 400 * KB)
    sim = start_first(harness, harness.task())
    harness.memory({sim.number: 0})
    (spill,) = spills(harness)
    sim.read_orders()
    assert sim.forgotten == [], "busy: its running task may read them"
    sim.finish()
    harness.report(sim.number)
    sim.read_orders()
    assert sim.forgotten == spill.object_ids
