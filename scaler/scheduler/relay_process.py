"""Internal: the data relay (scaler/relay/) as a child process of the scheduler, on the scheduler's host.

Started before the scheduler serves, stopped when it stops; it also exits on its own once the scheduler is gone. Its
port (which it picks when it binds) and its counters come back through a small shared memory file."""

from __future__ import annotations

import logging
import mmap
import os
import subprocess
import sys
import time
from typing import List, Optional, Tuple

from scaler.io.shared_bytes import shared_fd
from scaler.relay.relay import COUNTERS

logger = logging.getLogger(__name__)

_START_SECONDS = 10.0


def relay_host(scheduler_address: str) -> Optional[str]:
    """The interface the relay binds: the scheduler's own; None for an ipc:// scheduler (peers on one host reach each
    other anyway)."""
    if not scheduler_address.startswith("tcp://"):
        return None
    host = scheduler_address[len("tcp://") :].rpartition(":")[0]
    return host or None


class RelayProcess:
    def __init__(
        self,
        host: str,
        max_frame_bytes: int,
        logging_paths: List[str],
        logging_level: str,
        curve_files: Optional[Tuple[str, str]] = None,
    ) -> None:
        """`curve_files`: the scheduler's secret key file and authorized keys directory, with CurveZMQ."""
        fd = shared_fd("scaler-relay-counters")
        os.ftruncate(fd, COUNTERS.size)
        self._counters = mmap.mmap(fd, COUNTERS.size)
        command = [
            sys.executable,
            "-m",
            "scaler.relay",
            host,
            "--max-frame-bytes",
            str(max_frame_bytes),
            "--counters-fd",
            str(fd),
            "--parent-pid",
            str(os.getpid()),
            "--logging-level",
            logging_level,
            *(["--curve-secret-key", curve_files[0], "--curve-authorized-keys", curve_files[1]] if curve_files else []),
            "--logging-paths",
            *logging_paths,
        ]
        os.set_inheritable(fd, True)
        try:
            self._process = subprocess.Popen(command, pass_fds=(fd,), stdin=subprocess.DEVNULL)
        finally:
            os.close(fd)
        deadline = time.monotonic() + _START_SECONDS
        while self.port == 0:
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the data relay did not start (exit code {self._process.returncode})")
            time.sleep(0.01)
        logger.info("Scheduler: data relay on port %d (pid %d)", self.port, self._process.pid)

    @property
    def port(self) -> int:
        return COUNTERS.unpack_from(self._counters, 0)[0]

    def counters(self) -> Tuple[int, int]:
        """(requests passed on, bytes passed back) since it started."""
        _, requests, relayed = COUNTERS.unpack_from(self._counters, 0)
        return requests, relayed

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
