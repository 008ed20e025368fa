"""Reading the scheduler's SchedulerStatus from its monitor address, as scaler_top does, for end-to-end checks."""

from __future__ import annotations

import time
from typing import Callable, Dict, Optional

import zmq

from scaler.io.curve_keys import CurvePeerKeys
from scaler.io.sockets import create_subscriber
from scaler.protocol import SchedulerStatus, decode_frame


def counters(entries: list) -> Dict[str, int]:
    return {entry.name: entry.value for entry in entries}


def wait_for_status(
    monitor_address: str,
    condition: Callable[[SchedulerStatus], bool],
    timeout: float = 20.0,
    curve: Optional[CurvePeerKeys] = None,
) -> SchedulerStatus:
    """The first status published on `monitor_address` that satisfies `condition`; AssertionError after `timeout`.
    `curve`: an authorized key pair and the scheduler's public key, for a scheduler with CurveZMQ."""
    context = zmq.Context.instance()
    socket = create_subscriber(context, monitor_address, curve)
    deadline = time.monotonic() + timeout
    last = None
    try:
        while time.monotonic() < deadline:
            if not socket.poll(int(max(0.0, deadline - time.monotonic()) * 1000)):
                break
            (last,) = [m for m in decode_frame(socket.recv()) if isinstance(m, SchedulerStatus)]
            if condition(last):
                return last
    finally:
        socket.close()
    raise AssertionError(f"no status satisfied the condition within {timeout}s; last one: {last!r}")
