"""The status reader against a real ZeroMQ PUB socket, and the monitors' command lines."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import Iterator, Tuple

import pytest
import zmq

from scaler.monitor.subscriber import StatusSubscriber, check_timeout
from scaler.protocol import HeartbeatEcho, encode
from scaler.testing.processes import ROOT, wait_for
from tests.monitor.statuses import status


@pytest.fixture
def publisher() -> Iterator[Tuple[zmq.Socket, str]]:
    directory = tempfile.mkdtemp(prefix="scaler-mon-")  # short: ipc paths are limited to about 100 bytes
    address = f"ipc://{directory}/monitor"
    context = zmq.Context()
    socket = context.socket(zmq.PUB)
    socket.setsockopt(zmq.LINGER, 0)
    socket.bind(address)
    yield socket, address
    socket.close()
    context.term()
    shutil.rmtree(directory)  # with the socket file, which libzmq leaves behind


def test_the_newest_status_wins(publisher):
    socket, address = publisher
    with StatusSubscriber(address, timeout_seconds=5) as subscriber:
        received = []

        def publish_and_read() -> bool:
            socket.send(encode(status(time_us=1)))
            socket.send(encode(status(time_us=2, completed_tasks=42)))
            got = subscriber.receive(0.2)
            if got is not None:
                received.append(got)
            return bool(received)

        wait_for(publish_and_read, 10, "a status through the SUB socket")  # PUB drops until the SUB has joined
        while subscriber.receive(0.5) is not None:  # the second status may still be on its way: let it arrive
            pass
        assert subscriber.latest is not None and subscriber.latest.completed_tasks == 42, "the last one sent wins"
        assert not subscriber.timed_out()


@pytest.mark.parametrize("frame", [b"not a frame", encode(HeartbeatEcho(sent_at_us=1))])
def test_frames_that_are_no_status_are_skipped(publisher, frame):
    socket, address = publisher
    with StatusSubscriber(address, timeout_seconds=5) as subscriber:

        def published_and_read() -> bool:
            socket.send(frame)
            assert subscriber.receive(0.1) is None
            return (subscriber.malformed if frame == b"not a frame" else subscriber.ignored) > 0

        wait_for(published_and_read, 10, "the frame to be read and skipped")
        assert subscriber.latest is None


def test_silence_is_reported_after_the_timeout(publisher):
    _, address = publisher
    with StatusSubscriber(address, timeout_seconds=0.3) as subscriber:
        assert subscriber.receive(0.05) is None
        wait_for(subscriber.timed_out, 5, "the subscriber to time out")
        assert subscriber.no_status_message().startswith(f"no status from {address} for ")


@pytest.mark.parametrize("value, error", [(0, ValueError), (-1, ValueError), (float("inf"), ValueError),
                                          ("5", TypeError), (True, TypeError)])  # fmt: skip
def test_bad_timeouts(value, error):
    with pytest.raises(error):
        check_timeout(value)


def test_bad_address():
    with pytest.raises(ValueError, match="tcp:// or ipc://"):
        StatusSubscriber("localhost:1234", 1.0)


def run_cli(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("module", ["scaler.monitor.top", "scaler.monitor.ui.app"])
def test_help(module):
    result = run_cli(module, "-h")
    assert result.returncode == 0 and "--timeout" in result.stdout and "monitor address" in result.stdout


def test_top_once_without_a_scheduler_says_so(tmp_path):
    result = run_cli("scaler.monitor.top", f"ipc://{tmp_path}/nobody", "--once", "--timeout", "0.5")
    assert result.returncode == 1
    assert f"no status from ipc://{tmp_path}/nobody" in result.stderr and "monitor address?" in result.stderr


def test_top_once_prints_a_screen(publisher):
    socket, address = publisher
    process = subprocess.Popen(
        [sys.executable, "-m", "scaler.monitor.top", address, "--once", "--timeout", "20"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "150"},
    )
    try:
        frame = encode(status(completed_tasks=7))

        def published_and_exited() -> bool:
            socket.send(frame)
            return process.poll() is not None

        wait_for(published_and_exited, 20, "scaler_top --once to print and exit", interval=0.1)
        output = process.stdout.read()
        assert process.returncode == 0, process.stderr.read()
        assert "task_manager" in output and "Total 0 worker(s)" in output
    finally:
        process.kill()
        process.wait(5)
        process.stdout.close()
        process.stderr.close()


@pytest.mark.parametrize(
    "module, args, complaint",
    [
        ("scaler.monitor.top", ["ipc:///tmp/x", "--timeout", "-1"], "positive"),
        ("scaler.monitor.top", ["ipc:///tmp/x", "--sort", "z"], "invalid choice"),
        ("scaler.monitor.top", ["localhost:99", "--once"], "tcp:// or ipc://"),
        ("scaler.monitor.ui.app", ["ipc:///tmp/x", "--port", "70000"], "between 1 and 65535"),
        ("scaler.monitor.ui.app", ["127.0.0.1:99"], "tcp:// or ipc://"),
    ],
)
def test_bad_command_lines(module, args, complaint):
    result = run_cli(module, *args)
    assert result.returncode != 0 and complaint in result.stderr
