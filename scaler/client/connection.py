"""Internal: a client's connection to the scheduler: the shell around the client's core (core.py).

It makes the core and the IO thread (io_thread.py), which owns the sockets; waits, in the creating thread, for the
handshake, and in the closing thread for the answer to a disconnect; and carries out what the core decides (fetch a
result from its holder, say Hello again, follow a registration's heartbeat, frame limit and relay, serve uploads,
stop). Several Clients may share one connection (clients unpickled in a worker process).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import os
import socket
import threading
import time
import weakref
from typing import Any, List, Optional

from scaler.client.core import (
    CADENCE,
    DATA_KEYS,
    DISCONNECTED,
    FETCH,
    HANDSHAKE,
    REGISTER_AGAIN,
    REGISTERED,
    STOP,
    UPLOAD,
    ClientCore,
)
from scaler.client.io_thread import IOThread
from scaler.client.objects import ContentIds, Outgoing
from scaler.config import DEFAULT_CLIENT_DISCONNECT_TIMEOUT_SECONDS
from scaler.errors import AuthenticationError, ProtocolVersionError
from scaler.io.curve_keys import CurvePeerKeys, raw_key
from scaler.io.sockets import DEFAULT_KEEPALIVE, TcpKeepalive, check_resolvable, make_identity
from scaler.protocol import DisconnectReply, HelloReply, encode

logger = logging.getLogger(__name__)


class Connection:
    """One client identity at the scheduler; raises TimeoutError or ProtocolVersionError if the handshake fails."""

    def __init__(
        self,
        address: str,
        timeout_seconds: float,
        curve: Optional[CurvePeerKeys] = None,
        keepalive: TcpKeepalive = DEFAULT_KEEPALIVE,
        reconnect_seconds: Optional[float] = None,
    ) -> None:
        self.address = check_resolvable(address)  # a host that does not exist fails now, not at the timeout
        # How long to wait for a lost scheduler to come back (0: do not wait); by default the client's timeout_seconds.
        reconnect = timeout_seconds if reconnect_seconds is None else reconnect_seconds
        # The one place that decides how long no scheduler may be heard (killed and not back, host lost, network cut)
        # before every pending future fails with SchedulerGoneError, a TimeoutError: the reconnect window, or
        # timeout_seconds when recovery is off; never the scheduler's own client timeout.
        gone_after_seconds = reconnect or timeout_seconds
        self.identity = make_identity("C")
        self.content_ids = ContentIds(os.urandom(32))
        self.pid = os.getpid()
        self.core = core = ClientCore(
            self.identity,
            self.address,
            socket.gethostname(),
            self.pid,
            os.urandom(8),
            reconnect,
            self._wake,
            gone_after_seconds,
        )
        self.check_open = core.check_open
        self.new_task_id = core.new_task_id
        self.task_number = core.task_number
        self.holds_object = core.holds_object
        self.own_actor = core.own_actor
        self.release_actor = core.release_actor
        self.actor_calls = core.actor_calls
        self.cancel_tasks = core.cancel_tasks
        self._hello_reply: concurrent.futures.Future = concurrent.futures.Future()
        self._disconnect_reply: Optional[concurrent.futures.Future] = None
        self._disconnect_lock = threading.Lock()
        self._io = IOThread(address, self.identity, self, curve, keepalive)
        self._io.start()  # only now: what it calls uses self._io
        self._handshake(timeout_seconds)
        _LIVE_CONNECTIONS.add(self)

    # ---- what the client reads ---------------------------------------------------------------------------------------

    @property
    def closed_reason(self) -> Optional[str]:
        return self.core.closed_reason

    @closed_reason.setter
    def closed_reason(self, reason: str) -> None:
        self.core.closed_reason = reason

    @property
    def forwards_task_output(self) -> bool:
        return self.core.forwards_task_output

    @property
    def task_policies(self) -> bool:
        return self.core.task_policies

    @property
    def actors(self) -> bool:
        return self.core.actors

    @property
    def max_frame_bytes(self) -> int:
        """The scheduler's frame limit, as its HelloReply said."""
        return self.core.max_frame_bytes

    @property
    def lag_us(self) -> int:
        """The last heartbeat round trip to the scheduler."""
        return self.core.lag_us

    def cancel_task(self, task_id: bytes) -> None:
        """A future's cancel(): tell the scheduler."""
        self.core.cancel_tasks([task_id])

    def clear(self) -> None:
        self.core.clear()

    # ---- handshake and shutdown --------------------------------------------------------------------------------------

    def _handshake(self, timeout_seconds: float) -> None:
        try:
            reply: HelloReply = self._hello_reply.result(timeout_seconds)
        except concurrent.futures.TimeoutError:
            self._abandon("no answer to the handshake")
            raise TimeoutError(
                f"no answer from the scheduler at {self.address} within {timeout_seconds:.1f}s: "
                "is it running and reachable from here, and, with CurveZMQ, does it accept this client's key?"
            ) from None
        except BaseException:
            self._abandon("handshake failed")
            raise
        if not reply.accepted:
            self._abandon("refused by the scheduler")
            raise ProtocolVersionError(reply.reason or "the scheduler refused this client")

    def _abandon(self, reason: str) -> None:
        self._terminate(reason)
        self._io.stop()

    def _terminate(self, reason: str, error: Optional[BaseException] = None) -> None:
        self.core.terminate(reason, error)
        _LIVE_CONNECTIONS.discard(self)

    def close(self, shutdown_cluster: bool, timeout_seconds: float = DEFAULT_CLIENT_DISCONNECT_TIMEOUT_SECONDS) -> None:
        """Send ClientDisconnect and wait up to `timeout_seconds` for the answer (0: do not wait).

        A plain disconnect always closes. A shutdown raises ValueError (refused) or TimeoutError (no answer) and then
        leaves the connection open.
        """
        with self._disconnect_lock:
            if self.core.closed_reason is not None:
                if shutdown_cluster:
                    self.check_open()
                self._io.stop()
                return
            if self._io.is_current():  # a done callback: the IO thread cannot wait for its own answer
                if shutdown_cluster:
                    raise RuntimeError("shutdown() cannot be called from a future's done callback")
                timeout_seconds = 0
            elif not shutdown_cluster and not self.core.registered:
                timeout_seconds = 0  # waiting for a scheduler to come back: nobody would answer
            waiter: concurrent.futures.Future = concurrent.futures.Future()
            self._disconnect_reply = waiter
            self.core.disconnect(shutdown_cluster)
            try:
                reply: Optional[DisconnectReply] = waiter.result(timeout_seconds) if timeout_seconds else None
            except concurrent.futures.TimeoutError:
                reply = None
            finally:
                self._disconnect_reply = None
                self.core.disconnect_answered()
            if shutdown_cluster:
                if reply is None:
                    raise TimeoutError(
                        f"the scheduler did not answer shutdown() within {timeout_seconds:.1f}s; "
                        "the client is still connected"
                    )
                if not reply.accepted:
                    raise ValueError(f"shutdown refused: {reply.reason or 'no reason given'}")
            elif reply is None and timeout_seconds:
                logger.warning(
                    "the scheduler did not answer disconnect() within %.1fs; closing anyway", timeout_seconds
                )
            self._terminate("cluster shut down" if shutdown_cluster else "disconnected")
            self._io.stop()

    # ---- what the IO thread calls (io_thread.IOOwner) ----------------------------------------------------------------

    def _wake(self) -> None:
        self._io.wake()

    def hello(self) -> bytes:
        self.core.data_address = self._io.data_address
        return encode(self.core.hello())

    def take_outgoing(self) -> List[Outgoing]:
        return self.core.take_outgoing()

    def receive(self, messages: List[Any], now: float) -> None:
        core = self.core
        core.receive(messages, now)
        if core.commands:
            self._carry_out()

    def tick(self, now: float) -> float:
        deadline = self.core.tick(now)
        if self.core.commands:
            self._carry_out()
        return deadline

    def fetched(self, object_id: bytes, payload: Any, timed_out: bool) -> None:
        self.core.fetched(object_id, payload, timed_out)

    def not_sent(self, message: Any, error: Exception) -> None:
        self.core.not_sent(message, error)

    def lost(self, reason: str) -> None:
        self.core.lost(reason)
        self._carry_out()

    def silent(self, reason: str) -> None:
        self.core.silent(reason)
        _LIVE_CONNECTIONS.discard(self)

    def crashed(self, error: Exception) -> None:
        self.core.crashed(error)
        _LIVE_CONNECTIONS.discard(self)
        if not self._hello_reply.done():
            self._hello_reply.set_exception(error)

    def refused(self, reason: str) -> None:
        """A refused handshake is final: ZeroMQ never tries that connection again. Before the HelloReply the client
        gives up at once instead of at its timeout; after it (a scheduler restarted with other keys), its tasks fail."""
        error = AuthenticationError(f"{reason} (scheduler at {self.address})")
        if not self._hello_reply.done():
            self._hello_reply.set_exception(error)
        elif self.core.closed_reason is None:
            logger.warning("%s: failing unfinished tasks", error)
            self.core.terminate(str(error), error)
            _LIVE_CONNECTIONS.discard(self)
        self._io.request_stop()

    def _carry_out(self) -> None:
        """The core's commands, in order (IO thread)."""
        core, io = self.core, self._io
        commands = core.commands
        core.commands = []
        for command in commands:
            kind = command[0]
            if kind == FETCH:
                _, object_id, address, key = command
                data = io.data
                assert data is not None  # made by the IO thread, which runs this
                now = time.monotonic()
                if data.reachable(address, now, key):
                    data.fetch(address, object_id, now, key)
                else:
                    core.fetch_unreachable(object_id)
            elif kind == REGISTERED:
                reply = command[1]
                io.registered = True
                io.use_frame_limit(core.max_frame_bytes)
                # an older scheduler is put large objects whole; with CurveZMQ, so is one that sent no DataKeys
                io.holds_on_clients = reply.holds_on_clients and (io.curve is None or io.data_keys)
                io.follow_relay(reply.relay_port)
                io.drops.registered(time.monotonic())
            elif kind == HANDSHAKE:
                if not self._hello_reply.done():
                    self._hello_reply.set_result(command[1])
            elif kind == CADENCE:
                io.heartbeat_seconds = command[1]
            elif kind == DATA_KEYS:
                if io.accept_data_keys(command[1]):
                    assert io.curve is not None  # accept_data_keys says so
                    core.data_key(raw_key(io.curve.public_key))
            elif kind == UPLOAD:
                for object_id in command[1]:
                    core.upload(object_id, io.served.get(object_id))
            elif kind == DISCONNECTED:
                waiter = self._disconnect_reply
                if waiter is not None and not waiter.done():
                    waiter.set_result(command[1])
            elif kind == REGISTER_AGAIN:
                io.register_again()
            elif kind == STOP:
                _LIVE_CONNECTIONS.discard(self)
                io.request_stop()


_LIVE_CONNECTIONS: weakref.WeakSet[Connection] = weakref.WeakSet()


@atexit.register
def _disconnect_at_exit() -> None:
    """Tell the scheduler we are gone, so it cancels our tasks now rather than after the client timeout.

    Without waiting for its answer: an exiting process must not hang on a scheduler that is gone.
    """
    for connection in list(_LIVE_CONNECTIONS):
        if connection.pid != os.getpid():
            continue  # inherited through fork: its IO thread does not exist here
        try:
            connection.close(shutdown_cluster=False, timeout_seconds=0)
        except Exception:
            logger.debug("disconnect at exit failed", exc_info=True)


def _close_after_fork() -> None:
    """A forked child has the parent's connections but not their IO threads: using one must fail, not hang."""
    for connection in list(_LIVE_CONNECTIONS):
        # No lock: one may have been held by a parent thread at the fork, and would never be released here.
        connection.closed_reason = "inherited through fork: create a new Client in this process"
    _LIVE_CONNECTIONS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_after_fork)
