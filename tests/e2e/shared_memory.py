"""Which processes still hold Scaler's shared memory files (memfds of held results and kept objects): by their
descriptors and their mappings, read from /proc."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Tuple

import psutil


def memfd_holders(processes: List[psutil.Process]) -> List[str]:
    """The processes that still map or hold a shared memory file of Scaler's data."""
    found = []
    for process in processes:
        try:
            maps = Path(f"/proc/{process.pid}/maps").read_text()
            fds = [os.readlink(f"/proc/{process.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{process.pid}/fd")]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if "memfd:scaler-data" in maps or any("memfd:scaler-data" in link for link in fds):
            found.append(f"{process.pid} {process.name()}")
    return found


def data_descriptors() -> Tuple[int, int]:
    """This process's descriptors of Scaler's shared memory files of data, and how many distinct files they are."""
    files = _data_file_of_each_descriptor()
    return len(files), len(set(files))


def descriptors_of(fd: int) -> int:
    """How many descriptors of this process name the shared memory file of data `fd` names (mmap dups the one it
    maps)."""
    return _data_file_of_each_descriptor().count(os.fstat(fd).st_ino)


def _data_file_of_each_descriptor() -> List[int]:
    """The file (inode) of each of this process's descriptors of Scaler's shared memory files of data."""
    files = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "memfd:scaler-data" in os.readlink(f"/proc/self/fd/{fd}"):
                files.append(os.stat(f"/proc/self/fd/{fd}").st_ino)
        except OSError:  # closed meanwhile
            continue
    return files
