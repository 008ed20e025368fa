"""Internal: the socket files of the ipc:// addresses a process bound, removed when it stops: libzmq leaves them behind.

Only the file that this process's bind created is removed. Its identity (device, inode and change time) is taken right
after the bind; if the path was unlinked or bound again by someone else since, it is another file and stays where it
is (a reused inode number comes with a new change time).
"""

from __future__ import annotations

import os
import stat
from typing import Optional, Tuple

import zmq


class BoundIpcFile:
    __slots__ = ("path", "_identity")

    def __init__(self, path: str, identity: Tuple[int, int, int]) -> None:
        self.path = path
        self._identity = identity

    @classmethod
    def after_bind(cls, socket: zmq.Socket) -> Optional[BoundIpcFile]:
        """The socket file of the address `socket` bound last; None for tcp, or for an ipc address with no file
        (Linux's abstract namespace, ipc://@name). Call it right after the bind."""
        endpoint = socket.getsockopt_string(zmq.LAST_ENDPOINT)
        if not endpoint.startswith("ipc://") or endpoint.startswith("ipc://@"):
            return None
        path = endpoint[len("ipc://") :]
        try:
            status = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISSOCK(status.st_mode):
            return None
        return cls(path, _identity(status))

    def remove(self) -> bool:
        """Unlink the socket file if it is still the one bound; True if it was removed."""
        try:
            status = os.lstat(self.path)
        except OSError:
            return False
        if not stat.S_ISSOCK(status.st_mode) or _identity(status) != self._identity:
            return False
        try:
            os.unlink(self.path)
        except OSError:
            return False
        return True


def _identity(status: os.stat_result) -> Tuple[int, int, int]:
    return status.st_dev, status.st_ino, status.st_ctime_ns
