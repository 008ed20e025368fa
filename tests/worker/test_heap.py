"""The task process's malloc tuning (scaler/worker/heap.py), in fresh processes: blocks tasks free are reused by the
next ones instead of coming back in fresh pages, and an idle process gives them back."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = [
    pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the tuning is glibc's"),
    pytest.mark.timeout(60),
]

# Four 8 MiB blocks made, written and freed, five times over (a task's arrays, task after task): the minor page faults
# of the last four rounds, and the RSS after the rounds and after a trim.
_ROUNDS = textwrap.dedent(
    """
    import resource, sys
    from scaler.worker.heap import Heap
    heap = Heap() if sys.argv[1] == "tuned" else None
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    def rss():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * 4096
    def round_of_blocks():
        blocks = [bytearray(8 << 20) for _ in range(4)]
        for block in blocks:
            block[::4096] = b"x" * len(block[::4096])
        del blocks
    round_of_blocks()
    before = faults()
    for _ in range(4):
        round_of_blocks()
    kept = rss()
    if heap is not None:
        heap.trim()
    print(faults() - before, kept, rss())
    """
)


def rounds(mode: str) -> tuple:
    out = subprocess.run([sys.executable, "-c", _ROUNDS, mode], capture_output=True, text=True, check=True).stdout
    faults, kept, after_trim = (int(word) for word in out.split())
    return faults, kept, after_trim


def test_blocks_freed_are_reused_by_the_next_task_and_given_back_when_idle() -> None:
    default_faults, _, _ = rounds("default")
    tuned_faults, kept, after_trim = rounds("tuned")
    pages = 4 * 4 * (8 << 20) // 4096  # four rounds of four blocks
    assert default_faults > pages // 2, "glibc's defaults give the blocks back and fault them in again"
    assert tuned_faults < pages // 20, "tuned, the blocks are reused"
    assert kept - after_trim >= 24 << 20, "a trim gives the kept blocks back"
