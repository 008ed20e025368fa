"""Internal: what the worker core asks its shell to do, in order: plain records, no behaviour (see core.py and
agent.py)."""

from __future__ import annotations

from typing import FrozenSet, List, NamedTuple, Tuple

from scaler.io.shared_bytes import SharedBytes
from scaler.protocol import WorkerHeartbeat
from scaler.worker.processor_messages import ProcessorTask


class Connect(NamedTuple):
    """Open a new connection to the scheduler under a new identity (dropping whatever the old one still queued), then
    tell the core its name with `WorkerCore.connecting`."""


class StartProcessor(NamedTuple):
    number: int  # the core's name for it from now on


class HandTasks(NamedTuple):
    number: int
    tasks: List[ProcessorTask]
    shared: List[SharedBytes]  # the tasks' shared payloads, in order (channel.ProcessorOrders.shared)


class DropTasks(NamedTuple):
    """Tell the processor to skip these tasks if it has not started them (they were canceled)."""

    number: int
    task_ids: List[bytes]


class ForgetObjects(NamedTuple):
    """Tell an idle processor to drop its copies of these objects now (a busy one drops them with its next task)."""

    number: int
    object_ids: List[bytes]


class GiveSpares(NamedTuple):
    """Give a processor the files of freed results it wrote, to write its next results into (spares.py)."""

    number: int
    spares: List[Tuple[bytes, SharedBytes]]  # (object id, its file)


class FetchData(NamedTuple):
    """Fetch a held result from the worker holding it (its data address); tell the core with `data_fetched`."""

    address: str
    object_id: bytes
    holder_key: bytes = b""  # with CurveZMQ: the holder's public key (ObjectResponse.holderPublicKey)


class AcceptDataKeys(NamedTuple):
    """With CurveZMQ: let peers with these public keys (32 bytes each) connect to the data address (DataKeys)."""

    keys: FrozenSet[bytes]


class EndParking(NamedTuple):
    """Tell a parked processor that every task handed to it before now was taken back."""

    number: int


class KillProcessor(NamedTuple):
    """SIGKILL it and its process group; the core has already forgotten it."""

    number: int


class SendHeartbeat(NamedTuple):
    """Fill in what only the shell can measure (CPU and memory of the agent and of processor `active`), then send."""

    heartbeat: WorkerHeartbeat
    active: int  # the active processor's number, or -1


class SampleMemory(NamedTuple):
    """Read the memory of these processors (by number) and tell the core with `memory_sampled`: RSS, or PSS for all
    of them once their RSS and the held data add up to `exact_above` bytes or more (scaler/worker/memory.py)."""

    numbers: List[int]
    exact_above: int


class SpillHeld(NamedTuple):
    """Move these held results (SharedBytes) to files in the worker's temporary directory; tell the core which moved
    with `held_moved` (scaler/worker/memory.py)."""

    object_ids: List[bytes]


class ReadBackHeld(NamedTuple):
    """Move these spilled results back into memory; tell the core which moved with `held_moved`."""

    object_ids: List[bytes]


class AllowMemory(NamedTuple):
    """Set processor `number`'s memory cgroup to the memory limit plus `extra_bytes`: held results it wrote, which the
    kernel charges to its cgroup until they are spilled or freed (scaler/worker/memory.py)."""

    number: int
    extra_bytes: int


class Exit(NamedTuple):
    code: int
    reason: str
    disconnect: bool  # tell the scheduler (WorkerDisconnect) before leaving


Instruction = object  # one of the classes above
