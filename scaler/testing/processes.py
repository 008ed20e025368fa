"""Internal: Scaler's CLIs as real processes for tests and benchmarks, and making sure none outlives its test."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Iterable, List, Optional, Sequence, Set, Union

import psutil

from scaler.cluster.cluster import still_running, wait_exited  # also for tests: a zombie has exited (see there)

# the repository's root, when run from a checkout (as the tests are): the processes' working directory
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def all_exited(processes: Iterable[Union[int, psutil.Process]]) -> bool:
    """Whether every one of these processes (pids, or psutil handles, which a reused pid does not fool) has exited;
    a zombie has."""
    for process in processes:
        try:
            handle = process if isinstance(process, psutil.Process) else psutil.Process(process)
        except psutil.NoSuchProcess:
            continue
        if still_running(handle):
            return False
    return True


def stop_process_group(popen: subprocess.Popen) -> None:
    """End the whole process group `popen` leads (started with start_new_session=True: Chromium and its zygotes and
    renderers, a benchmark and the cluster it started), SIGTERM first, then SIGKILL; reap it, and those that left the
    group too."""
    try:
        leader = psutil.Process(popen.pid)
        tree = [leader, *leader.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    try:
        os.killpg(popen.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        popen.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(5)
    for process in wait_exited(tree, 5):  # those that left the group are in `tree` too
        process.kill()


def free_tcp_address() -> str:
    """A loopback address whose port is free now, below the kernel's ephemeral range when it can: ports in that range
    go to every outgoing connection (ZeroMQ's reconnects among them), so one picked there may be taken before the
    server it is for binds it ("address already in use" in a test that did nothing wrong)."""
    lowest_ephemeral = _lowest_ephemeral_port()
    if lowest_ephemeral > _LOWEST_TEST_PORT + 1000:
        for _ in range(100):
            port = random.randrange(_LOWEST_TEST_PORT, lowest_ephemeral)
            if port in _GIVEN:  # free, maybe, but picked for another server not started yet
                continue
            if len(_GIVEN) > 1000:
                _GIVEN.clear()
            _GIVEN.add(port)
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:  # in use (or waiting out TIME_WAIT): another one
                    continue
                return f"tcp://127.0.0.1:{port}"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


_LOWEST_TEST_PORT = 10000  # well above the ports of system services
_GIVEN: Set[int] = set()  # ports this process picked already


def _lowest_ephemeral_port() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0  # not Linux: the kernel picks


def fill_pipe(fd: int) -> None:
    """Write to a pipe until it takes no more, as output nobody read for a while would have."""
    os.set_blocking(fd, False)
    try:
        while True:
            os.write(fd, b"output nobody read\n" * 1000)
    except BlockingIOError:
        pass
    os.set_blocking(fd, True)


def mapped_at(address: int) -> Optional[str]:
    """What this process maps at `address`, as /proc/self/maps names it: a file's path or a memfd's name ("" for
    anonymous memory), or None if nothing is mapped there."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(bound, 16) for bound in fields[0].split("-"))
            if start <= address < end:
                return fields[5].strip() if len(fields) > 5 else ""
    return None


def wait_for(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll `condition` until it holds; fail with `what` once `timeout` seconds passed."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class ScalerProcess:
    """A CLI run as `python -m MODULE ARGS...` with its output captured to a file, stopped with its whole tree."""

    def __init__(
        self, module: str, args: List[str], log_path: str, python: Optional[str] = None, prefix: Sequence[str] = ()
    ) -> None:
        """`prefix` goes before the interpreter, e.g. `ip netns exec NAME` to run on another test host."""
        self.log_path = log_path
        self._log = open(log_path, "wb")
        command = [*prefix, python or sys.executable, "-m", module, *args]
        self.popen = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.pid = self.popen.pid

    def output(self) -> str:
        with open(self.log_path, "rb") as log:
            return log.read().decode(errors="replace")

    def wait_for_output(self, text: str, timeout: float = 20.0) -> None:
        def seen() -> bool:
            if self.popen.poll() is not None and text not in self.output():
                raise AssertionError(
                    f"process exited with {self.popen.returncode} before printing {text!r}:\n{self.output()}"
                )
            return text in self.output()

        wait_for(seen, timeout, f"{text!r} in the output of pid {self.pid}")

    def descendants(self) -> List[psutil.Process]:
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, wait, then SIGKILL whatever of the tree is left; returns the exit code."""
        tree = self.descendants()
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        for process in wait_exited(tree, timeout):
            process.kill()
        self._log.close()
        return self.popen.returncode
