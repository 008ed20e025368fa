"""Internal: a task process's malloc (glibc's), told to keep the memory its tasks free for the next task, and to give
it back once the process is idle.

glibc serves an allocation above its mmap threshold (128 KiB at first, raised to the size of the largest block freed
since, up to 32 MiB) with a mapping of its own, and unmaps it when it is freed; below it, from its heap, whose free top
it gives back past its trim threshold (twice the mmap threshold). The arrays of a dask.array graph (8 MiB blocks) come
and go task after task, and each came in fresh pages, which the kernel zeroes (in transparent huge pages, which numpy
asks for, 2 MiB at a time): 53 such faults per 4000 x 4000 product on 2 workers after the first, 105 in the first
(/proc/vmstat, same run). With a fixed mmap threshold of 32 MiB and a trim threshold of 128 MiB, the blocks freed are
reused: 0 to 3 such faults after the first product, 53 in the first.

What a process keeps this way is memory it does not use, which its RSS (and its memory cgroup) counts: so it keeps at
most the trim threshold at the top of its heap, and gives everything free back (malloc_trim) once it had nothing to do
for IDLE_SECONDS. Elsewhere than glibc, nothing changes.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any, Optional

IDLE_SECONDS = 2.0
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's own upper bound for its dynamic threshold
_TRIM_THRESHOLD = 128 * 1024 * 1024


class Heap:
    def __init__(self) -> None:
        self._libc: Optional[Any] = None
        try:
            libc = ctypes.CDLL(None)  # the process's own symbols, libc's among them (find_library would fork)
            mallopt, trim = libc.mallopt, libc.malloc_trim
        except (OSError, AttributeError):  # not glibc
            return
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        trim.argtypes = [ctypes.c_size_t]
        if not (mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)):
            logging.debug("processor: glibc refused the malloc thresholds; its defaults stay")
            return
        self._libc = libc

    def trim(self) -> None:
        """Give the memory freed back to the system (the process is idle)."""
        if self._libc is not None:
            self._libc.malloc_trim(0)
