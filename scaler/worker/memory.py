"""Internal: what a worker's memory limit needs from the host: reading a task process's memory, a memory cgroup per
task process, and the OOM killer's order. IO only; what to do with the figures is the core's business (core.py).

Memory is counted as PSS (proportional set size): processors are forked from the zygote and share its pages, so RSS
would count each shared page once per processor. PSS is dearer to read (/proc/PID/smaps_rollup walks the page
tables), so a sample reads RSS first (/proc/PID/statm, one small read) and PSS only when RSS, its upper bound, says the
worker may be past a threshold.

Enforcement (docs/guide/memory.md):

- cgroup: each processor runs in a memory cgroup of its own, made by the agent beside its own cgroup before the fork
  and entered by the processor before it runs anything (zygote.py). The kernel then stops a task at the limit however
  fast it allocates; the cgroup's oom_kill counter tells the agent that the kernel killed it for memory. cgroup v1
  (memory.limit_in_bytes, memory.oom_control) is tested; v2 (memory.max, memory.events) is written to the same
  contract but untested on the machines this was developed on.
- watchdog: the agent samples its processors every DEFAULT_MEMORY_SAMPLE_SECONDS while a limit is set; the core stops
  a task past the stop fraction. It runs with the cgroups too, which leave it the sum over processors and held data.

Spilling moves a held result's bytes from its memfd to an unnamed file in the worker's temporary directory, under the
same descriptor number (SharedBytes.move_to), and back.
"""

from __future__ import annotations

import errno
import logging
import os
import tempfile
import time
from typing import List, Optional, Tuple

from scaler.io.shared_bytes import SharedBytes, shared_fd

V1_ROOT = "/sys/fs/cgroup/memory"
V2_ROOT = "/sys/fs/cgroup"
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

# oom_score_adj of task processes: the kernel's OOM killer picks the process with the highest score, and the agent,
# the zygote and the cluster process keep theirs (0 unless the host set another): a task's process goes first.
PROCESSOR_OOM_SCORE_ADJ = 500
_COPY_CHUNK_BYTES = 16 * 1024 * 1024  # spilling and reading back write this much at a time


def rss_bytes(pid: int) -> int:
    """A process's resident set size; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


def pss_bytes(pid: int, kept_bytes: int = 0) -> int:
    """A process's proportional set size (its shared pages divided among their sharers), less the `kept_bytes` of
    held results a task process keeps mapped (mapped_inputs.py), at most its shared memory's share: the worker counts
    them once, as held results. Its RSS where the kernel has no smaps_rollup (before Linux 4.14); 0 if it is gone."""
    pss: Optional[int] = None
    shmem = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.startswith(b"Pss:"):
                    pss = int(line.split()[1]) * 1024  # the kernel reports kB
                    if not kept_bytes:
                        break
                elif line.startswith(b"Pss_Shmem:"):  # Linux 5.7 and later
                    shmem = int(line.split()[1]) * 1024
                    break
    except FileNotFoundError:
        return rss_bytes(pid)
    except (OSError, ValueError):
        return 0
    return rss_bytes(pid) if pss is None else pss - min(kept_bytes, shmem)


def set_own_oom_score_adj(value: int) -> None:
    """Make this process a likelier (higher value) victim of the kernel's OOM killer; raising it needs no privilege.
    Never fails: a host without the file has no OOM killer to order."""
    try:
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write(str(value))
    except OSError:
        pass


def oom_score_adj(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/oom_score_adj") as adj:
            return int(adj.read())
    except (OSError, ValueError):
        return None


def spill(payload: SharedBytes, directory: str) -> None:
    """Move a held result from its memfd to an unnamed file in `directory` (its disk space is freed with the last
    descriptor): the same object, the same descriptor number, its bytes now on disk (SharedBytes.move_to). OSError
    if the disk cannot take it (the result then stays in memory)."""
    _move(payload, _unnamed_file(directory))


def read_back(payload: SharedBytes) -> None:
    """Move a spilled result back into a memfd."""
    _move(payload, shared_fd("scaler-data"))


def _move(payload: SharedBytes, fd: int) -> None:
    """Copy the payload's bytes into the empty file `fd`, which then replaces its descriptor."""
    try:
        view = payload.view()
        os.ftruncate(fd, len(view))
        written = 0
        while written < len(view):
            written += os.pwrite(fd, view[written : written + _COPY_CHUNK_BYTES], written)
    except BaseException:
        os.close(fd)
        raise
    payload.move_to(fd)


def _unnamed_file(directory: str) -> int:
    try:
        return os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except (AttributeError, OSError):  # no O_TMPFILE (not Linux, or a file system without it): create and unlink
        fd, path = tempfile.mkstemp(dir=directory, prefix="spilled-")
        os.unlink(path)
        return fd


def join_cgroup(procs_path: str) -> None:
    """In a freshly forked processor: move this process into its cgroup (`cgroup.procs` of it)."""
    with open(procs_path, "w") as procs:
        procs.write("0")  # 0: the writing process


class ProcessCgroup:
    """The memory cgroup of one processor."""

    __slots__ = ("path", "version")

    def __init__(self, path: str, version: int) -> None:
        self.path = path
        self.version = version

    @property
    def procs_path(self) -> str:
        return os.path.join(self.path, "cgroup.procs")

    def oom_kills(self) -> int:
        """How often the kernel's OOM killer killed a process of this cgroup (at its limit)."""
        name, key = ("memory.oom_control", "oom_kill") if self.version == 1 else ("memory.events", "oom_kill")
        try:
            with open(os.path.join(self.path, name)) as counters:
                for line in counters:
                    field, _, value = line.partition(" ")
                    if field == key:
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def usage_bytes(self) -> int:
        """What the cgroup is charged with now, shared memory aside: its process's own pages (those it shares with the
        zygote are charged to the agent's cgroup, which made them). Shared memory is left out because the large
        results the process wrote into memfds for the agent are charged here until they are spilled or freed, and
        the worker counts them already, as held results."""
        usage = self._read("memory.usage_in_bytes" if self.version == 1 else "memory.current")
        try:
            with open(os.path.join(self.path, "memory.stat")) as stat:
                for line in stat:
                    if line.startswith("shmem "):
                        return max(0, usage - int(line.split()[1]))
        except (OSError, ValueError):
            pass
        return usage

    def peak_bytes(self) -> int:
        """The most memory the cgroup was charged with; 0 if the kernel does not say (v2 before Linux 5.19)."""
        return self._read("memory.max_usage_in_bytes" if self.version == 1 else "memory.peak")

    def set_limit(self, limit_bytes: int) -> None:
        """A new limit (OSError if the kernel refuses: lowered below what it cannot reclaim). With v1's swap limit,
        which may never be below the memory limit, in the order that keeps it so."""
        if self.version == 2:
            _write(self.path, "memory.max", limit_bytes)
            return
        memsw = os.path.exists(os.path.join(self.path, "memory.memsw.limit_in_bytes"))
        if memsw and limit_bytes > self._read("memory.limit_in_bytes"):
            _write(self.path, "memory.memsw.limit_in_bytes", limit_bytes)
        _write(self.path, "memory.limit_in_bytes", limit_bytes)
        if memsw:
            _write(self.path, "memory.memsw.limit_in_bytes", limit_bytes)

    def _read(self, name: str) -> int:
        try:
            with open(os.path.join(self.path, name)) as counter:
                return int(counter.read())
        except (OSError, ValueError):
            return 0

    def remove(self) -> bool:
        """False while the kernel still counts a process in it (try again later)."""
        try:
            os.rmdir(self.path)
        except FileNotFoundError:
            return True
        except OSError as error:
            if error.errno == errno.EBUSY:
                return False
            logging.debug("cannot remove cgroup %s: %s", self.path, error)
        return True


class CgroupMaker:
    """Makes a worker's per-processor memory cgroups, beside the agent's own cgroup."""

    def __init__(self, base: str, version: int, prefix: str, limit_bytes: int) -> None:
        self.base = base
        self.version = version
        self.prefix = prefix
        self.limit_bytes = limit_bytes
        self._lingering: List[ProcessCgroup] = []  # removed once the kernel let go of them

    @property
    def description(self) -> str:
        return f"cgroup v{self.version} ({'untested here' if self.version == 2 else 'tested'}) under {self.base}"

    @classmethod
    def probe(cls, prefix: str, limit_bytes: int) -> Tuple[Optional[CgroupMaker], str]:
        """A maker if this host lets us make memory cgroups (one made and removed to find out), else None and why."""
        reasons = []
        for version, base in ((2, _own_cgroup_dir(2)), (1, _own_cgroup_dir(1))):
            if base is None:
                reasons.append(f"no cgroup v{version} memory controller")
                continue
            maker = cls(base, version, prefix, limit_bytes)
            try:
                group = maker.make("probe")
            except OSError as error:
                reasons.append(f"cgroup v{version} under {base}: {error.strerror or error}")
                continue
            group.remove()
            return maker, ""
        return None, "; ".join(reasons)

    def make(self, name: str) -> ProcessCgroup:
        """A new cgroup limited to the limit, swap included where the kernel counts it; OSError if impossible."""
        path = os.path.join(self.base, f"{self.prefix}-{name}")
        try:
            os.mkdir(path)
        except FileExistsError:  # left by an earlier agent of the same pid: empty, or the write below fails
            pass
        group = ProcessCgroup(path, self.version)
        try:
            if self.version == 1:
                _write(path, "memory.limit_in_bytes", self.limit_bytes)
                if os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
                    _write(path, "memory.memsw.limit_in_bytes", self.limit_bytes)
            else:
                _write(path, "memory.max", self.limit_bytes)
                if os.path.exists(os.path.join(path, "memory.swap.max")):
                    _write(path, "memory.swap.max", 0)
        except OSError:
            group.remove()
            raise
        return group

    def release(self, group: ProcessCgroup) -> None:
        """Remove a processor's cgroup once its process is gone (now, or at a later call)."""
        self._lingering.append(group)
        self._lingering = [group for group in self._lingering if not group.remove()]

    def close(self, timeout_seconds: float = 1.0) -> None:
        """Remove what is left, waiting a little for the kernel to let go of processes that just died."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            self._lingering = [group for group in self._lingering if not group.remove()]
            if not self._lingering or time.monotonic() >= deadline:
                return
            time.sleep(0.01)

    def remove_stale(self) -> None:
        """Remove the cgroups that agents killed before they could (scaler-PID-N of a PID that is gone)."""
        try:
            names = os.listdir(self.base)
        except OSError:
            return
        for name in names:
            parts = name.split("-")
            if len(parts) == 3 and parts[0] == "scaler" and parts[1].isdigit() and not _alive(int(parts[1])):
                ProcessCgroup(os.path.join(self.base, name), self.version).remove()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write(path: str, name: str, value: int) -> None:
    with open(os.path.join(path, name), "w") as control:
        control.write(str(value))


def _own_cgroup_dir(version: int) -> Optional[str]:
    """Where this process's memory cgroup is mounted in our file system, if the memory controller is there."""
    try:
        with open("/proc/self/cgroup") as own:
            lines = own.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if version == 1 and "memory" in controllers.split(","):
            root = V1_ROOT
        elif version == 2 and line.startswith("0::"):
            root = V2_ROOT
            try:
                with open(os.path.join(root, "cgroup.controllers")) as available:
                    if "memory" not in available.read().split():
                        return None
            except OSError:
                return None
        else:
            continue
        for candidate in (os.path.join(root, path.lstrip("/")), root):  # in a container, the own path may be "/"
            if os.path.isdir(candidate) and os.path.exists(
                os.path.join(candidate, "memory.limit_in_bytes" if version == 1 else "cgroup.procs")
            ):
                if version == 2 and candidate != root:
                    return os.path.dirname(candidate)  # v2: a sibling of our leaf, not a child (no internal processes)
                return candidate
    return None
