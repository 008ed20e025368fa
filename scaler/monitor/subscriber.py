"""Internal: the monitor side of the scheduler's status feed: a ZeroMQ SUB socket that keeps only the newest
SchedulerStatus."""

from __future__ import annotations

import logging
import math
import time
from typing import Optional

import zmq

from scaler.io.curve_keys import CurvePeerKeys
from scaler.io.sockets import DEFAULT_KEEPALIVE, TcpKeepalive, check_resolvable, create_subscriber, validate_address
from scaler.monitor.model import no_status_message
from scaler.protocol import ProtocolError, SchedulerStatus, decode_frame
from scaler.rate_limit import LimitedLog

logger = logging.getLogger(__name__)


def check_timeout(timeout_seconds: object) -> float:
    """A monitor's --timeout: a positive, finite number of seconds."""
    if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, got {type(timeout_seconds).__name__}")
    if not (timeout_seconds > 0 and math.isfinite(timeout_seconds)):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout_seconds!r}")
    return float(timeout_seconds)


class StatusSubscriber:
    """Connects to a scheduler's monitor address and hands out the newest status it published.

    A monitor wants the present, not a backlog, so the socket is conflated: if the reader falls behind, older statuses
    are dropped by ZeroMQ itself. Rates stay right regardless, since each status carries the scheduler's clock.
    """

    def __init__(
        self,
        address: str,
        timeout_seconds: float,
        curve: Optional[CurvePeerKeys] = None,
        keepalive: TcpKeepalive = DEFAULT_KEEPALIVE,
    ) -> None:
        self.address = check_resolvable(validate_address(address))
        self.timeout_seconds = check_timeout(timeout_seconds)
        self.latest: Optional[SchedulerStatus] = None
        self.malformed = 0  # frames that did not decode
        self.ignored = 0  # frames that decoded but held no status: this may not be a monitor address
        self._connected_at = time.monotonic()
        self._received_at: Optional[float] = None
        self._warnings = LimitedLog(logger)
        self._context = zmq.Context()
        self._socket = create_subscriber(self._context, self.address, curve, conflate=True, keepalive=keepalive)

    def receive(self, wait_seconds: float = 0.0) -> Optional[SchedulerStatus]:
        """Wait up to `wait_seconds` for a status; returns the newest that arrived, or None when none did."""
        self._warnings.flush(time.monotonic())
        if not self._socket.poll(max(0, int(wait_seconds * 1000))):
            return None
        newest = None
        while True:
            try:
                frame = self._socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            try:
                messages = decode_frame(frame)
            except ProtocolError as error:
                self.malformed += 1
                self._warnings.log(
                    self.address, time.monotonic(), "ignored an undecodable frame from %s: %s", self.address, error
                )
                continue
            statuses = [message for message in messages if isinstance(message, SchedulerStatus)]
            if statuses:
                newest = statuses[-1]
            else:
                self.ignored += 1
        if newest is not None:
            self.latest = newest
            self._received_at = time.monotonic()
        return newest

    def silence_seconds(self) -> float:
        """Seconds since the last status, or since connecting when none came yet."""
        since = self._received_at if self._received_at is not None else self._connected_at
        return time.monotonic() - since

    def timed_out(self) -> bool:
        """True once nothing arrived for longer than the timeout: the scheduler is gone, or this is not its address."""
        return self.silence_seconds() > self.timeout_seconds

    def no_status_message(self) -> str:
        return no_status_message(self.address, self.silence_seconds(), self.timeout_seconds, self.latest is not None)

    def close(self) -> None:
        self._socket.close()
        self._context.term()

    def __enter__(self) -> StatusSubscriber:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
