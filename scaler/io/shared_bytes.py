"""Internal: bytes in an anonymous shared memory file (a memfd), passed between processes by descriptor.

A worker's task process pickles a large result into one and hands its descriptor to the agent (SCM_RIGHTS over their
channel), which holds it; a task process reading it, or a client or worker on the same host (scaler/io/local_data.py),
is handed the descriptor in turn and maps the same memory. No byte of it crosses a socket.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from contextlib import contextmanager
from typing import Any, Iterator, Optional

from scaler.io.private_mapping import map_private


class SharedBytes:
    """Bytes in a memfd. The holder of the object owns the descriptor: it is closed when the object is dropped (the
    mapping lives on while a memoryview of it does, such as a send ZeroMQ has not finished). Reads go through
    `view()`, a read-only memoryview of the mapping, or `private_view()`, a copy-on-write one; `len()` and slicing
    work as on bytes, slices being views.

    `lent` says the memory was shown beyond the task processes its descriptor was handed to (mapped here, for a send
    or a read; its descriptor served to a reader on the host; moved to disk): such a file is never written again
    (worker/spares.py reuses the others)."""

    __slots__ = ("fd", "size", "lent", "_map")

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self.lent = False
        self._map: Optional[mmap.mmap] = None

    @classmethod
    def create(cls, data: Any, spare: Optional[SharedBytes] = None) -> SharedBytes:
        """A memfd holding a copy of `data` (bytes-like): a new one, or `spare`'s (a file no reader maps any more,
        whose memory is written over rather than allocated anew; see worker/spares.py)."""
        fd = spare.take_fd() if spare is not None else shared_fd("scaler-data")
        size = len(data)
        try:
            if spare is not None:
                _write_at_start(fd, data)
                os.ftruncate(fd, size)
            else:
                os.ftruncate(fd, size)
                if size:
                    with mmap.mmap(fd, size) as writable:
                        writable[:] = data
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, size)

    def take_fd(self) -> int:
        """The descriptor, now the caller's to close: this object no longer owns it."""
        fd, self.fd = self.fd, -1
        self._map = None
        return fd

    @contextmanager
    def mapped_once(self) -> Iterator[Any]:
        """The bytes, readable within the block only: a mapping of its own, unmapped at its end (unless view() keeps one
        already). mmap dups the descriptor it maps, so the mapping view() keeps costs a second descriptor for as long
        as the object lives; a reader that looks once (the client hashing an object it then serves by descriptor)
        need not pay it."""
        if self._map is not None or not self.size:
            yield self.view()
            return
        with mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ) as mapped:
            yield mapped

    def sent_view(self) -> memoryview:
        """A read-only view for a send that ends later (ZeroMQ's, without a copy): of a mapping of its own unless view()
        keeps one, unmapped with its descriptor once the send released the last view of it. A result served once does
        not keep a second descriptor for the rest of its life (see mapped_once)."""
        if self._map is not None or not self.size:
            return self.view()
        self.lent = True
        return memoryview(mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ))

    def view(self) -> memoryview:
        self.lent = True
        if self._map is None:
            self._map = mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ) if self.size else mmap.mmap(-1, 1)
        return memoryview(self._map)[: self.size]

    def private_view(self) -> memoryview:
        """A writable view whose writes stay in this process (copy on write, page by page): for deserializing, so
        that an array read from it without a copy can be modified in place by its reader, never in the holder."""
        if not self.size:
            return memoryview(bytearray())
        return map_private(self.fd, self.size)  # keeps no descriptor: a reader may keep thousands of these

    def to_read(self, by_default_loads: bool) -> Any:
        """What a deserializer is given of these bytes: the default one (serializer.default_loads) a copy-on-write
        view, whose arrays it maps in place for a reader that may modify them; a custom one `bytes`, as promised."""
        return self.private_view() if by_default_loads else self.to_bytes()

    def move_to(self, fd: int) -> None:
        """From now on the bytes are those of `fd` (a file holding the same bytes: a worker spilling a held result to
        disk, or reading it back), under this object's descriptor number; `fd` is closed. Views taken before keep the
        old mapping, and processes handed the old descriptor keep theirs."""
        os.dup2(fd, self.fd, inheritable=False)
        os.close(fd)
        self._map = None
        self.lent = True

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: slice) -> memoryview:
        return self.view()[index]

    def to_bytes(self) -> bytes:
        """A copy of the bytes, read through a mapping unmapped at once (no second descriptor kept for it)."""
        with self.mapped_once() as mapped:
            return bytes(mapped)

    def __del__(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass


def _write_at_start(fd: int, data: Any) -> None:
    view = memoryview(data).cast("B")
    written = 0
    while written < len(view):
        written += os.pwrite(fd, view[written:], written)


def as_buffer(payload: Any) -> Any:
    """A payload (bytes, or SharedBytes) as something ZeroMQ, the encoder and slicing read without a copy."""
    return payload.view() if type(payload) is SharedBytes else payload


def shared_fd(name: str) -> int:
    """A new, empty shared memory file (a memfd; elsewhere an unlinked temporary file), closed on exec."""
    try:
        return os.memfd_create(name, os.MFD_CLOEXEC)
    except (AttributeError, OSError):  # not Linux: an unlinked temporary file does the same
        handle = tempfile.TemporaryFile()
        fd = os.dup(handle.fileno())
        handle.close()
        return fd
