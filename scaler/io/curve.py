"""Internal: curveZMQ: authenticated, encrypted connections between the scheduler and its clients, workers and monitors.

Keys are pyzmq's certificate files, written by `scaler_keygen`: `NAME.key` holds the public key (safe to copy
around), `NAME.key_secret` the key pair (keep it private). They are read, without zmq, by scaler/io/curve_keys.py; this
module puts them on sockets, for the shells and CLIs. The scheduler is the CURVE server: it holds its own key pair
and a directory of the public keys it accepts; every other peer holds its own key pair and the scheduler's public key.

Who may connect is decided by our ZAP handler (ZeroMQ's authentication protocol, RFC 27): libzmq asks it about every
CURVE handshake, on an inproc socket of the scheduler's context, and it accepts exactly the listed public keys.

Data addresses (scaler/io/data_server.py) speak CurveZMQ too: a worker or client serving data is the CURVE server of
its data address, under its own key pair, and its own ZAP handler (ZapResponder, on its context) accepts the keys the
scheduler accepts, which the scheduler sends it (DataKeys). A peer fetching from it is a CURVE client of the holder's
public key, which the scheduler hands it with the holder's address (ObjectResponse.holderPublicKey).
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Tuple

import zmq
import zmq.auth
from zmq.utils import z85

from scaler.io.curve_keys import CurvePeerKeys, CurveServerKeys
from scaler.rate_limit import LimitedLog

logger = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # fixed by RFC 27: libzmq sends its requests here
ZAP_DOMAIN = b"scaler"
DATA_ZAP_DOMAIN = b"scaler-data"  # a data address's handshakes, as its holder's refusals name them
_ZAP_VERSION = b"1.0"


def generate_key_pair(directory: str, name: str) -> Tuple[str, str]:
    """Write NAME.key and NAME.key_secret into directory (created if needed); returns their paths."""
    if not name or os.sep in name:
        raise ValueError(f"a key name must be a plain file name, got {name!r}")
    os.makedirs(directory, exist_ok=True)
    for suffix in (".key", ".key_secret"):
        if os.path.exists(os.path.join(directory, name + suffix)):
            raise ValueError(f"{os.path.join(directory, name + suffix)} exists already: not overwriting a key")
    public_file, secret_file = zmq.auth.create_certificates(directory, name)
    os.chmod(secret_file, 0o600)
    return public_file, secret_file


def apply_peer_keys(socket: zmq.Socket, keys: CurvePeerKeys) -> None:
    """Make `socket` (not yet connected) a CURVE client of the scheduler."""
    socket.curve_publickey = keys.public_key
    socket.curve_secretkey = keys.secret_key
    socket.curve_serverkey = keys.server_key


def apply_server_keys(socket: zmq.Socket, keys: CurveServerKeys) -> None:
    """Make `socket` (not yet bound) a CURVE server whose peers our ZAP handler checks."""
    socket.curve_secretkey = keys.secret_key
    socket.curve_publickey = keys.public_key
    socket.curve_server = True
    socket.zap_domain = ZAP_DOMAIN


def apply_data_server_keys(socket: zmq.Socket, keys: CurvePeerKeys) -> None:
    """Make `socket` (not yet bound) a data address: a CURVE server under this peer's own key pair, whose peers the
    ZapResponder of its context checks."""
    socket.curve_secretkey = keys.secret_key
    socket.curve_publickey = keys.public_key
    socket.curve_server = True
    socket.zap_domain = DATA_ZAP_DOMAIN


def apply_data_client_keys(socket: zmq.Socket, keys: CurvePeerKeys, holder_key: bytes) -> None:
    """Make `socket` (not yet connected) a CURVE client of the holder whose public key is `holder_key` (32 bytes, or
    Z85), under this peer's own key pair."""
    socket.curve_publickey = keys.public_key
    socket.curve_secretkey = keys.secret_key
    socket.curve_serverkey = holder_key


def z85_keys(raw_keys: Iterable[bytes]) -> FrozenSet[bytes]:
    """Keys as the protocol carries them (32 bytes each) in Z85, as ZapResponder compares them; others are left out."""
    return frozenset(z85.encode(key) for key in raw_keys if len(key) == 32)


def sender_key(frame: zmq.Frame) -> str:
    """The Z85 CURVE public key the sender of a received `frame` connected with (the User-Id our ZAP handler gave its
    connection), "" without CurveZMQ."""
    try:
        return str(frame.get("User-Id") or "")
    except zmq.ZMQError:
        return ""
    except NotImplementedError:  # pyzmq's CFFI backend (PyPy's) has no Frame.get: libzmq is asked directly
        return _cffi_frame_property(frame, b"User-Id")


def _cffi_frame_property(frame: zmq.Frame, name: bytes) -> str:
    """zmq_msg_gets on a frame of pyzmq's CFFI backend (received with copy=False, so it still holds its message), ""
    if the message has no such property."""
    import ctypes

    from zmq.backend.cffi._cffi import ffi  # type: ignore[import-not-found]

    value = _zmq_msg_gets()(ctypes.c_void_p(int(ffi.cast("uintptr_t", frame.zmq_msg))), name)
    return value.decode() if value else ""


@functools.cache
def _zmq_msg_gets() -> Any:
    """libzmq's zmq_msg_gets, from the libzmq this process loaded for pyzmq (the CFFI backend declares no binding)."""
    import ctypes

    with open("/proc/self/maps") as maps:
        paths = {line.split(None, 5)[5].strip() for line in maps if "libzmq" in line and "/" in line}
    if len(paths) != 1:
        raise RuntimeError(f"cannot read a message's CURVE key: libzmq loaded from {sorted(paths) or 'nowhere'}")
    function = ctypes.CDLL(paths.pop()).zmq_msg_gets
    function.restype = ctypes.c_char_p
    function.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    return function


def refusal_log(prefix: str = "") -> LimitedLog:
    """A holder's log of refused handshakes on its data address, rate limited per peer address as the scheduler's is:
    a stranger trying new keys in a loop floods nothing."""
    return LimitedLog(logger, prefix=prefix)


class ZapResponder:
    """A REP socket at ZeroMQ's ZAP endpoint of `context`: libzmq asks it about every CURVE handshake on the context's
    server sockets, and it accepts the Z85 public keys in `authorized_keys` (settable: a holder learns them from its
    scheduler, and refuses everyone until then). Bind it before any CURVE server socket of the context: without a ZAP
    handler, libzmq lets any key in. Requests come only when a peer connects: the owner's loop answers them."""

    def __init__(
        self,
        context: zmq.Context,
        authorized_keys: FrozenSet[bytes] = frozenset(),
        warnings: Optional[LimitedLog] = None,
    ) -> None:
        """`warnings`: rate limits the refusals logged (per peer address); without, each key's first is logged."""
        self.authorized_keys = authorized_keys
        self._warnings = warnings
        self._refusals: Dict[bytes, int] = {}
        self.socket = context.socket(zmq.REP)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(ZAP_ENDPOINT)

    @property
    def refusals(self) -> int:
        return sum(self._refusals.values())

    def answer_pending(self, now: float = 0.0) -> None:
        # ZeroMQ's descriptor is edge triggered: drain until nothing is left, then look at the events once more
        socket = self.socket
        while socket.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            frames = socket.recv_multipart(zmq.NOBLOCK)
            socket.send_multipart(answer_zap_request(frames, self.authorized_keys, self._refusals, self._warnings, now))

    def close(self) -> None:
        self.socket.close(linger=0)


def answer_zap_request(
    frames: List[bytes],
    authorized_keys: FrozenSet[bytes],
    refusals: Dict[bytes, int],
    warnings: Optional[LimitedLog] = None,
    now: float = 0.0,
) -> List[bytes]:
    """The ZAP reply to one request: 200 for a listed CURVE public key, 400 otherwise (the first refusal of a key is
    logged; `refusals` counts them per key, so a peer retrying every second does not flood the log). With `warnings`
    (the scheduler's), refusals are also rate limited per peer address, so new keys at every try flood nothing."""
    if len(frames) < 6 or frames[0] != _ZAP_VERSION:
        request_id = frames[1] if len(frames) > 1 else b""
        return [_ZAP_VERSION, request_id, b"500", b"malformed ZAP request", b"", b""]
    request_id, domain, address, _identity, mechanism = frames[1:6]
    credentials = frames[6:]
    warn = logger.warning if warnings is None else functools.partial(warnings.log, address, now)
    if mechanism != b"CURVE" or len(credentials) != 1 or len(credentials[0]) != 32:
        reason = f"mechanism {mechanism.decode(errors='replace')} is not accepted: CURVE is required"
        warn("refused a connection from %s: %s", address.decode(errors="replace"), reason)
        return [_ZAP_VERSION, request_id, b"400", reason.encode(), b"", b""]
    public_key = z85.encode(credentials[0])
    if public_key in authorized_keys:
        return [_ZAP_VERSION, request_id, b"200", b"OK", public_key, b""]
    seen = refusals.get(public_key, 0)
    refusals[public_key] = seen + 1
    if seen == 0:
        warn(
            "refused a connection from %s: public key %s is not among the authorized keys (domain %s)",
            address.decode(errors="replace"),
            public_key.decode(),
            domain.decode(errors="replace"),
        )
    return [_ZAP_VERSION, request_id, b"400", b"public key not authorized", b"", b""]


def prepare_local_keys(directory: str) -> Tuple[str, str, str, str]:
    """Keys for a scheduler and workers on one machine (SchedulerClusterCombo): DIRECTORY/scheduler.key_secret and
    DIRECTORY/worker.key_secret, made if missing, and DIRECTORY/authorized/ holding the worker's public key. Clients
    add theirs there. Returns (scheduler secret, scheduler public, worker secret, authorized directory) paths."""
    paths = {}
    for name in ("scheduler", "worker"):
        public_file, secret_file = os.path.join(directory, name + ".key"), os.path.join(directory, name + ".key_secret")
        if not os.path.exists(secret_file):
            public_file, secret_file = generate_key_pair(directory, name)
        paths[name] = (public_file, secret_file)
    authorized = os.path.join(directory, "authorized")
    os.makedirs(authorized, exist_ok=True)
    with open(paths["worker"][0], "rb") as source, open(os.path.join(authorized, "worker.key"), "wb") as copy:
        copy.write(source.read())
    return paths["scheduler"][1], paths["scheduler"][0], paths["worker"][1], authorized
