"""Task output (Task.streamOutput): the core's batching, the pipes' parser, and a real worker capturing fds 1 and 2."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import List

import cloudpickle
import pytest

from scaler.protocol import OutputStream, TaskCancel, TaskOutput, TaskResult, TaskStatus
from scaler.worker.capture import STDERR, STDOUT, OutputReader, make_pipes, marker_prefix
from scaler.worker.processor_link import ProcessorLink
from scaler.worker.processor_messages import ProcessorArgument, ProcessorTask
from scaler.worker.task_output import OUTPUT_BATCH_BYTES, OUTPUT_DELAY_SECONDS
from scaler.worker.zygote import ProcessorZygote
from tests.worker.core_harness import FUNCTION, Harness, of_type
from tests.worker.test_core import connected

pytestmark = pytest.mark.timeout(60)

# Functions of this module travel by value, as a client's __main__ would.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --- the core: batching, the dropped line, output before the answer -------------------------------------------------


def streaming(harness: Harness, stream_output: bool = True):
    """A task with streamOutput, started by the active processor: (task, its processor, its seq)."""
    task = harness.task(stream_output=stream_output)
    harness.send(task)
    sim = harness.active
    sim.read_orders()
    sim.start_next()
    return task, sim, sim.running.seq


def sent_output(messages) -> List[tuple]:
    return [(message.stream, message.data) for message in of_type(messages, TaskOutput)]


def test_output_leaves_in_whole_lines_a_moment_after_it_came_and_everything_before_the_result():
    harness = connected()
    task, sim, seq = streaming(harness)
    assert harness.hands[-1].tasks[0].stream_output, "the flag reaches the processor with the task"
    out = harness.output(sim.number, (seq, STDOUT, b"one\ntw"), (seq, STDERR, b"warn\n"))
    assert not sent_output(out), "held a moment: a chatty task sends a message per stream now and then, not per line"
    due = harness.core.outputs[task.task_id].due()
    assert due == pytest.approx(harness.now + OUTPUT_DELAY_SECONDS) and harness.core.next_deadline() <= due
    out = harness.tick(OUTPUT_DELAY_SECONDS)
    assert sent_output(out) == [(OutputStream.stdout, b"one\n"), (OutputStream.stderr, b"warn\n")]
    assert harness.core.outputs[task.task_id].due() == float("inf"), "an unfinished line waits for its end"
    assert not sent_output(harness.tick(1.0))
    harness.output(sim.number, (seq, STDOUT, b"o"))
    sim.finish()
    out = harness.report(sim.number)
    assert [type(message) for message in out] == [TaskOutput, TaskResult]
    assert sent_output(out) == [(OutputStream.stdout, b"two")]
    assert out[1].status == TaskStatus.success and not harness.core.outputs


def test_a_burst_leaves_at_once_and_a_line_longer_than_a_batch_is_split():
    harness = connected()
    task, sim, seq = streaming(harness)
    burst = b"x" * (OUTPUT_BATCH_BYTES - 1) + b"\n"
    assert sent_output(harness.output(sim.number, (seq, STDOUT, burst + b"yy"))) == [(0, burst)]
    long_line = b"z" * OUTPUT_BATCH_BYTES
    assert sent_output(harness.output(sim.number, (seq, STDOUT, long_line))) == [(0, b"yy" + long_line)]


def test_what_was_dropped_is_counted_in_one_line_after_the_rest():
    harness = connected()
    task, sim, seq = streaming(harness)
    harness.output(sim.number, (seq, STDOUT, b"kept\n"), (seq, STDERR, b"", 100), (seq, STDOUT, b"", 23))
    sim.finish()
    out = harness.report(sim.number)
    assert sent_output(out) == [(0, b"kept\n"), (1, b"[... 123 bytes of output dropped]\n")]
    assert type(out[-1]) is TaskResult


def test_a_canceled_or_dead_tasks_output_precedes_its_answer():
    harness = connected()
    task, sim, seq = streaming(harness)
    harness.output(sim.number, (seq, STDOUT, b"before the cancel\n"))
    out = harness.send(TaskCancel(task_ids=[task.task_id]))
    assert [type(message) for message in out] == [TaskOutput, TaskResult] and out[1].status == TaskStatus.canceled
    assert harness.killed == [sim.number]
    assert not sent_output(harness.output(sim.number, (seq, STDOUT, b"too late\n"))), "its processor is gone"
    task, sim, seq = streaming(harness)
    harness.output(sim.number, (seq, STDERR, b"last words"))
    out = harness.die(sim.number)
    assert sent_output(out) == [(1, b"last words")] and out[-1].status == TaskStatus.failed


def test_a_scheduler_that_does_not_forward_task_output_gets_none():
    harness = Harness()
    harness.connect(forwards_task_output=False)  # an older scheduler: a TaskOutput would make it drop the frame
    harness.serve(FUNCTION)
    harness.send(harness.task(stream_output=True))
    assert harness.hands[-1].tasks[0].stream_output is False, "the processor captures nothing"


def test_output_of_a_task_without_the_flag_or_of_no_known_task_is_ignored():
    harness = connected()
    task, sim, seq = streaming(harness, stream_output=False)
    harness.output(sim.number, (seq, STDOUT, b"x\n"), (999, STDOUT, b"y\n"))
    assert not harness.core.outputs
    sim.finish()
    assert [type(message) for message in harness.report(sim.number)] == [TaskResult]


# --- the pipes: markers, attribution, the limit -----------------------------------------------------------------------


class Pipes:
    def __init__(self, limit: int) -> None:
        (stdout_read, self.stdout), (stderr_read, self.stderr), nonce = make_pipes()
        self.prefix = marker_prefix(nonce)
        self.reader = OutputReader(stdout_read, stderr_read, nonce, limit)

    def write(self, fd: int, *parts: bytes) -> None:
        for part in parts:
            os.write(fd, part)

    def marker(self, kind: bytes, seq: int) -> bytes:
        return self.prefix + kind + b"%d\0" % seq

    def close(self) -> None:
        self.reader.close()
        os.close(self.stdout)
        os.close(self.stderr)


@pytest.fixture
def pipes():
    opened = Pipes(limit=10)
    yield opened
    opened.close()


def test_bytes_belong_to_the_task_between_its_markers_even_when_a_read_cuts_a_marker(pipes):
    begin, end = pipes.marker(b"B", 7), pipes.marker(b"E", 7)
    pipes.write(pipes.stdout, b"stray\n", begin[:5])
    assert pipes.reader.read() == [] and pipes.reader.stray_bytes == 6, "the start of a marker is held back"
    pipes.write(pipes.stdout, begin[5:] + b"hello\n\0x", end[:-3])
    chunks = pipes.reader.read()
    assert [(c.seq, c.stream, c.data) for c in chunks] == [(7, STDOUT, b"hello\n\0x")]
    pipes.write(pipes.stdout, end[-3:] + b"late\n")
    assert pipes.reader.read() == [] and pipes.reader.stray_bytes == 11, "after its end: no task's, dropped"


def test_the_limit_counts_both_streams_of_a_task_and_resets_with_the_next(pipes):
    pipes.write(pipes.stdout, pipes.marker(b"B", 1), b"123456")
    pipes.write(pipes.stderr, pipes.marker(b"B", 1), b"abcdefgh", pipes.marker(b"E", 1))
    pipes.write(pipes.stdout, b"789", pipes.marker(b"E", 1), pipes.marker(b"B", 2), b"0123456789AB")
    chunks = pipes.reader.read()  # stdout's pipe first, then stderr's
    kept = [(c.seq, c.stream, c.data) for c in chunks if c.data]
    assert kept == [(1, STDOUT, b"123456789"), (2, STDOUT, b"0123456789"), (1, STDERR, b"a")]
    assert sorted((c.seq, c.dropped) for c in chunks if c.dropped) == [(1, 7), (2, 2)]


# --- a real processor: nothing blocks on a full pipe ------------------------------------------------------------------


def write_a_lot(size: int) -> int:
    os.write(1, b"x" * size)  # one write, far more than a pipe holds: it blocks until the agent reads
    return size


def test_an_order_too_big_for_the_channel_does_not_deadlock_with_a_task_blocked_on_its_output():
    zygote = ProcessorZygote.start()
    link = ProcessorLink(1, zygote.fork_processor(10), output_limit_bytes=1000)
    try:
        function = cloudpickle.dumps(write_a_lot)
        size = 4 * 1024 * 1024
        argument = [ProcessorArgument("", b"", cloudpickle.dumps(size), False)]
        chatty = ProcessorTask(1, b"chatty", b"", None, b"f" * 16, function, argument, False, [], True)
        link.hand([chatty])
        deadline = time.monotonic() + 10
        while link.progress.read()[0] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        # The processor reads orders between tasks only, and its task waits for room in its stdout pipe: an order
        # larger than the channel's buffer must not wait for the processor while the processor waits for us.
        big = ProcessorTask(2, b"big", b"", None, b"g" * 16, b"\0" * (8 * 1024 * 1024), [], False, [], False)
        sender = threading.Thread(target=link.hand, args=([big],), daemon=True)
        sender.start()
        sender.join(20)
        assert not sender.is_alive(), "the agent and the processor wait for each other"
        assert link.writing, "the channel took 8 MiB at once: this test shows nothing"
        chunks = link.read_output(True)
        while not any(
            result.task_id == b"chatty" for report in link.reader.read_available() for result in report.results
        ):
            assert time.monotonic() < deadline + 10
            chunks += link.read_output(True)
            link.write()  # the rest of the order, as the agent's loop writes it when the channel has room
            time.sleep(0.005)
        chunks += link.read_output(True)
        assert sum(len(chunk.data) for chunk in chunks) == 1000
        assert sum(chunk.dropped for chunk in chunks) == size - 1000
    finally:
        link.kill()
        zygote.stop(timeout_seconds=5)


# --- a real worker: what is captured, in which order ------------------------------------------------------------------


def print_every_way(name: str) -> str:
    import ctypes
    import subprocess

    print(f"{name}: print")
    print(f"{name}: print to stderr", file=sys.stderr)
    sys.stdout.write(f"{name}: sys.stdout.write\n")
    os.write(1, f"{name}: fd 1\n".encode())
    os.write(2, f"{name}: fd 2\n".encode())
    subprocess.run(["sh", "-c", f"echo '{name}: subprocess'; echo '{name}: subprocess stderr' >&2"], check=True)
    ctypes.CDLL(None).printf(f"{name}: C printf\n".encode())  # stdio buffers it: flushed when the task ends
    return name


def print_lines(count: int, size: int) -> int:
    for index in range(count):
        print(str(index).rjust(size - 1, "."))
    return count


def leave_a_process_printing(seconds: float, done: str) -> None:
    import subprocess

    subprocess.Popen(["sh", "-c", f"sleep {seconds}; echo left behind; touch {done}"])


def print_second() -> None:
    print("second task")


def output_then_result(peer, task, timeout: float = 10.0):
    """The task's TaskOutputs (by stream) and its TaskResult, checking nothing of it came after the result."""
    result = peer.result_of(task, timeout)
    outputs = [message for _, message in peer.inbox if type(message) is TaskOutput and message.task_id == task.task_id]
    peer.inbox = [(who, message) for who, message in peer.inbox if message not in outputs]
    peer.pump_for(0.2)
    assert not [m for _, m in peer.inbox if type(m) is TaskOutput and m.task_id == task.task_id], "output after result"
    return [b"".join(m.data for m in outputs if m.stream == stream) for stream in (STDOUT, STDERR)], result


def test_a_worker_captures_everything_written_to_fds_1_and_2_and_sends_it_before_the_result(peer, worker):
    task = peer.task(print_every_way, "t")
    task.stream_output = True
    peer.send(worker.identity, task)
    (stdout, stderr), result = output_then_result(peer, task)
    assert result.status == TaskStatus.success, result.error_text
    for line in ("print", "sys.stdout.write", "fd 1", "subprocess", "C printf"):
        assert f"t: {line}\n".encode() in stdout, (line, stdout)
    for line in ("print to stderr", "fd 2", "subprocess stderr"):
        assert f"t: {line}\n".encode() in stderr, (line, stderr)
    assert stdout.index(b"t: print\n") < stdout.index(b"t: sys.stdout.write\n") < stdout.index(b"t: fd 1\n")


def test_without_the_flag_nothing_is_captured(peer, worker):
    result = peer.run(worker.identity, peer.task(print_every_way, "plain"))
    assert result.status == TaskStatus.success
    assert not [m for _, m in peer.inbox if type(m) is TaskOutput]
    deadline = time.monotonic() + 10
    while b"plain: fd 1" not in worker.process.output().encode():  # where it always went: the worker's own stdout
        assert time.monotonic() < deadline, worker.process.output()
        peer.pump_for(0.05)


def test_many_short_tasks_each_output_precedes_its_result(peer, worker):
    tasks = [peer.task(print_lines, 2, 8) for _ in range(200)]
    for task in tasks:
        task.stream_output = True
    peer.send(worker.identity, *tasks)
    deadline = time.monotonic() + 30
    while len([m for _, m in peer.inbox if type(m) is TaskResult]) < len(tasks):
        assert time.monotonic() < deadline
        peer.pump(0.05)
    seen_result = set()
    outputs = {task.task_id: b"" for task in tasks}
    for _, message in peer.inbox:
        if type(message) is TaskResult:
            seen_result.add(message.task_id)
        elif type(message) is TaskOutput:
            assert message.task_id not in seen_result, "output after its task's result"
            outputs[message.task_id] += message.data
    assert set(outputs.values()) == {b"......0\n......1\n"}


def test_a_chatty_task_is_cut_at_the_limit_and_what_a_task_left_running_writes_later_goes_nowhere(
    peer, start_cluster, tmp_path
):
    start_cluster("--task-output-limit", "1000")
    identity, _ = peer.accept()
    chatty = peer.task(print_lines, 50, 100)
    chatty.stream_output = True
    peer.send(identity, chatty)
    (stdout, stderr), result = output_then_result(peer, chatty)
    assert result.status == TaskStatus.success
    assert stdout == b"".join(str(index).rjust(99, ".").encode() + b"\n" for index in range(10))
    assert stderr == b"[... 4000 bytes of output dropped]\n"
    done = tmp_path / "left-behind-wrote"
    leaver, second = peer.task(leave_a_process_printing, 0.2, str(done)), peer.task(print_second)
    leaver.stream_output = second.stream_output = True
    peer.send(identity, leaver)
    assert output_then_result(peer, leaver)[1].status == TaskStatus.success
    deadline = time.monotonic() + 10
    while not done.exists():
        assert time.monotonic() < deadline
        peer.pump_for(0.05)
    peer.send(identity, second)
    (stdout, stderr), result = output_then_result(peer, second)
    assert (stdout, stderr) == (b"second task\n", b""), "written between tasks, by no task: dropped"
