"""The scheduler's monitor-event reader under a flood (libzmq, out of descriptors, reports a failed accept each time it
retries): it reads a bounded number per turn and lets the event loop run its other work in between. No sockets: a
stand-in monitor socket holds the events."""

from __future__ import annotations

import errno
import logging
import struct
from typing import Callable, List

import zmq

from scaler.io.limits import ConnectionBudget, OpenFiles
from scaler.rate_limit import LimitedLog
from scaler.scheduler.connections import _EVENTS_PER_TURN, ConnectionWatch


class StandInMonitor:
    def __init__(self, messages: List[List[bytes]]) -> None:
        self.messages = messages

    def get_monitor_socket(self, events: int) -> StandInMonitor:
        return self

    def getsockopt(self, option: int) -> int:
        assert option == zmq.EVENTS
        return zmq.POLLIN if self.messages else 0

    def recv_multipart(self, flags: int = 0) -> List[bytes]:
        return self.messages.pop(0)


class StandInLoop:
    def __init__(self) -> None:
        self.soon: List[Callable[[], None]] = []

    def call_soon(self, callback: Callable[[], None]) -> None:
        self.soon.append(callback)


def test_a_flood_of_failed_accepts_is_read_a_bounded_number_per_turn_of_the_event_loop() -> None:
    flood = 2 * _EVENTS_PER_TURN + 10
    monitor = StandInMonitor(
        [[struct.pack("=hi", zmq.EVENT_ACCEPT_FAILED, errno.EMFILE), b"tcp://127.0.0.1:1"] for _ in range(flood)]
    )
    budget = ConnectionBudget("scheduler address", OpenFiles(128, 128, 128), 16, None)
    watch = ConnectionWatch(monitor, "scheduler address", False, LimitedLog(logging.getLogger("test")), counted=True)
    watch.count_in(budget)
    loop = StandInLoop()
    watch._loop = loop  # type: ignore[assignment]

    read_per_turn = []
    turn = watch.read_events  # the loop's reader callback, once the monitor's descriptor woke it
    while turn is not None:
        before = budget.refused_while_full
        turn()
        read_per_turn.append(budget.refused_while_full - before)
        assert len(loop.soon) <= 1, "one more read scheduled at a time"
        turn = loop.soon.pop() if loop.soon else None
    assert read_per_turn == [_EVENTS_PER_TURN, _EVENTS_PER_TURN, 10] and not monitor.messages
