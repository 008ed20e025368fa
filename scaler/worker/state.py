"""Internal: what the worker core knows of each task and each processor, and every way a task's state may change.

A task has one state field. Everything that can happen to it is in TRANSITIONS, which the core checks on every change
(an impossible change raises InvalidTransition with the task's story, the states it went through), and which
docs/protocol.md shows as a table. Whether a task handed to a processor has *started* is not a state: the processor
writes the sequence number of the task it starts and of the task it finished into memory it shares with the agent
(see processor_link.py), so the core reads it when it matters (a cancel, a crash, a heartbeat) instead of being told
of every start.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

# --- task states ------------------------------------------------------------------------------------------------------
WAITING = 0  # queued; some object it needs (function, serializer, argument) is still being fetched
READY = 1  # queued, runnable
HANDED = 2  # in a processor's pipe: runs when the processor gets to it (started once progress says so)
PARKED = 3  # started, and waits on a future (a nested task's): its processor runs nothing else meanwhile
CANCELED = 4  # canceled (and answered) while in a pipe, not started: the processor was told to drop it
DONE = 5  # answered (or handed back, or dropped): forgotten by the core

STATE_NAMES = ("waiting", "ready", "handed", "parked", "canceled", "done")

# state -> {stimulus: next state}. The stimuli are the core's names for what happened; the docs draw this table.
TRANSITIONS: Dict[int, Dict[str, int]] = {
    WAITING: {
        "object arrived": READY,
        "object not found": DONE,  # answered failed
        "cancel": DONE,  # answered canceled
        "actor lost": DONE,  # an actor's call: answered actorLost
        "balance": DONE,  # handed back to the scheduler
        "scheduler lost": DONE,
    },
    READY: {
        "dispatch": HANDED,
        "cancel": DONE,
        "actor lost": DONE,
        "balance": DONE,
        "scheduler lost": DONE,
    },
    HANDED: {
        "result": DONE,
        "blocked": PARKED,
        "taken back": READY,  # its processor parked or died before starting it (or its result was lost with it)
        "cancel": CANCELED,  # not started yet
        "cancel running": DONE,  # started: its processor is killed
        "timed out": DONE,  # started, ran past its timeout: its processor is killed, answered timedOut
        "processor died": DONE,  # it was running: answered failed
        "over memory limit": DONE,  # started, its worker's memory went past the limit: its processor is killed
        "actor lost": DONE,  # an actor's call: the actor ended (its process died, it was freed)
        "scheduler lost": DONE,
    },
    PARKED: {
        "result": DONE,
        "taken back": READY,  # it finished, but its processor died before reporting: it runs again
        "cancel running": DONE,
        "timed out": DONE,
        "processor died": DONE,
        "over memory limit": DONE,
        "scheduler lost": DONE,
    },
    CANCELED: {
        "dropped": DONE,  # the processor skipped it
        "result": DONE,  # it ran before the drop order reached the processor: its result is discarded
        "cancel running": DONE,  # it started before the drop order arrived: its processor is killed
        "taken back": DONE,  # its processor parked or died first: nothing left to do
        "processor died": DONE,
        "actor lost": DONE,
        "scheduler lost": DONE,
    },
}
_NEXT: Dict[int, Dict[str, int]] = {DONE: {}, **TRANSITIONS}
_STORY_LENGTH = 8  # the last changes a task remembers, for the error that an impossible change raises


class InvalidTransition(RuntimeError):
    pass


class WorkerTask:
    """A task this worker holds, from its Task message until its one TaskResult (or its hand-back)."""

    __slots__ = (
        "task_id",
        "task",
        "needs",
        "missing",
        "state",
        "queued",
        "seq",
        "processor",
        "expected_seconds",
        "deadline",
        "story",
    )

    def __init__(self, task: Any, needs: Tuple[bytes, ...], missing: Set[bytes]) -> None:
        self.task_id: bytes = task.task_id
        self.task = task  # the decoded Task message
        self.needs = needs  # every object id it uses (function, serializer, arguments), pinned in the cache
        self.missing = missing  # those not fetched yet
        self.state = WAITING if missing else READY
        self.queued = False  # has a live entry in the task queue's ready lines (see task_queue.py)
        self.seq = 0  # its number on the processor it was handed to (processors count what they are handed)
        self.processor: Optional[ProcessorState] = None
        self.expected_seconds = 0.0  # its run time as guessed when it was handed
        # with a timeout (Task.timeoutMs): when it expires, once its clock runs (it started, see core.py); else 0
        self.deadline = 0.0
        self.story: Optional[tuple] = None  # (the story before, the last stimulus): see stimuli()

    def move(self, stimulus: str, state: int) -> None:
        """Change state on `stimulus`; raises InvalidTransition if TRANSITIONS does not allow it."""
        if _NEXT[self.state].get(stimulus) != state:
            raise InvalidTransition(
                f"task {self.task_id.hex()}: {stimulus!r} cannot take it from {STATE_NAMES[self.state]} to "
                f"{STATE_NAMES[state]}; its story: {' -> '.join(self.stimuli()) or '(none)'}"
            )
        self.story = (self.story, stimulus)  # one small tuple per change: this runs twice per task
        self.state = state

    def stimuli(self) -> List[str]:
        """Its last changes of state, oldest first (at most _STORY_LENGTH)."""
        names: List[str] = []
        link = self.story
        while link is not None and len(names) < _STORY_LENGTH:
            link, stimulus = link
            names.append(stimulus)
        return names[::-1]


# --- the connection to the scheduler ----------------------------------------------------------------------------------
CONNECTING = 0  # Hello sent, no HelloReply yet
CONNECTED = 1

# --- processors -------------------------------------------------------------------------------------------------------
# Idle processors kept after parkings, so the next parking reuses one rather than forking a processor that has to
# connect its nested client and fetch functions again; a spare idle for a while goes.
MAX_SPARE_PROCESSORS = 16
SPARE_IDLE_SECONDS = 10.0

ACTIVE = 0  # the one tasks are handed to
PARKED_PROCESSOR = 1  # runs one task that waits on a future; handed nothing more
SPARE = 2  # idle, formerly parked: the next parking reuses it
ACTOR_PROCESSOR = 3  # an actor's (worker/actors.py): runs that actor's calls only
ROLE_NAMES = ("active", "parked", "spare", "actor")


class ProcessorState:
    """The core's view of one processor process (the shell holds its socket and pid)."""

    __slots__ = (
        "number",
        "role",
        "pipe",
        "pipe_expected_seconds",
        "handed_count",
        "canceled",
        "started",
        "done",
        "held",
        "forget",
        "idle_since",
    )

    def __init__(self, number: int) -> None:
        self.number = number
        self.role = ACTIVE
        # handed, not answered, in the order the processor runs them (a dict keeps the order they were added in)
        self.pipe: Dict[bytes, WorkerTask] = {}
        self.pipe_expected_seconds = 0.0  # their guessed total run time
        self.handed_count = 0  # the seq of the last task handed; the processor numbers what it receives the same way
        self.canceled = 0  # tasks of its pipe in state CANCELED
        self.started = 0  # the seq of the last task it started (its shared progress, as last observed)
        self.done = 0  # the seq of the last task it finished
        # (serializer id, object id) pairs whose bytes this processor has: they are never sent to it again
        self.held: Set[Tuple[bytes, bytes]] = set()
        self.forget: List[bytes] = []  # object ids evicted since it was last handed a task: it drops its copies
        self.idle_since = 0.0

    def task_with_seq(self, seq: int) -> Optional[WorkerTask]:
        """The task of its pipe it numbered `seq`, if it is still there."""
        for task in self.pipe.values():
            if task.seq == seq:
                return task
            if task.seq > seq:
                break
        return None

    def running(self) -> Optional[WorkerTask]:
        """The task it runs now, if it runs one of ours."""
        if self.started <= self.done:
            return None
        return self.task_with_seq(self.started)


# What each stimulus of TRANSITIONS is, for the table in docs/protocol.md.
STIMULI = {
    "object arrived": "the last object it needs arrived (`ObjectResponse`)",
    "object not found": "the scheduler has no such object: answered `failed`",
    "cancel": "`TaskCancel`: answered `canceled` (a handed task is also dropped by the processor before its turn)",
    "balance": "`BalanceRequest`: handed back in the `BalanceResponse`",
    "scheduler lost": "the scheduler's connection closed or went silent: forgotten, the worker registers again",
    "dispatch": "handed to the active processor (several at once while their function is known to be short)",
    "result": "the processor's result: answered with it (a canceled task's result is discarded)",
    "blocked": "it waits on a future: its processor parks and hands back what was handed after it",
    "taken back": "its processor parked or died before starting it, or died before reporting it: queued again",
    "cancel running": "`TaskCancel` of a started task (or a canceled one that started): its processor is killed",
    "timed out": "it ran (parked time included) past its `timeoutMs`: its processor is killed, answered `timedOut`",
    "processor died": "its processor died while running it: answered `failed` (`ProcessorDiedError`)",
    "over memory limit": "it ran while the worker's memory went past its limit, or the kernel stopped its process at"
    " the limit (its memory cgroup): its processor is replaced, answered `failed` (`MemoryLimitError`)",
    "dropped": "the processor skipped it, as told",
    "actor lost": "an actor's call whose actor ended (its process died or went past the memory limit, it was freed,"
    " its constructor raised): answered `actorLost`",
}


def transitions_table() -> str:
    """TRANSITIONS as the Markdown table docs/protocol.md shows (`python -m scaler.worker.state` prints it)."""
    lines = ["| state | stimulus | next state |", "| --- | --- | --- |"]
    for state, edges in TRANSITIONS.items():
        for stimulus, next_state in edges.items():
            lines.append(f"| {STATE_NAMES[state]} | {stimulus}: {STIMULI[stimulus]} | {STATE_NAMES[next_state]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(transitions_table())
