"""scaler.logs in real processes: logging never blocks on its output, counts what it drops, exits within a bound,
follows rotated files and works in forked children."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from scaler.logs import EXIT_FLUSH_SECONDS, QUEUED_LINES
from scaler.testing.processes import ROOT, fill_pipe

LINES = 3 * QUEUED_LINES


def _python(script: str, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, **options)


def _read_all(fd: int, until: subprocess.Popen, timeout: float = 60.0) -> bytes:
    """Everything written to the pipe read from `fd` until the process exits (and the pipe closes)."""
    data = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 1.0)[0]:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(data)
            data.append(chunk)
    until.kill()
    raise AssertionError(f"the pipe did not close within {timeout}s")


def test_logging_to_a_full_pipe_does_not_block_and_counts_the_lines_it_drops() -> None:
    read_fd, write_fd = os.pipe()
    fill_pipe(write_fd)
    child = _python(
        f"""
        import logging, sys, time
        from scaler.logs import flush_logs, setup_logging
        setup_logging(["/dev/stdout"], "INFO")
        started = time.monotonic()
        for index in range({LINES}):
            logging.info("line %d", index)
        print(f"logged in {{time.monotonic() - started:.3f}}", file=sys.stderr, flush=True)
        sys.stdin.readline()  # until the test reads the pipe
        assert flush_logs(30)
        """,
        stdout=write_fd,
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(write_fd)
    try:
        assert select.select([child.stderr], [], [], 60)[0], "logging to a full pipe blocked the thread that logs"
        assert child.stderr.readline().startswith(b"logged in")
        child.stdin.write(b"go\n")
        child.stdin.flush()
        output = _read_all(read_fd, child).decode()
        assert child.wait(10) == 0, child.stderr.read()
    finally:
        child.kill()
        os.close(read_fd)
    written = [int(number) for number in re.findall(r"^\[INFO\].*: line (\d+)$", output, re.MULTILINE)]
    (dropped,) = [int(n) for n in re.findall(r"dropped (\d+) log line\(s\): /dev/stdout did not keep up", output)]
    started = output.count("logging to ('/dev/stdout',)")  # setup_logging's first line, if it was not dropped
    assert dropped > 0 and len(written) + started + dropped == LINES + 1
    assert written == sorted(written), "lines are written in order"


def test_a_process_whose_output_is_blocked_exits_within_the_bound(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    fill_pipe(write_fd)
    child = _python(
        """
        import logging
        from scaler.logs import setup_logging
        setup_logging(["/dev/stdout"], "INFO")
        for index in range(100):
            logging.warning("line %d", index)
        """,
        stdout=write_fd,
        stderr=subprocess.PIPE,
    )
    os.close(write_fd)
    try:
        started = time.monotonic()
        code = child.wait(EXIT_FLUSH_SECONDS + 10)
        took = time.monotonic() - started
        stderr = child.stderr.read().decode()
    finally:
        child.kill()
        os.close(read_fd)
    assert code == 0 and "Fatal Python error" not in stderr, stderr
    assert took >= EXIT_FLUSH_SECONDS - 0.5, "it gave up without waiting its bound"


def test_a_rotated_file_is_reopened_and_forked_children_log_on_their_own(tmp_path: Path) -> None:
    log = tmp_path / "scaler.log"
    child = _python(
        f"""
        import logging, os
        from scaler.logs import flush_logs, setup_logging
        setup_logging([{str(log)!r}], "INFO")
        logging.info("before rotation")
        assert flush_logs(10)
        os.rename({str(log)!r}, {str(log) + ".1"!r})
        logging.info("after rotation")
        pid = os.fork()
        if pid == 0:
            logging.info("from the forked child")
            flush_logs(10)
            os._exit(0)
        os.waitpid(pid, 0)
        logging.info("from the parent, after the fork")
        """,
        stderr=subprocess.PIPE,
    )
    assert child.wait(30) == 0, child.stderr.read()
    rotated = (tmp_path / "scaler.log.1").read_text()
    current = log.read_text()
    assert "before rotation" in rotated and "after rotation" not in rotated
    lines = [line.split(": ", 1)[1] for line in current.splitlines()]
    # each line once; the parent's in its own order. The child's line may come before the parent's "after rotation":
    # the parent's writer thread writes what it had queued at the fork whenever it runs (the module docstring)
    assert sorted(lines) == sorted(["after rotation", "from the forked child", "from the parent, after the fork"])
    assert lines.index("after rotation") < lines.index("from the parent, after the fork")
