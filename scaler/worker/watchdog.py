"""Internal: how the cluster process tells a wedged worker agent from a busy one, and what it learns before killing it.

Each agent counts the turns of its loop in a word of memory it shares with the launcher (an anonymous shared mapping
made before the workers are forked), one store per turn and no system call. A healthy agent turns its loop at least
once a second: it wakes for its heartbeats and to check that its launcher is alive. The launcher reads the words
once a second; an agent whose count has not moved for --agent-stall-timeout is wedged (blocked in a call that will
never return, or spinning outside its loop): its heartbeats have stopped, the scheduler has given its tasks to other
workers, and only a new process brings the worker back.

Before killing it, the launcher asks for its stacks: every agent registers faulthandler on SIGUSR1 with a pipe the
launcher reads. faulthandler writes from the signal handler itself, so it answers even while the interpreter is
stuck in a system call or holds the GIL in a C extension.
"""

from __future__ import annotations

import faulthandler
import mmap
import os
import signal
import struct
import time

_WORD = struct.Struct("Q")
STACKS_SIGNAL = signal.SIGUSR1
_STACKS_QUIET_SECONDS = 0.2  # faulthandler writes its dump at once: this long without more bytes ends it


class LoopTurns:
    """One counter per worker slot, in memory the launcher and every worker it forks share."""

    def __init__(self, slots: int) -> None:
        self._memory = mmap.mmap(-1, _WORD.size * slots)  # anonymous and MAP_SHARED: the same pages after fork

    def counter(self, slot: int) -> TurnCounter:
        """The agent's side of `slot`, for the worker forked into it."""
        return TurnCounter(self._memory, slot * _WORD.size)

    def read(self, slot: int) -> int:
        return _WORD.unpack_from(self._memory, slot * _WORD.size)[0]


class TurnCounter:
    """Counts an agent's loop turns into its slot. One writer per slot, one aligned 8-byte store per turn: a reader
    may see an old count, never a torn one; and any change, however read, means the loop turned."""

    __slots__ = ("_memory", "_offset", "_turns")

    def __init__(self, memory: mmap.mmap, offset: int) -> None:
        self._memory = memory
        self._offset = offset
        self._turns = _WORD.unpack_from(memory, offset)[0]  # a replacement goes on from its predecessor's count

    def turn(self) -> None:
        self._turns += 1
        _WORD.pack_into(self._memory, self._offset, self._turns)


class Stall:
    """The launcher's watch on one worker: when its count last moved, by the launcher's clock."""

    __slots__ = ("_turns", "_moved_at")

    def __init__(self, turns: int, now: float) -> None:
        self._turns = turns
        self._moved_at = now

    def seconds(self, turns: int, now: float) -> float:
        """How long the count has stood still, given its value now."""
        if turns != self._turns:
            self._turns = turns
            self._moved_at = now
        return now - self._moved_at


class StackPipe:
    """A pipe from one agent's faulthandler to the launcher; made before the fork, each side keeps its end."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()

    def in_child(self) -> None:
        """In the worker: SIGUSR1 dumps every thread's stack into the pipe."""
        os.close(self._read)
        faulthandler.register(STACKS_SIGNAL, file=self._write, all_threads=True, chain=False)

    def in_parent(self) -> None:
        os.close(self._write)
        os.set_blocking(self._read, False)

    def stacks(self, pid: int, timeout_seconds: float) -> str:
        """Ask process `pid` for its stacks and return what it wrote within `timeout_seconds` ("" if nothing)."""
        try:
            os.kill(pid, STACKS_SIGNAL)
        except ProcessLookupError:
            return ""
        received = b""
        deadline = time.monotonic() + timeout_seconds
        quiet_until = deadline
        while time.monotonic() < min(deadline, quiet_until):
            try:
                chunk = os.read(self._read, 65536)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            if not chunk:
                break
            received += chunk
            quiet_until = time.monotonic() + _STACKS_QUIET_SECONDS
        return received.decode("utf-8", "replace")

    def close(self) -> None:
        os.close(self._read)
