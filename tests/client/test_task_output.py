"""Client(stream_output=True): the flag on every task, and the printer (marks, bounds, result() after the lines)."""

from __future__ import annotations

import logging
import pickle
import sys
import threading
import time
from typing import List

import pytest

from scaler.client import Client, output
from scaler.client.future import ScalerFuture
from scaler.protocol import Task

pytestmark = pytest.mark.timeout(60)


def square(x):
    return x * x


def test_every_task_of_a_streaming_client_asks_for_its_output(peer, caplog):
    with caplog.at_level(logging.WARNING):
        streaming = Client(peer.address, timeout_seconds=10, stream_output=True)
    assert "does not forward task output" in caplog.text, "this peer plays an older scheduler"
    plain = Client(peer.address, timeout_seconds=10)
    try:
        streaming.submit(square, 2).result(10)
        streaming.map(square, [(3,), (4,)])
        streaming.get({"a": 1, "b": (square, "a")}, ["b"])
        plain.submit(square, 5).result(10)
        flags = [task.stream_output for task in peer.messages(Task)]
        assert flags == [True] * 4 + [False], "submit, map's two, the graph's one; then the plain client's"
        assert pickle.loads(pickle.dumps(streaming))._factory.stream_output, "a nested client streams too"
        with pytest.raises(TypeError, match="stream_output must be a bool"):
            Client(peer.address, stream_output="yes")
    finally:
        streaming.disconnect()
        plain.disconnect()


def test_lines_are_marked_and_an_unfinished_last_line_is_finished():
    assert output.mark_lines("f#3", b"one\ntwo\n") == "[f#3] one\n[f#3] two\n"
    assert output.mark_lines("f#3", b"half") == "[f#3] half\n"
    assert output.mark_lines("f#3", b"\xff\n") == "[f#3] \ufffd\n", "bytes that are not UTF-8 do not stop it"


class SlowStream:
    """A terminal that takes `delay` seconds per write, or blocks until released."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.release = threading.Event()
        self.blocked = delay < 0
        self.written: List[str] = []

    def write(self, text: str) -> int:
        if self.blocked:
            self.release.wait(30)
        time.sleep(max(self.delay, 0.0))
        self.written.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_result_returns_once_the_tasks_lines_are_written(monkeypatch):
    terminal = SlowStream(delay=0.3)
    monkeypatch.setattr(sys, "stdout", terminal)
    printer = output._Printer()
    monkeypatch.setattr(output, "_printer", printer)
    future = ScalerFuture(b"t" * 16)
    printer.put(future.task_id, "f#0", 0, b"from the task\n")  # as the IO thread does: output, then the result
    future._settle(42, False, None)
    assert future.result(5) == 42
    assert terminal.written == ["[f#0] from the task\n"], "result() came back before the task's line was written"
    assert future.task_id not in output.unprinted


def test_a_stuck_terminal_drops_output_with_a_count_and_never_holds_results(monkeypatch):
    terminal, errors = SlowStream(delay=-1), SlowStream()
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setattr(sys, "stderr", errors)
    monkeypatch.setattr(output, "MAX_QUEUED_BYTES", 1000)
    monkeypatch.setattr(output, "PRINTER_STALL_SECONDS", 0.2)
    printer = output._Printer()
    monkeypatch.setattr(output, "_printer", printer)
    printer.put(b"a" * 16, "a#0", 0, b"stuck in the write\n")
    deadline = time.monotonic() + 5
    while printer._busy_since is None:  # the printer is inside the write that never returns
        assert time.monotonic() < deadline
        time.sleep(0.01)
    started = time.monotonic()
    for index in range(20):
        printer.put(b"b" * 16, "b#1", 0, b"%03d" % index + b"." * 96 + b"\n")  # 100 bytes each
    assert time.monotonic() - started < 1.0, "the IO thread must never wait for the terminal"
    future = ScalerFuture(b"b" * 16)
    future._settle("done", False, None)
    assert future.result(5) == "done", "a stuck printer does not hold results past PRINTER_STALL_SECONDS"
    terminal.release.set()
    printer.drain(5)
    # 1000 bytes may wait, the 19 being written included: 9 lines of 100 fit, 11 are dropped and counted
    assert "".join(terminal.written).count("[b#1] ") == 9
    assert errors.written == ["[scaler] 1100 bytes of task output dropped: this process's output was too slow\n"]
