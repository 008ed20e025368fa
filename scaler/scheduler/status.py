"""Internal: the workers' rows of the published status, kept encoded: a status costs O(rows changed since the last one),
not O(workers), so thousands of idle workers cost a status no more than their heartbeats changed.

Our encoder lays a SchedulerStatus out root first, then what its pointers lead to in field order, and `workers` is its
last pointer field: the list of rows and everything they point to (names, resources) close the message, and every
pointer inside that section is relative to a place inside it. So the section is encoded once for every row, and
after that only a changed row's fixed-size part (its numbers; its name and resources never change) is encoded again and
copied over its slot. Each status encodes the rest (counts, counters) with no rows, appends the section, and points
the workers field at it and sets the segment size: byte for byte what encoding the whole status gives (the tests
check it), so monitors read it as before. Where that field's pointer sits is found by encoding at start, not assumed;
should our encoder ever lay the status out otherwise, the check at start fails and every status is encoded whole.

A row changes when its worker's load changes (free, sent, processed: WorkerLoads.file notes it in
`Placement.changed`) and at its heartbeat and retirement (the core notes it). A worker coming or going lays the
section out anew, at the next status, once however many came and went.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Union

from scaler.fastpath.wire import POINTER, SEGMENT_HEADER
from scaler.protocol import SchedulerStatus, WorkerStatus, encode
from scaler.scheduler.placement import Placement
from scaler.scheduler.state import WorkerState

_TAG_BYTES = 8  # a list of structs starts with a tag word: the element count, data words, pointer words


class _Layout:
    """Where a status puts its rows, learned from our encoder: the workers pointer, the size of a row's slot."""

    __slots__ = ("pointer_at", "empty_size", "slot_bytes", "slot_words", "data_bytes")

    def __init__(self, pointer_at: int, empty_size: int, slot_words: int, data_bytes: int) -> None:
        self.pointer_at = pointer_at  # offset of the workers field's pointer in the message
        self.empty_size = empty_size  # size of a status with no counters and no rows: where its rows would start
        self.slot_words = slot_words
        self.slot_bytes = slot_words * 8
        self.data_bytes = data_bytes  # a row's numbers: the part of its slot before its pointers


def _learn_layout() -> Optional[_Layout]:
    empty = encode(SchedulerStatus())
    one = encode(SchedulerStatus(workers=[WorkerStatus(name="w")]))
    # apart from the segment size (first word), the rows' pointer is the only word that differs before the rows
    differing = {at // 8 for at in range(8, len(empty)) if empty[at] != one[at]}
    if len(differing) != 1 or len(one) <= len(empty) + _TAG_BYTES:
        return None
    pointer_at = differing.pop() * 8
    _, tag_high = POINTER.unpack_from(one, len(empty))
    data_words, pointer_words = tag_high & 0xFFFF, tag_high >> 16
    layout = _Layout(pointer_at, len(empty), data_words + pointer_words, data_words * 8)
    # the proof: rows changed one by one, around counters, give what encoding the whole status gives
    rows = [WorkerStatus(name=name, previous_registrations=index) for index, name in enumerate(("a", "bb", "ccc"))]
    section = bytearray(_section(layout, rows))
    rows[1].sent = 7
    rows[1].cpu = 0.5
    _patch(layout, section, [(1, rows[1])])
    head = SchedulerStatus(clients=2, time_us=5)
    whole = SchedulerStatus(clients=2, time_us=5, workers=rows)
    return layout if _compose(layout, encode(head), section, len(rows)) == encode(whole) else None


def _section(layout: _Layout, rows: List[WorkerStatus]) -> bytes:
    """The rows' section as it closes an encoded status: their list, then what they point to."""
    return encode(SchedulerStatus(workers=rows))[layout.empty_size :]


def _patch(layout: _Layout, section: bytearray, changed: List[tuple]) -> None:
    """Write the numbers of the rows (slot, row) over their slots: encoded together, copied one by one."""
    encoded = _section(layout, [row for _, row in changed])
    data = layout.data_bytes
    step = layout.slot_bytes
    source = _TAG_BYTES
    for slot, _ in changed:
        at = _TAG_BYTES + slot * step
        section[at : at + data] = encoded[source : source + data]
        source += step


def _compose(layout: _Layout, head: bytes, section: Union[bytes, bytearray], count: int) -> bytes:
    """An encoded status with no rows (`head`), completed by the rows' section."""
    if not count:
        return head
    message = bytearray(head)
    start = len(message)
    at = layout.pointer_at
    POINTER.pack_into(message, at, (start - at - 8) >> 1 | 1, count * layout.slot_words << 3 | 7)
    SEGMENT_HEADER.pack_into(message, 0, 0, (start + len(section) - 8) >> 3)
    message += section
    return bytes(message)


class StatusRows:
    """The rows of the connected workers, in the order of `workers`, encoded and kept up to date between statuses."""

    __slots__ = ("_placement", "_layout", "_section", "_count", "_membership")

    def __init__(self, placement: Placement) -> None:
        self._placement = placement
        self._layout = _learn_layout()
        self._section = bytearray()
        self._count = 0
        self._membership = -1  # Placement.membership when the section was laid out

    def encode(self, status: SchedulerStatus, workers: Dict[bytes, WorkerState]) -> bytes:
        """`status` (its `workers` left empty) encoded with a row for every worker in `workers`."""
        placement = self._placement
        changed = placement.changed
        layout = self._layout
        if layout is None:  # the encoder lays statuses out otherwise: every row, every time
            for worker in changed:
                worker.row_changed = False
            changed.clear()
            status.workers = [refreshed_row(worker) for worker in workers.values()]
            return encode(status)
        if self._membership != placement.membership or len(changed) * 2 > len(workers):
            self._lay_out(layout, workers)
        elif changed:
            pending = [(worker.row_slot, refreshed_row(worker)) for worker in changed if worker.row_slot >= 0]
            for worker in changed:
                worker.row_changed = False
            changed.clear()
            if pending:
                _patch(layout, self._section, pending)
        return _compose(layout, encode(status), self._section, self._count)

    def _lay_out(self, layout: _Layout, workers: Dict[bytes, WorkerState]) -> None:
        """Every row encoded afresh, in the order of `workers` (a worker came or went, or most rows changed)."""
        placement = self._placement
        for worker in placement.changed:
            worker.row_changed = False
            worker.row_slot = -1  # a worker gone meanwhile keeps no slot
        placement.changed.clear()
        rows = []
        for slot, worker in enumerate(workers.values()):
            worker.row_slot = slot
            worker.row_changed = False
            rows.append(refreshed_row(worker))
        self._section = bytearray(_section(layout, rows)) if rows else bytearray()
        self._count = len(rows)
        self._membership = placement.membership


def refreshed_row(worker: WorkerState) -> WorkerStatus:
    """Its row, with the two fields that follow its load brought up to date."""
    row = worker.row
    row.free = worker.free_slots
    row.sent = len(worker.assigned)
    return row
