"""Internal: CurveZMQ keys as data: the certificate files `scaler_keygen` writes, read and checked, and Z85 decoded.

No zmq here, so that settings objects can hold keys and the sans-IO cores can read them without loading ZeroMQ (the
cores import no zmq: docs/contributing.md). Putting keys on sockets, answering handshakes and writing key files is
scaler/io/curve.py's, which the shells and CLIs use.

A certificate file is ZPL text as pyzmq's zmq.auth writes and reads it: `NAME.key` holds `public-key = "..."`,
`NAME.key_secret` holds both that and `secret-key = "..."`, each key 40 characters of Z85 (ZeroMQ RFC 32). It is read
here as zmq.auth.load_certificate reads it (tests/security/test_curve.py compares the two).
"""

from __future__ import annotations

import glob
import os
import struct
from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional, Tuple

# Z85 (ZeroMQ RFC 32): 5 characters of this alphabet for each 4 bytes, big-endian
_Z85_CHARS = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUES = {char: value for value, char in enumerate(_Z85_CHARS)}


@dataclass(frozen=True)
class CurvePeerKeys:
    """A client's, worker's or monitor's keys: its own key pair and the scheduler's public key (all Z85)."""

    public_key: bytes
    secret_key: bytes
    server_key: bytes


@dataclass(frozen=True)
class CurveServerKeys:
    """The scheduler's key pair and the public keys it accepts (all Z85)."""

    public_key: bytes
    secret_key: bytes
    authorized_keys: FrozenSet[bytes]


def load_peer_keys(secret_key_file: Optional[str], server_key_file: Optional[str]) -> Optional[CurvePeerKeys]:
    """Keys from the files named by a peer's --curve-secret-key and --curve-server-key; None if neither is given.

    ValueError if only one is given or a file is not a certificate of the right kind."""
    if secret_key_file is None and server_key_file is None:
        return None
    if secret_key_file is None or server_key_file is None:
        raise ValueError("CurveZMQ needs both keys: this peer's secret key file and the scheduler's public key file")
    public_key, secret_key = _load_key_pair(secret_key_file)
    return CurvePeerKeys(public_key, secret_key, _load_certificate(server_key_file)[0])


def load_server_keys(secret_key_file: Optional[str], authorized_keys_dir: Optional[str]) -> Optional[CurveServerKeys]:
    """The scheduler's keys from --curve-secret-key and --curve-authorized-keys; None if neither is given."""
    if secret_key_file is None and authorized_keys_dir is None:
        return None
    if secret_key_file is None or authorized_keys_dir is None:
        raise ValueError(
            "CurveZMQ needs both the scheduler's secret key file and the directory of the public keys it accepts"
        )
    if not os.path.isdir(authorized_keys_dir):
        raise ValueError(f"the authorized keys directory {authorized_keys_dir!r} does not exist")
    public_key, secret_key = _load_key_pair(secret_key_file)
    # the public keys of the directory's *.key files, as zmq.auth.load_certificates finds them
    paths = glob.glob(os.path.join(authorized_keys_dir, "*.key"))
    authorized = frozenset(key for key in (_load_certificate(path)[0] for path in paths) if key)
    if not authorized:
        raise ValueError(f"no public key (*.key) in {authorized_keys_dir!r}: nobody could connect")
    return CurveServerKeys(public_key, secret_key, authorized)


def raw_key(key: bytes) -> bytes:
    """A Z85 public key (40 characters, as in certificate files) as its 32 bytes, as the protocol carries keys."""
    return z85_decode(key) if len(key) == 40 else key


def z85_decode(text: bytes) -> bytes:
    """Z85 text (a multiple of 5 characters) as the bytes it encodes; ValueError if it is not Z85."""
    if len(text) % 5:
        raise ValueError(f"Z85 is 5 characters per 4 bytes: {len(text)} characters")
    try:
        values = [_Z85_VALUES[char] for char in text]
    except KeyError:
        raise ValueError(f"not Z85: {text!r}") from None
    words = []
    for start in range(0, len(values), 5):
        word = 0
        for value in values[start : start + 5]:
            word = word * 85 + value
        words.append(word)
    try:
        return struct.pack(f">{len(words)}I", *words)
    except struct.error:  # a group over 2**32 - 1
        raise ValueError(f"not Z85: {text!r}") from None


def _load_key_pair(path: str) -> Tuple[bytes, bytes]:
    public_key, secret_key = _load_certificate(path)
    if secret_key is None:
        raise ValueError(f"{path} holds no secret key: pass the NAME.key_secret file written by scaler_keygen")
    return public_key, secret_key


def _load_certificate(path: str) -> Tuple[bytes, Optional[bytes]]:
    """(public key, secret key or None) of a certificate file; ValueError if it is missing or holds no public key."""
    if not os.path.isfile(path):
        raise ValueError(f"key file {path!r} does not exist")
    keys: Dict[bytes, bytes] = {}
    try:
        with open(path, "rb") as file:
            for line in file:
                line = line.strip()
                name, equals, value = line.partition(b"=")
                name = name.strip()
                if name in (b"public-key", b"secret-key"):
                    if not equals:
                        raise ValueError(f"{name.decode()} without a value")
                    keys.setdefault(name, value.strip(b" \t'\""))  # the first, as zmq.auth reads it
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} is not a CurveZMQ certificate written by scaler_keygen: {error}") from None
    if b"public-key" not in keys:
        raise ValueError(f"{path} is not a CurveZMQ certificate written by scaler_keygen: it holds no public key")
    return keys[b"public-key"], keys.get(b"secret-key")
