"""Internal: copy-on-write mappings of a file that keep no descriptor open.

Python's `mmap.mmap` duplicates the descriptor it maps and keeps the copy for the mapping's life (before 3.13, which
added `trackfd=False`). A reader that keeps what it read from shared memory, such as a client holding a few thousand
arrays its workers on the same host made, would keep as many descriptors, and meet the open files limit (1,024 by
default on many systems) with "Too many open files". The kernel needs no descriptor to keep a mapping: on CPython,
libc's `mmap` maps the file here, and `munmap` unmaps it once the last view of it goes.

Elsewhere (PyPy, whose ctypes arrays neither keep their memory's owner alive nor take weak references, or where libc's
functions cannot be found), `mmap.mmap` does the job, descriptor and all.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import weakref
from typing import Any, Optional

_MAP_FAILED = ctypes.c_void_p(-1).value


class _Libc:
    __slots__ = ("mmap", "munmap")

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols: no library search (which forks ldconfig)
        self.mmap = libc.mmap
        self.mmap.restype = ctypes.c_void_p
        # the offset is always 0: c_long is off_t wherever the mmap symbol takes a long (glibc's, on 32 bits too)
        self.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        self.munmap = libc.munmap
        self.munmap.restype = ctypes.c_int
        self.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def _find_libc() -> Optional[_Libc]:
    if sys.implementation.name != "cpython":
        return None
    try:
        return _Libc()
    except (OSError, AttributeError):  # no libc symbols to find (not a POSIX system)
        return None


_libc = _find_libc()


def map_private(fd: int, size: int) -> memoryview:
    """A writable view of the first `size` (> 0) bytes of `fd` whose writes stay in this process (copy on write, page
    by page). On CPython no descriptor is kept: `fd` may be closed at once. Its `obj` is the mapping, which supports
    weak references and lives as long as anything made from the view. ValueError if the file is shorter than `size`
    (reading a mapping past the end of its file would kill the process)."""
    file_size = os.fstat(fd).st_size
    if file_size < size:
        raise ValueError(f"cannot map {size} bytes of a file of {file_size}")
    libc = _libc
    if libc is None:
        return memoryview(mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE))
    address = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE, fd, 0)
    if address is None or address == _MAP_FAILED:
        error = ctypes.get_errno()
        raise OSError(error, f"mmap of {size} bytes failed: {os.strerror(error)}")
    pages: Any = (ctypes.c_char * size).from_address(address)
    weakref.finalize(pages, libc.munmap, address, size).atexit = False  # at exit the process's memory goes anyway
    return memoryview(pages).cast("B")
