"""The CLIs as users run them: `-h`, the logs of the docs, and a scheduler on PyPy serving CPython workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from scaler import Client, config
from scaler.scheduler.cli import gc_environment
from scaler.testing.processes import ROOT, ScalerProcess, free_tcp_address

BIN = Path(sys.executable).parent
PYPY = Path(ROOT) / ".venv-pypy" / "bin" / "python"


@pytest.mark.parametrize(
    "command, words",
    [
        ("scaler_scheduler", ["--event-loop", "--protected", "--worker-timeout", "--per-worker-queue-size"]),
        ("scaler_cluster", ["--num-workers", "--heartbeat-interval", "--death-timeout"]),
        ("scaler_worker", ["--num-workers"]),
        ("scaler_top", ["--timeout", "--sort", "--curve-server-key"]),
        ("scaler_ui", ["--port", "--host", "--curve-server-key"]),
        ("scaler_keygen", ["DIRECTORY", "NAME"]),
    ],
)
def test_every_cli_answers_help(command: str, words: list) -> None:
    completed = subprocess.run([str(BIN / command), "-h"], capture_output=True, text=True, timeout=30)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("usage:")
    for word in words:
        assert word in completed.stdout


def test_bad_cli_arguments_fail_with_a_clear_message() -> None:
    completed = subprocess.run(
        [str(BIN / "scaler_scheduler"), "http://nowhere"], capture_output=True, text=True, timeout=30
    )
    assert completed.returncode == 2 and "tcp://" in completed.stderr
    completed = subprocess.run(
        [str(BIN / "scaler_cluster"), "-n", "0", "tcp://127.0.0.1:1"], capture_output=True, text=True, timeout=30
    )
    assert completed.returncode == 2 and "num-workers" in completed.stderr


def test_scheduler_in_use_address_exits_with_the_reason(tmp_path: Path) -> None:
    address = free_tcp_address()
    first = ScalerProcess("scaler.scheduler", [address, "-ma", f"ipc://{tmp_path}/m1"], str(tmp_path / "one.log"))
    try:
        first.wait_for_output("Scheduler: listening on")
        second = subprocess.run(
            [sys.executable, "-m", "scaler.scheduler", address, "-ma", f"ipc://{tmp_path}/m2"],
            capture_output=True, text=True, timeout=30, cwd=ROOT,
        )  # fmt: skip
        assert second.returncode == 1
        assert "Address already in use" in second.stderr and address in second.stderr
    finally:
        first.stop()


def test_scheduler_and_cluster_logs_read_like_the_docs(scheduler, cluster) -> None:
    address, scheduler_process = scheduler
    _, cluster_process = cluster
    log = scheduler_process.output()
    assert "use event loop: builtin" in log
    assert "Scheduler: monitor address is ipc://" in log
    assert "JIT warm-up" not in log, "nothing to warm on CPython"
    cluster_log = cluster_process.output()
    assert "ClusterProcess: starting 2 workers" in cluster_log
    assert "Worker[0] started" in cluster_log


def _serve_and_check(python: str, tmp_path: Path, extra: list) -> str:
    address = free_tcp_address()
    scheduler = ScalerProcess(
        "scaler.scheduler", [address, "-ma", f"ipc://{tmp_path}/monitor", *extra], str(tmp_path / "s.log"), python
    )
    try:
        scheduler.wait_for_output("Scheduler: listening on", timeout=60)
        workers = ScalerProcess("scaler.cluster", ["-n", "2", address], str(tmp_path / "c.log"))
        try:
            with Client(address, timeout_seconds=30) as client:
                assert client.map(pow, [(3, n) for n in range(200)]) == [3**n for n in range(200)]
                assert client.get({"a": 1, "b": (abs, -41), "c": (max, "a", "b")}, keys=["c"]) == {"c": 41}
        finally:
            workers.stop()
    finally:
        assert scheduler.stop() == 0, scheduler.output()
    log = scheduler.output()
    assert "Scheduler: stopped" in log
    return log


@pytest.mark.skipif(not PYPY.exists(), reason="no PyPy environment: scripts/test.sh builds .venv-pypy")
def test_pypy_scheduler_serves_cpython_workers_and_client(tmp_path: Path) -> None:
    log = _serve_and_check(str(PYPY), tmp_path, ["--jit-warmup", "0.2"])
    warmed = log.index("Scheduler: JIT warm-up, ")
    assert warmed < log.index("Scheduler: listening on"), "warmed before it serves"


@pytest.mark.skipif(not PYPY.exists(), reason="no PyPy environment: scripts/test.sh builds .venv-pypy")
def test_a_pypy_scheduler_stopped_during_its_jit_warm_up_stops_cleanly(tmp_path: Path) -> None:
    monitor = tmp_path / "monitor"
    scheduler = ScalerProcess(
        "scaler.scheduler", [free_tcp_address(), "-ma", f"ipc://{monitor}", "--jit-warmup", "60"],
        str(tmp_path / "s.log"), str(PYPY),
    )  # fmt: skip
    try:
        scheduler.wait_for_output("warming up the JIT for 60.0 s", timeout=60)
        assert monitor.exists(), "bound before the warm-up"
        scheduler.popen.send_signal(signal.SIGTERM)
        assert scheduler.popen.wait(timeout=30) == 0, scheduler.output()
    finally:
        scheduler.stop()
    log = scheduler.output()
    assert "Scheduler: stopping: received SIGTERM" in log and "Scheduler: stopped" in log
    assert not monitor.exists(), "its ipc file removed, as on any stop"


def test_uvloop_scheduler(tmp_path: Path) -> None:
    if sys.implementation.name != "cpython":  # on CPython uvloop is installed: its absence must fail, not skip
        pytest.skip("uvloop is CPython only")
    _serve_and_check(sys.executable, tmp_path, ["--event-loop", "uvloop"])


def test_scheduler_refuses_uvloop_on_pypy(tmp_path: Path) -> None:
    if not PYPY.exists():
        pytest.skip("no PyPy environment: scripts/test.sh builds .venv-pypy")
    completed = subprocess.run(
        [str(PYPY), "-m", "scaler.scheduler", free_tcp_address(), "-ma", f"ipc://{tmp_path}/m", "-e", "uvloop"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env={**os.environ},
    )  # fmt: skip
    assert completed.returncode == 1 and "uvloop" in completed.stderr


def test_a_stopped_scheduler_leaves_no_ipc_socket_file() -> None:
    with tempfile.TemporaryDirectory(prefix="scaler-ipc-") as directory:  # short: ipc paths are limited
        address, monitor = os.path.join(directory, "scheduler"), os.path.join(directory, "monitor")
        process = ScalerProcess(
            "scaler.scheduler", [f"ipc://{address}", "-ma", f"ipc://{monitor}"], os.path.join(directory, "s.log")
        )
        try:
            process.wait_for_output("Scheduler: listening on")
            assert os.path.exists(address) and os.path.exists(monitor)
        finally:
            assert process.stop() == 0, process.output()
        assert "Scheduler: stopped" in process.output()
        assert sorted(os.listdir(directory)) == ["s.log"]


@pytest.mark.skipif(not PYPY.exists(), reason="no PyPy environment: scripts/test.sh builds .venv-pypy")
def test_a_pypy_scheduler_restarts_itself_with_its_gc_nursery_and_keeps_its_ready_pipe(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    command = [str(PYPY), "-m", "scaler.scheduler", "-ma", f"ipc://{tmp_path}/m", "--jit-warmup", "0"]
    command += ["--ready-fd", str(write_end), "--", free_tcp_address()]
    environ = {key: value for key, value in os.environ.items() if key != "PYPY_GC_NURSERY"}
    log = tmp_path / "s.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(command, cwd=ROOT, env=environ, pass_fds=(write_end,), stdout=output, stderr=output)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as ready:
            assert ready.read(9) == b"listening", "the restarted process signals on the pipe it was given"
        environ_of_it = Path(f"/proc/{process.pid}/environ").read_bytes().split(b"\0")
        assert f"PYPY_GC_NURSERY={config.DEFAULT_PYPY_GC_NURSERY}".encode() in environ_of_it, "same pid, new env"
        # its signal handlers are installed once it serves, a moment after the pipe said so
        deadline = time.monotonic() + 30
        while b"Scheduler: listening on" not in log.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()


# As `pypy3 -m vmprof -m scaler.scheduler ...` starts it: a SIGPROF handler and a CPU-time timer armed before the
# scheduler's module runs, by code the replayed command line runs again after the restart.
_UNDER_A_PROFILER = """
import runpy, signal, sys
signal.signal(signal.SIGPROF, lambda signum, frame: None)
signal.setitimer(signal.ITIMER_PROF, 0.001, 0.001)
sys.argv = ["scaler.scheduler", *sys.argv[1:]]
runpy.run_module("scaler.scheduler", run_name="__main__")
"""


@pytest.mark.skipif(not PYPY.exists(), reason="no PyPy environment: scripts/test.sh builds .venv-pypy")
def test_a_pypy_scheduler_under_a_profiler_survives_its_restart(tmp_path: Path) -> None:
    """The profiler's timer survives execve; the new image has no handler until the profiler starts again, so a
    timer left armed killed the scheduler with SIGPROF during PyPy's start."""
    command = [str(PYPY), "-c", _UNDER_A_PROFILER, "-ma", f"ipc://{tmp_path}/m", "--jit-warmup", "0"]
    command += ["--", free_tcp_address()]
    environ = {key: value for key, value in os.environ.items() if key != "PYPY_GC_NURSERY"}
    log = tmp_path / "s.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(command, cwd=ROOT, env=environ, stdout=output, stderr=output)
    try:
        deadline = time.monotonic() + 60
        while b"Scheduler: listening on" not in log.read_bytes() and time.monotonic() < deadline:
            assert process.poll() is None, f"exited with {process.returncode}: {log.read_text()}"
            time.sleep(0.02)
        assert b"PyPy's GC nursery is" in log.read_bytes(), log.read_text()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0, log.read_text()


def test_the_gc_environment_is_pypys_only_and_never_overrides_the_users() -> None:
    assert gc_environment({"A": "1"}, "cpython") is None
    assert gc_environment({"PYPY_GC_NURSERY": "4MB"}, "pypy") is None
    assert gc_environment({"A": "1"}, "pypy") == {"A": "1", "PYPY_GC_NURSERY": config.DEFAULT_PYPY_GC_NURSERY}
