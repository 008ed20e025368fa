"""A processor that dies, and a processor busy for long: the worker itself carries on."""

from __future__ import annotations

import os
import signal
import sys
import time

import cloudpickle
import pytest

from scaler.errors import ProcessorDiedError
from scaler.protocol import TaskStatus, heartbeat_flags
from scaler.testing.processes import all_exited, wait_for
from tests.worker.helpers import processor_pids, wait_heartbeat

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def exit_now(code):
    os._exit(code)


def kill_self():
    os.kill(os.getpid(), signal.SIGKILL)


def double(value):
    return value * 2


def spin(seconds):
    deadline = time.perf_counter() + seconds
    count = 0
    while time.perf_counter() < deadline:
        count += 1
    return count


@pytest.mark.parametrize("function, args, how", [(exit_now, (3,), "exit code 3"), (kill_self, (), "signal SIGKILL")])
def test_processor_death_fails_the_task_and_a_fresh_processor_takes_over(peer, worker, function, args, how):
    (old_pid,) = processor_pids(worker.process)
    task = peer.task(function, *args)
    result = peer.run(worker.identity, task)
    assert result.status == TaskStatus.failed
    error = cloudpickle.loads(result.payload)
    assert isinstance(error, ProcessorDiedError)
    expected = f"processor died with {how} while running task {task.task_id.hex()}"
    assert str(error) == expected and expected in result.error_text
    assert cloudpickle.loads(peer.run(worker.identity, peer.task(double, 21)).payload) == 42
    assert old_pid not in processor_pids(worker.process)


def test_idle_processor_killed_from_outside_is_replaced(peer, worker):
    (old_pid,) = processor_pids(worker.process)
    os.kill(old_pid, signal.SIGKILL)
    wait_for(lambda: processor_pids(worker.process) not in ([], [old_pid]), 10, "a fresh processor")
    assert cloudpickle.loads(peer.run(worker.identity, peer.task(double, 4)).payload) == 8
    assert "between tasks, starting a new one" in worker.process.output()


def test_heartbeats_continue_during_a_long_cpu_bound_task(peer, worker):
    task = peer.task(spin, 3.0)
    peer.send(worker.identity, task)
    wait_heartbeat(peer, lambda hb: hb.running == 1)
    start = len(peer.heartbeats)
    result = peer.result_of(task, timeout_seconds=20)
    assert result.status == TaskStatus.success
    during = peer.heartbeats[start:]
    # the agent's own send times: this test process's pauses on a loaded machine do not count; a blocked agent's
    # gap would last the whole 3 s task
    sent_at_us = [hb.sent_at_us for _, _, hb in during]
    assert len(during) >= 10, "every 100 ms for about 3 s"
    assert max(later - earlier for earlier, later in zip(sent_at_us, sent_at_us[1:])) < 2_000_000
    assert any(hb.processor_cpu > 50 for _, _, hb in during), "the processor, not the agent, was busy"
    busy = heartbeat_flags.HAS_TASK | heartbeat_flags.TASK_LOCK
    assert all(hb.flags & busy == busy for _, _, hb in during[:-1])


def maybe_exit(code):
    if code is not None:
        os._exit(code)
    return "survived"


def test_tasks_handed_ahead_run_on_the_next_processor_when_one_dies(peer, worker):
    for _ in range(3):  # seen to be short, the function is handed to the processor several at a time
        assert peer.run(worker.identity, peer.task(maybe_exit, None)).status == TaskStatus.success
    dying = peer.task(maybe_exit, 5)
    behind = [peer.task(maybe_exit, None) for _ in range(5)]
    peer.send(worker.identity, dying, *behind)
    result = peer.result_of(dying)
    assert result.status == TaskStatus.failed and "exit code 5" in result.error_text
    for task in behind:
        assert cloudpickle.loads(peer.result_of(task).payload) == "survived"


def fork_sleeper_then_exit(pid_path):
    child = os.fork()
    if child == 0:  # holds the processor's end of the agent's socket open
        time.sleep(60)
        os._exit(0)
    with open(pid_path, "w") as pid_file:
        pid_file.write(str(child))
    os._exit(4)


def test_processor_death_is_seen_even_if_its_children_keep_its_socket_open(peer, worker, tmp_path):
    pid_path = str(tmp_path / "child.pid")
    result = peer.run(worker.identity, peer.task(fork_sleeper_then_exit, pid_path))
    assert result.status == TaskStatus.failed and "exit code 4" in result.error_text
    child = int(open(pid_path).read())
    wait_for(lambda: all_exited([child]), 10, "the task's child to be killed with its processor's group")
    assert cloudpickle.loads(peer.run(worker.identity, peer.task(double, 1)).payload) == 2
