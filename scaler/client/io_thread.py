"""Internal: the one thread that touches a client's DEALER: it sends queued messages, reads incoming ones, and keeps the
connection alive.

ZeroMQ sockets are not thread safe, so user threads never touch the DEALER: they append to the connection's queue
and, when it says so (send_queue.py: not during a burst), call wake(), which writes a byte to a socket pair polled
together with the DEALER. A turn that took messages from the queue polls at most LOOK_AGAIN_MS next. The loop
packs the queue into frames of DEFAULT_TASKS_PER_FRAME messages (Encoded ones among them; plain bytes, already
encoded, travel as frames of their own, and so do submit's runs of encoded tasks), and drains incoming frames without
blocking. What it reads and sees goes to its owner (IOOwner: the connection), which hands it to the client's core.

It also tells when the scheduler is lost. The DEALER's monitor reports a closed connection at once (a scheduler killed
or restarted: ZeroMQ reconnects the socket by itself); the connection then decides (its core's `lost`), and to wait for
a scheduler it calls register_again(). Until it takes a HelloReply (`registered = True`) the queue is held, not sent,
and no heartbeat goes out; the Hello sent at once waits in the socket and leaves when ZeroMQ connects again, and is sent
again while connected and unanswered. Its owner's `tick` says by when the scheduler must be heard from (the core
decides what a silence means).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any, Dict, List, Optional, Protocol, Tuple, cast

import zmq
from zmq.utils.monitor import recv_monitor_message

from scaler.client.objects import LargeObject, Outgoing
from scaler.client.send_queue import LOOK_AGAIN_MS
from scaler.config import (
    DEFAULT_CLIENT_DISCONNECT_TIMEOUT_SECONDS,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_TASKS_PER_FRAME,
    object_chunk_bytes,
)
from scaler.drop_streak import DropStreak
from scaler.errors import FrameTooLargeError
from scaler.io.curve import ZapResponder, refusal_log, z85_keys
from scaler.io.curve_keys import CurvePeerKeys
from scaler.io.data_fetch import DataFetcher
from scaler.io.data_server import DataServer, data_host
from scaler.io.limits import raise_open_files_limit
from scaler.io.local_data import LocalDataServer
from scaler.io.relay_link import RelayLink, follow_relay, relay_address
from scaler.io.sockets import DEFAULT_KEEPALIVE, HANDSHAKE_REFUSALS, TcpKeepalive, create_dealer, refusal_reason
from scaler.protocol import ClientHeartbeat, Encoded, ObjectDelete, ProtocolError, decode_frame, encode, encode_many

logger = logging.getLogger(__name__)

_FRAMES_PER_TURN = 1024  # incoming frames handled before the outgoing queue is looked at again
_IDLE_POLL_MS = 1000  # the loop's longest sleep: timers and the stop flag are looked at least this often
_COPY_THRESHOLD = 64 * 1024  # ZeroMQ copies smaller frames; larger ones are sent zero-copy
_CLOSE_LINGER_MS = 100  # a last ClientDisconnect gets this long to leave; an unreachable scheduler costs no more
_HELLO_RETRY_SECONDS = 2.0  # while connected and not registered, Hello again this often


class IOOwner(Protocol):
    """What the IO thread hands on: the connection, which passes it to the client's core."""

    def hello(self) -> bytes: ...  # the Hello to send now, encoded

    def take_outgoing(self) -> List[Outgoing]: ...  # everything queued, to send

    def receive(self, messages: List[Any], now: float) -> None: ...  # a frame's messages, in order

    def tick(self, now: float) -> float: ...  # when the scheduler must be heard from next (0: not timed)

    def fetched(self, object_id: bytes, payload: Any, timed_out: bool) -> None: ...  # a fetch from a holder ended

    def not_sent(self, message: Any, error: Exception) -> None: ...  # did not encode, or over the frame limit

    def lost(self, reason: str) -> None: ...  # the connection to the scheduler closed

    def silent(self, reason: str) -> None: ...  # the same frame keeps dropping the connection: it is over

    def crashed(self, error: Exception) -> None: ...  # this thread failed

    def refused(self, reason: str) -> None: ...  # the CurveZMQ handshake failed


class IOThread:
    def __init__(
        self,
        address: str,
        identity: bytes,
        owner: IOOwner,
        curve: Optional[CurvePeerKeys] = None,
        keepalive: TcpKeepalive = DEFAULT_KEEPALIVE,
    ) -> None:
        self.heartbeat_seconds = 0.0  # 0 until the handshake says otherwise
        # True while the scheduler knows this client; set by the connection (HelloReply, a lost scheduler), read here
        self.registered = False
        self.max_frame_bytes = DEFAULT_MAX_FRAME_BYTES  # the scheduler's, from its HelloReply
        self.drops = DropStreak()  # told of each registration by the connection
        self.data: Optional[DataFetcher] = None  # fetches from holders (scaler/io/data_fetch.py), made by the loop
        # Large objects this client keeps and serves to the workers that need them, by id (the loop's only), at its
        # data address: made by the loop when the scheduler is reached over TCP, and used once the scheduler says it
        # lets clients keep their objects (holds_on_clients, set by the connection). With CurveZMQ, also once the
        # scheduler said which keys may fetch here and was told ours (DataKeys: data_keys).
        self.served: Dict[bytes, Any] = {}
        self.data_address = ""
        self.holds_on_clients = False
        self.data_keys = False
        self.curve = curve
        self._zap: Optional[ZapResponder] = None  # with CurveZMQ: who may connect to the data address
        self._data_server: Optional[DataServer] = None
        self._local_data: Optional[LocalDataServer] = None
        self._relay_link: Optional[RelayLink] = None  # to the data relay, for workers that cannot reach this client
        self._poller: Optional[zmq.Poller] = None
        self._address = address
        self._owner = owner
        self._stopping = False
        self._process = _this_process()
        self._context = zmq.Context(io_threads=1)
        # The socket's own events: a connection that closed (the scheduler died or restarted) or completed (say Hello
        # again), and, with CurveZMQ, a refused key, which shows nowhere else.
        events = (
            zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED | (HANDSHAKE_REFUSALS if curve is not None else 0)
        )
        try:
            self._socket, self._events = create_dealer(self._context, address, identity, events, curve, keepalive)
        except zmq.ZMQError as error:
            self._context.destroy(linger=0)
            raise ValueError(f"cannot connect to {address!r}: {error}") from None
        self._next_hello = 0.0
        self._connected = True  # the socket's connection is up, as far as its events told
        self._gone = False  # its handshake failed: it will never connect again (_send)
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="scaler-client-io", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        try:
            self._wake_writer.send(b"\0")
        except OSError:
            pass  # the buffer is full, so a wake-up is pending anyway; or the loop has exited

    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self) -> None:
        """Let the loop send what is queued, close the socket and exit; wait for it unless called from it."""
        self._stopping = True
        self.wake()
        if not self.is_current():
            self._thread.join(DEFAULT_CLIENT_DISCONNECT_TIMEOUT_SECONDS)

    def request_stop(self) -> None:
        """From a handler: the loop exits after the current turn."""
        self._stopping = True

    # ---- the loop ----------------------------------------------------------------------------------------------------

    def _run(self) -> None:
        dealer = self._socket
        try:
            poller = self._poller = zmq.Poller()
            self._open_data_address(poller)  # before the Hello, which announces it
            self._send_hello(time.monotonic())
            poller.register(dealer, zmq.POLLIN)
            wake_fd = self._wake_reader.fileno()  # pyzmq reports plain sockets by their fd
            poller.register(wake_fd, zmq.POLLIN)
            events = self._events
            poller.register(events, zmq.POLLIN)
            data = self.data = DataFetcher(self._context, poller, self.curve)
            next_heartbeat = 0.0
            took = False  # the last turn took messages from the queue
            while not self._stopping:
                now = time.monotonic()
                timeout_ms = _IDLE_POLL_MS
                wake_at = self._owner.tick(now)  # when the silence would be too long
                if self._stopping:
                    break
                if wake_at:
                    if not self.registered:
                        if self._connected:  # a Hello sent while disconnected waits in the socket: one is enough
                            if now >= self._next_hello:
                                self._send_hello(now)
                            wake_at = min(wake_at, self._next_hello)
                    elif self.heartbeat_seconds:
                        if now >= next_heartbeat:
                            next_heartbeat = now + self.heartbeat_seconds
                            self._send_heartbeat(now)
                        wake_at = min(wake_at, next_heartbeat)
                    timeout_ms = min(timeout_ms, int((wake_at - now) * 1000) + 1)
                if took:  # the queue promised a look within LOOK_AGAIN_MS: more of a burst wakes nobody (send_queue.py)
                    timeout_ms = min(timeout_ms, LOOK_AGAIN_MS)
                fetch_deadline = data.next_deadline()
                if fetch_deadline is not None:
                    timeout_ms = max(0, min(timeout_ms, int((fetch_deadline - now) * 1000) + 1))
                ready = dict(poller.poll(timeout_ms))
                if events in ready:  # first: a closed connection decides what the frames behind it mean
                    self._read_events()
                if wake_fd in ready:
                    self._drain_wake()
                took = self.registered and self._flush()
                if dealer in ready:
                    self._receive()
                if fetch_deadline is not None or data.polled(ready):  # answers, their end, or a holder gone
                    self._receive_data(data, ready)
                if self._zap is not None and self._zap.socket in ready:
                    self._zap.answer_pending(time.monotonic())
                if self._data_server is not None:
                    if self._data_server.sock in ready:
                        self._data_server.serve(self.served.get)
                    if self._local_data is not None:
                        self._local_data.on_events(ready, self.served.get)
                    if self._relay_link is not None and self._relay_link.sock in ready:
                        self._relay_link.serve(self.served.get)
            if self.registered:
                self._flush()
        except Exception as error:  # a bug here must not leave futures waiting forever
            logger.exception("client IO thread failed")
            self._owner.crashed(error)
        finally:
            if self.data is not None:
                self.data.close()
            if self._local_data is not None:
                self._local_data.close()
            if self._data_server is not None:
                self._data_server.close()
            if self._relay_link is not None:
                self._relay_link.close()
            if self._zap is not None:
                self._zap.close()
            self.served.clear()
            dealer.disable_monitor()
            self._events.close(linger=0)
            dealer.close(linger=_CLOSE_LINGER_MS)
            self._wake_reader.close()
            self._wake_writer.close()
            self._context.term()

    def follow_relay(self, port: int) -> None:
        """From the IO thread, on each registration with a scheduler: fetch through its data relay (HelloReply
        .relayPort; 0: none) what holders out of reach hold, and serve through it what this client keeps."""
        address = relay_address(self._address, port) if port else None
        if self.data is not None:
            self.data.relay = address
            self.data.max_frame_bytes = self.max_frame_bytes
        assert self._poller is not None  # made by the loop, which runs this
        server = self._data_server
        self._relay_link = follow_relay(
            self._relay_link,
            address,
            self._context,
            self._poller,
            server.address if server is not None else None,
            self.max_frame_bytes,
            self.curve,
        )

    def _open_data_address(self, poller: zmq.Poller) -> None:
        """Where this client serves the large objects it keeps: on the interface it reaches the scheduler from, and
        to readers on this host by descriptor. None with an ipc:// scheduler: objects then go through the scheduler.
        With CurveZMQ, it accepts nobody until the scheduler said which keys (accept_data_keys)."""
        host = data_host(self._address)
        if host is None:
            return
        if self.curve is not None:  # bound first: without it, libzmq would let any key in
            self._zap = ZapResponder(self._context, warnings=refusal_log())
            poller.register(self._zap.socket, zmq.POLLIN)
        try:
            server = DataServer(self._context, host, self.curve, self._zap)
        except zmq.ZMQError as error:
            logger.info("no data address on %s (%s): large objects go through the scheduler", host, error)
            return
        poller.register(server.sock, zmq.POLLIN)
        self._data_server = server
        self.data_address = server.address
        raise_open_files_limit()  # a kept object holds a descriptor of its shared memory
        try:
            self._local_data = LocalDataServer(server.address, poller, same_user_only=self.curve is not None)
        except OSError:  # not Linux: readers on this host fetch through the data address
            pass

    def use_frame_limit(self, max_frame_bytes: int) -> None:
        """From the IO thread (the HelloReply): the scheduler's frame limit, which data sockets keep to as well."""
        self.max_frame_bytes = max_frame_bytes
        if self.data is not None:
            self.data.max_frame_bytes = max_frame_bytes
        if self._data_server is not None:
            self._data_server.chunk_bytes = object_chunk_bytes(max_frame_bytes)

    def accept_data_keys(self, keys: List[bytes]) -> bool:
        """From the IO thread (DataKeys): let peers with these public keys fetch here; False if this client serves no
        data under CurveZMQ (then it has nothing to answer)."""
        if self._zap is None or self._data_server is None:
            return False
        self._zap.authorized_keys = z85_keys(keys)
        self.data_keys = True
        return True

    def _receive_data(self, data: DataFetcher, ready: Dict[Any, int]) -> None:
        """What holders sent, and the fetches that heard nothing for too long."""
        fetched = self._owner.fetched
        for object_id, payload, timed_out in data.ready(ready, time.monotonic()):
            fetched(object_id, payload, timed_out)

    def register_again(self) -> None:
        """From the IO thread (a handler, an event): the scheduler was lost; Hello until one answers."""
        self.registered = False
        self.data_keys = False  # the next scheduler says its keys again, before its HelloReply, or nobody fetches here
        self._send_hello(time.monotonic())

    def _send_hello(self, now: float) -> None:
        self._next_hello = now + _HELLO_RETRY_SECONDS
        self._send(self._owner.hello())

    def _read_events(self) -> None:
        events = self._events
        while cast(int, events.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
            message = recv_monitor_message(events, zmq.NOBLOCK)
            event = message["event"]
            logger.debug("connection to %s: event %#x, value %s", self._address, event, message["value"])
            if event == zmq.EVENT_DISCONNECTED:
                self._connected = False
                stop = self.drops.dropped(time.monotonic(), self._address)
                if stop is not None:
                    self._owner.silent(stop)
                    self._stopping = True
                    return
                if self.registered:
                    self._owner.lost(f"the connection to the scheduler at {self._address} closed")
            elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._connected = True
                # the waiting Hello leaves now and is answered at once: another only if it was not
                self._next_hello = time.monotonic() + _HELLO_RETRY_SECONDS / 2
            elif event & HANDSHAKE_REFUSALS:  # asked for with CurveZMQ only
                self._owner.refused(refusal_reason(event, "client", "curve_server_key_file"))
                return

    def _drain_wake(self) -> None:
        try:
            while self._wake_reader.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _flush(self) -> bool:
        """Send what is queued; whether there was anything."""
        items = self._owner.take_outgoing()
        if not items:
            return False
        batch: List[Any] = []
        item: Any
        messages = 0  # items of the batch still to encode; Encoded ones (submit's tasks) are joined as they are
        for item in items:
            kind = item.__class__
            if kind is bytes or kind is list or kind is LargeObject:
                if batch:
                    self._send_batch(batch, messages)
                    batch = []
                    messages = 0
                if kind is list:  # a run of submitted tasks, encoded (send_queue.py): joined here, not under the lock
                    for start in range(0, len(item), DEFAULT_TASKS_PER_FRAME):
                        self._send_joined(item[start : start + DEFAULT_TASKS_PER_FRAME])
                elif kind is LargeObject:
                    if self.holds_on_clients and self.data_address and not item.upload:
                        self.served[item.object_id] = item.shared()  # served from now on; the scheduler gets its size
                        self._send_frame(item.kept())
                        continue
                    for frame in item.frames(object_chunk_bytes(self.max_frame_bytes)):
                        self._send_frame(frame)
                else:
                    self._send_frame(item)
                continue
            if kind is ObjectDelete and self.served:  # objects this client kept are not served any more
                for object_id in item.object_ids:
                    self.served.pop(object_id, None)
            batch.append(item)
            if kind is not Encoded:
                messages += 1
            if len(batch) >= DEFAULT_TASKS_PER_FRAME:
                self._send_batch(batch, messages)
                batch = []
                messages = 0
        if batch:
            self._send_batch(batch, messages)
        return True

    def _send_batch(self, batch: List[Any], messages: int) -> None:
        """One frame of a batch of which `messages` items are messages to encode; halves of it if that is over the
        scheduler's frame limit."""
        frame = self._encode_batch(batch) if messages else b"".join(batch)
        if len(frame) > self.max_frame_bytes and len(batch) > 1:
            for half in (batch[: len(batch) // 2], batch[len(batch) // 2 :]):
                self._send_batch(half, sum(1 for item in half if item.__class__ is not Encoded))
            return
        self._send_frame(frame)

    def _send_joined(self, parts: List[bytes]) -> None:
        """Encoded tasks joined into one frame, or into halves of it if that is over the scheduler's frame limit."""
        frame = b"".join(parts)
        if len(frame) > self.max_frame_bytes and len(parts) > 1:
            self._send_joined(parts[: len(parts) // 2])
            self._send_joined(parts[len(parts) // 2 :])
            return
        self._send_frame(frame)

    def _send_frame(self, frame: bytes) -> None:
        """Send a frame, unless it is over the scheduler's frame limit: ZeroMQ would then drop the connection, and
        the frame would go again with every reconnection. Its tasks fail instead, saying why."""
        if len(frame) <= self.max_frame_bytes:
            if self._send(frame, len(frame) < _COPY_THRESHOLD):
                self.drops.sent(len(frame))
            return
        error = FrameTooLargeError(
            f"a message of {len(frame)} bytes is over the scheduler's frame limit of {self.max_frame_bytes} bytes"
            " (scaler_scheduler --max-frame-bytes): it was not sent. Pass large values as arguments or with"
            " send_object (they travel in chunks under the limit), or raise the limit"
        )
        logger.error("%s", error)
        try:
            refused = decode_frame(frame)
        except ProtocolError:
            refused = []
        for message in refused:
            self._owner.not_sent(message, error)

    def _send(self, frame: bytes, copy: bool = True) -> bool:
        """Send on the scheduler's connection without ever blocking. ZeroMQ keeps what is sent while the connection is
        down, except once its handshake failed (a refused key, a peer that is no scheduler): it never connects again,
        what is sent as it takes the route down is lost, and then a blocking send would wait forever. The socket's
        events already say why."""
        if self._gone:
            return False
        try:
            self._socket.send(frame, zmq.NOBLOCK, copy=copy)
            return True
        except zmq.Again:
            self._gone = True
        registered = self.registered
        self._read_events()  # a refused key ends the client, saying so
        if registered and not self._stopping:
            self._owner.silent(f"the connection to the scheduler at {self._address} failed its handshake: it is over")
            self._stopping = True
        return False

    def _encode_batch(self, batch: List[Any]) -> bytes:
        try:
            return encode_many(batch)
        except Exception:
            # Only a bug can make our own messages fail to encode: drop the bad ones and send the rest.
            parts = []
            for message in batch:
                try:
                    parts.append(encode(message))
                except Exception as error:
                    logger.exception("dropped a message that does not encode: %r", message)
                    self._owner.not_sent(message, error)
            return b"".join(parts)

    def _receive(self) -> None:
        recv = self._socket.recv
        receive = self._owner.receive
        for _ in range(_FRAMES_PER_TURN):
            try:
                frame = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            now = time.monotonic()
            try:
                messages = decode_frame(frame)
            except ProtocolError as error:
                logger.warning("dropped a malformed frame from the scheduler: %s", error)
                messages = []  # heard all the same
            receive(messages, now)

    # ---- liveness ----------------------------------------------------------------------------------------------------

    def _send_heartbeat(self, now: float) -> None:
        cpu, rss = _process_usage(self._process)
        interval_ms = round(self.heartbeat_seconds * 1000)  # so the scheduler knows when to expect the next one
        self._send(encode(ClientHeartbeat(sent_at_us=int(now * 1_000_000), cpu=cpu, rss=rss, interval_ms=interval_ms)))


def _this_process() -> Optional[Any]:
    try:
        import psutil

        return psutil.Process()
    except Exception:  # psutil missing or unusable: heartbeats carry zeros
        return None


def _process_usage(process: Optional[Any]) -> Tuple[float, int]:
    if process is None:
        return 0.0, 0
    try:
        return float(process.cpu_percent(None)), int(process.memory_info().rss)
    except Exception:
        return 0.0, 0
