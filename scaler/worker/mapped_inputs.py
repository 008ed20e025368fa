"""Internal: a task process's private mappings of the shared graph results its tasks read, kept for the next task
that reads the same result.

A mapping costs more than the reads through it: the kernel fills a page-table entry per page as the task first
touches it, and clears them all at unmap. That is about 2.5 ms per 8 MiB input here, against 30 ms for the 1000 x
1000 product that reads two such blocks, and a dask.array product reads each block in several tasks. So a processor
keeps its mappings, within a bound, and lends one again only when it can tell that it still shows the result as made:

- the same memory: the descriptor handed with the task names the file that was mapped (same device and inode); a
  result the agent spilled to disk, or fetched again, comes in another file;
- no task changed it: the mappings are copy-on-write, and a page a task wrote became this process's own anonymous
  memory, which /proc/self/pagemap tells (a present page without the file-page bit, or a swapped one: file pages of a
  private mapping are dropped, never swapped).

Where pagemap cannot be read (not Linux), nothing is kept; nor are mappings of spilled results (files on disk, which
a kept mapping would pin). A result passed twice to one task is read twice from one mapping, so its two arguments
share their memory, as one object passed twice does in Python (and in Dask). The mappings lent to a task are noted
with the object it returned (TaskRunner._made), which may be a view of one: once a later task wrote to it, that
object is not used. Kept mappings are dropped when the agent forgets their result (freed, or spilled), which it
says once the tasks handed before are answered; the agent's memory samples leave out the bytes kept
(SharedProgress.kept), as the worker counts them as held results.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from scaler.io.shared_bytes import SharedBytes

_PAGE_BYTES = mmap.PAGESIZE
_ENTRY_BYTES = 8  # one native-endian 64-bit pagemap entry per page
_TOP_BYTE = _ENTRY_BYTES - 1 if sys.byteorder == "little" else 0  # where bits 56 to 63 of an entry are

# What the top byte of a pagemap entry (bits 56 to 63) says of a page: 1 if a task wrote it. Bit 63 (0x80): present;
# bit 61 (0x20): a page of the file (clear: this process's own copy); bit 62 (0x40): swapped.
_WRITTEN = bytes(1 if (top & 0x80 and not top & 0x20) or top & 0x40 else 0 for top in range(256))


class _Mapping(NamedTuple):
    file: Tuple[int, int]  # device and inode
    view: memoryview
    first_page: int  # its address, in pages
    pages: int
    size: int


class MappedInputs:
    """Object id -> a private mapping of that shared result, the least recently lent first; at most `max_bytes` of
    them and `max_count`."""

    def __init__(self, max_bytes: int, max_count: int, pagemap_path: str = "/proc/self/pagemap") -> None:
        self._max_bytes = max_bytes
        self._max_count = max_count
        self._mappings: Dict[bytes, _Mapping] = {}
        self._bytes = 0
        self._pagemap: Optional[int] = None
        self._memfd_device = -1
        try:
            self._memfd_device = _memfd_device()
            self._pagemap = os.open(pagemap_path, os.O_RDONLY | os.O_CLOEXEC)
        except (OSError, AttributeError):  # not Linux
            pass

    def view(self, object_id: bytes, payload: SharedBytes, lent: Optional[List[Tuple[int, int]]] = None) -> memoryview:
        """A writable, copy-on-write view of the result, for default_loads: one kept from an earlier task if it shows
        the result as made, a new one otherwise. A kept one is noted in `lent` by where it is (first page, pages), not
        as the mapping, which would stay mapped as long as the note (TaskRunner notes them with the object the task
        returns)."""
        if self._pagemap is None or not 0 < payload.size <= self._max_bytes:
            return payload.private_view()
        stat = os.fstat(payload.fd)
        if stat.st_dev != self._memfd_device:  # a spilled result, in a file on disk: kept, it would pin the file
            return payload.private_view()
        file = (stat.st_dev, stat.st_ino)
        kept = self._mappings.pop(object_id, None)
        if kept is not None:
            if kept.file == file and kept.size == payload.size and not self._written(kept.first_page, kept.pages):
                self._mappings[object_id] = kept  # now the most recently lent
                if lent is not None:
                    lent.append((kept.first_page, kept.pages))
                return kept.view
            self._bytes -= kept.size
        view = payload.private_view()
        try:
            address = ctypes.addressof(ctypes.c_char.from_buffer(view))  # the export ends with the ctypes object
        except (TypeError, ValueError):
            return view
        pages = -(-payload.size // _PAGE_BYTES)
        mapping = self._mappings[object_id] = _Mapping(file, view, address // _PAGE_BYTES, pages, payload.size)
        if lent is not None:
            lent.append((mapping.first_page, mapping.pages))
        self._bytes += payload.size
        while self._bytes > self._max_bytes or len(self._mappings) > self._max_count:
            self._bytes -= self._mappings.pop(next(iter(self._mappings))).size
        return view

    def forget(self, object_ids: Iterable[bytes]) -> None:
        mappings = self._mappings
        if not mappings:
            return
        for object_id in object_ids:
            dropped = mappings.pop(object_id, None)
            if dropped is not None:
                self._bytes -= dropped.size

    def kept_bytes(self) -> int:
        return self._bytes

    def any_written(self, places: Sequence[Tuple[int, int]]) -> bool:
        """Whether a task wrote to any of these mappings (as view() noted them) since they were made: an object made
        from one, such as a view of an input a task returned, shows what was written. A mapping gone since may have
        left its place to other memory, which then seems written: the object is not used, needlessly but safely
        (only an object that is no view of the mapping lets it go)."""
        return any(self._written(first_page, pages) for first_page, pages in places)

    def _written(self, first_page: int, pages: int) -> bool:
        assert self._pagemap is not None  # nothing is kept without it
        length = pages * _ENTRY_BYTES
        try:
            entries = os.pread(self._pagemap, length, first_page * _ENTRY_BYTES)
        except OSError:
            return True
        if len(entries) != length:
            return True
        return b"\x01" in entries[_TOP_BYTE::_ENTRY_BYTES].translate(_WRITTEN)


def _memfd_device() -> int:
    """The device of memfds (the kernel's internal shared memory mount)."""
    fd = os.memfd_create("scaler-device", os.MFD_CLOEXEC)
    try:
        return os.fstat(fd).st_dev
    finally:
        os.close(fd)
