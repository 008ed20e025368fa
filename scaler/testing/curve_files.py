"""Internal: key files for tests of clusters with CurveZMQ, as `scaler_keygen` writes them, and the options naming
them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict, List, Sequence, cast

import zmq

from scaler.io.curve import generate_key_pair
from scaler.testing.processes import wait_for


def make_key_files(
    directory: Path, authorized: Sequence[str], strangers: Sequence[str] = (), scheduler: bool = True
) -> Path:
    """NAME.key and NAME.key_secret in `directory` for the scheduler (unless `scheduler` is False: a
    SchedulerClusterCombo makes its own), each authorized name and each stranger; the authorized names' public keys
    copied into `directory`/authorized, which the scheduler accepts. Returns `directory`."""
    for name in (["scheduler"] if scheduler else []) + [*authorized, *strangers]:
        generate_key_pair(str(directory), name)
    (directory / "authorized").mkdir(parents=True)
    for name in authorized:
        shutil.copy(directory / f"{name}.key", directory / "authorized")
    return directory


def scheduler_key_options(keys: Path) -> List[str]:
    """`scaler_scheduler`'s options for the scheduler's key pair and the authorized keys in `keys`."""
    return [
        "--curve-secret-key",
        str(keys / "scheduler.key_secret"),
        "--curve-authorized-keys",
        str(keys / "authorized"),
    ]


def peer_key_options(keys: Path, name: str) -> List[str]:
    """The options of `scaler_cluster`, `scaler_top` and the other command-line peers for `name`'s key pair."""
    return ["--curve-secret-key", str(keys / f"{name}.key_secret"), "--curve-server-key", str(keys / "scheduler.key")]


def client_key_options(keys: Path, name: str) -> Dict[str, str]:
    """Client(...)'s keywords for `name`'s key pair."""
    return {
        "curve_secret_key_file": str(keys / f"{name}.key_secret"),
        "curve_server_key_file": str(keys / "scheduler.key"),
    }


def until_it_takes_nothing(dealer: zmq.Socket) -> None:
    """Wait until a DEALER whose handshake was refused has no route left: libzmq takes it down in steps, each as the
    socket looks at its commands, and a send meanwhile succeeds and goes nowhere; after, a send has nowhere to wait."""
    wait_for(
        lambda: not cast(int, dealer.getsockopt(zmq.EVENTS)) & zmq.POLLOUT, 10, "the refused socket to take nothing"
    )
