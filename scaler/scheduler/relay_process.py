"""Internal: the data relay (scaler/relay/) as a child process of the scheduler, on the scheduler's host.

Forked before the scheduler makes any socket or thread (so the child starts clean, and single-file builds, which have
no `python -m` to run, work alike), stopped when it stops; it also exits on its own once the scheduler is gone. Its
port (which it picks when it binds) and its counters come back through a small shared memory file."""

from __future__ import annotations

import logging
import mmap
import os
import signal
import time
from typing import Optional, Tuple

from scaler.io.addresses import tcp_host_port
from scaler.io.curve_keys import CurveServerKeys
from scaler.io.shared_bytes import shared_fd
from scaler.logs import flush_logs
from scaler.relay.relay import COUNTERS, run_relay

logger = logging.getLogger(__name__)

_START_SECONDS = 10.0
_STOP_SECONDS = 5.0


def relay_host(scheduler_address: str) -> Optional[str]:
    """The interface the relay binds: the scheduler's own; None for an ipc:// scheduler (peers on one host reach each
    other anyway)."""
    parts = tcp_host_port(scheduler_address)
    return (parts[0] or None) if parts is not None else None


class RelayProcess:
    def __init__(
        self,
        host: str,
        max_frame_bytes: int,
        curve: Optional[CurveServerKeys] = None,
        avoid_ports: Tuple[int, ...] = (),
    ) -> None:
        """`curve`: the scheduler's keys, with CurveZMQ: the relay serves under them. `avoid_ports`: the ports the
        scheduler binds after this starts."""
        fd = shared_fd("scaler-relay-counters")
        os.ftruncate(fd, COUNTERS.size)
        self._counters = mmap.mmap(fd, COUNTERS.size)
        os.close(fd)
        parent = os.getpid()
        flush_logs()  # what is queued is written once, by the parent
        self.pid = os.fork()
        if self.pid == 0:  # the relay
            code = 0
            try:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                signal.signal(signal.SIGTERM, signal.default_int_handler)  # a KeyboardInterrupt: it closes its socket
                run_relay(host, max_frame_bytes, self._counters, parent, curve, avoid_ports)
            except BaseException:  # noqa: B036 - the child must never return into the scheduler's code
                logger.exception("relay: failed")
                code = 1
            finally:
                flush_logs()
                os._exit(code)
        deadline = time.monotonic() + _START_SECONDS
        while self.port == 0:
            if self._exited() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the data relay did not start (see the log above)")
            time.sleep(0.01)
        logger.info("Scheduler: data relay on port %d (pid %d)", self.port, self.pid)

    @property
    def port(self) -> int:
        return COUNTERS.unpack_from(self._counters, 0)[0]

    def counters(self) -> Tuple[int, int]:
        """(requests passed on, bytes passed back) since it started."""
        _, requests, relayed = COUNTERS.unpack_from(self._counters, 0)
        return requests, relayed

    def _exited(self) -> Optional[int]:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return 0
        return None if pid == 0 else status

    def stop(self) -> None:
        if self._exited() is not None:
            return
        os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_SECONDS
        while self._exited() is None:
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                return
            time.sleep(0.01)
