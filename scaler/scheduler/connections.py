"""Internal: what ZeroMQ does to the scheduler's connections on its own, made visible in the log.

libzmq refuses failed CurveZMQ handshakes, and closes the connection of a peer that sends a frame over
--max-frame-bytes, without the scheduler ever reading a message; only the socket's monitor events tell, and of a
closed connection they say only that it closed: a frame over the limit gives the same event as a peer that died
(libzmq 4.3.5, checked with every event on). These watchers
turn those events into log lines, rate limited with the scheduler's other peer warnings (scaler.rate_limit), so a
peer retrying forever cannot flood the log. The same events count the connections for the open-files budget
(scaler.io.limits.ConnectionBudget), which stops new connections before the process runs out of descriptors.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Dict, Optional, cast

import zmq
from zmq.utils.monitor import recv_monitor_message

from scaler.io.limits import ConnectionBudget
from scaler.rate_limit import LimitedLog

_HANDSHAKE_FAILURES: Dict[int, str] = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "the handshake failed",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "the peer does not speak CurveZMQ with this scheduler's key",
}  # a refused key (EVENT_HANDSHAKE_FAILED_AUTH) is logged by the ZAP handler, with the key
_EXPLAIN_DELAY_SECONDS = 2.0  # a peer's goodbye and its TCP close reach the scheduler in either order
# Events read in one go before the event loop runs its other work: libzmq, out of descriptors, reports a failed accept
# each time it retries, as fast as it can, until the budget turns the waiting connections away.
_EVENTS_PER_TURN = 256


class ConnectionWatch:
    """Reads a socket's monitor events inside the event loop.

    Handshake failures are logged as refusals. A closed connection is logged only when no peer said goodbye for it:
    `goodbyes()` counts the peers that left properly. Why the others closed, ZeroMQ does not say, so the log does
    not guess."""

    def __init__(
        self,
        socket: zmq.Socket,
        what: str,
        watch_handshakes: bool,
        warnings: LimitedLog,
        goodbyes: Optional[Callable[[], int]] = None,
        counted: bool = False,
    ) -> None:
        """Without `goodbyes`, closed connections are not watched (monitors leave without a word); with `counted`,
        accepted and closed connections are counted in the budget `count_in` gives (once the socket is bound: the
        budget reads its listener; events wait in the monitor until the event loop reads them). `warnings` is shared
        with the scheduler's core, which sums up what it suppressed."""
        self._what = what
        self._warnings = warnings
        self._goodbyes = goodbyes
        self._budget: Optional[ConnectionBudget] = None
        events = (
            (zmq.EVENT_DISCONNECTED if goodbyes is not None or counted else 0)
            | (sum(_HANDSHAKE_FAILURES) if watch_handshakes else 0)
            | (zmq.EVENT_ACCEPTED | zmq.EVENT_ACCEPT_FAILED if counted else 0)
        )
        self._events = socket.get_monitor_socket(events)
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.failures: Dict[int, int] = {}
        self.disconnects = 0
        self.unexplained = 0  # closes reported as unexplained so far

    def count_in(self, budget: ConnectionBudget) -> None:
        self._budget = budget

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self._events.fileno(), self.read_events)
        self.read_events()

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.remove_reader(self._events.fileno())
        self._events.close(linger=0)

    def read_events(self) -> None:
        events = self._events
        budget = self._budget
        for _ in range(_EVENTS_PER_TURN):
            if not cast(int, events.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                return
            message = recv_monitor_message(events, zmq.NOBLOCK)
            event = message["event"]
            if event == zmq.EVENT_ACCEPTED:
                if budget is not None:
                    budget.accepted()
                continue
            if event == zmq.EVENT_ACCEPT_FAILED:
                if budget is not None:
                    budget.accept_failed(message["value"])
                continue
            if event == zmq.EVENT_DISCONNECTED:
                if budget is not None:
                    budget.disconnected()
                if self._goodbyes is not None:
                    self.disconnects += 1
                    self._loop.call_later(_EXPLAIN_DELAY_SECONDS, self._explain_disconnects)
                continue
            count = self.failures.get(event, 0) + 1
            self.failures[event] = count
            self._warnings.log(
                (self._what, event),
                time.monotonic(),
                "refused a connection to the %s: %s (%d refusal(s) of this kind so far)",
                self._what,
                _HANDSHAKE_FAILURES.get(event, f"handshake event {event}"),
                count,
            )
        # more waiting: read on after the loop's other work (ZeroMQ's descriptor would not wake the loop for these)
        self._loop.call_soon(self.read_events)

    def _explain_disconnects(self) -> None:
        assert self._goodbyes is not None
        unexplained = self.disconnects - self._goodbyes()
        if unexplained <= self.unexplained:
            return
        self.unexplained = unexplained
        self._warnings.log(
            (self._what, "closed"),
            time.monotonic(),
            "a connection to the %s closed without a goodbye (%d so far; ZeroMQ does not say why): a client or"
            " worker among them is removed when its heartbeats stop",
            self._what,
            unexplained,
        )
