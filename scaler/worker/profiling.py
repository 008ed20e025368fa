"""Internal: profiling of one task call: wall time, CPU time and peak memory growth."""

from __future__ import annotations

import threading
import time
from typing import Optional

import psutil

from scaler import config

_CLEAR_REFS_PATH = "/proc/self/clear_refs"
_STATUS_PATH = "/proc/self/status"


class CallProfile:
    """Measures one call; use as a context manager around it, then read the three fields.

    Peak memory is the growth of the process's peak RSS over the call. Linux keeps the RSS high-water mark (VmHWM)
    for us, and writing "5" to /proc/self/clear_refs resets it to the current RSS (Linux >= 4.0): reset before the
    call, read after, and the peak is exact, not sampled, for three small /proc accesses per profiled task. Where
    that is impossible (another OS, a read-only /proc), a daemon thread samples RSS every
    DEFAULT_PROFILING_SAMPLE_INTERVAL_SECONDS instead, which can miss a peak shorter than that.
    """

    def __init__(self) -> None:
        self.duration_us = 0
        self.cpu_time_us = 0
        self.peak_memory = 0
        self._start_rss = 0
        self._sampler: Optional[_RssSampler] = None

    def __enter__(self) -> CallProfile:
        if _reset_peak_rss():
            self._start_rss = _read_status_bytes("VmRSS:")
        else:
            self._sampler = _RssSampler()
            self._start_rss = self._sampler.peak
        self._start_cpu = time.process_time_ns()
        self._start_wall = time.perf_counter_ns()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.duration_us = (time.perf_counter_ns() - self._start_wall) // 1000
        self.cpu_time_us = (time.process_time_ns() - self._start_cpu) // 1000
        peak = self._sampler.stop() if self._sampler is not None else _read_status_bytes("VmHWM:")
        self.peak_memory = max(0, peak - self._start_rss)


def _reset_peak_rss() -> bool:
    try:
        with open(_CLEAR_REFS_PATH, "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


def _read_status_bytes(field: str) -> int:
    with open(_STATUS_PATH) as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) * 1024  # the kernel reports kB
    return 0


class _RssSampler:
    def __init__(self) -> None:
        self._process = psutil.Process()
        self.peak = self._process.memory_info().rss
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="scaler-rss-sampler", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stopped.wait(config.DEFAULT_PROFILING_SAMPLE_INTERVAL_SECONDS):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def stop(self) -> int:
        self._stopped.set()
        self._thread.join()
        return max(self.peak, self._process.memory_info().rss)
