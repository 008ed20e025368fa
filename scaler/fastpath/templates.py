"""Internal: messages that differ only in the content of some of their Data fields, encoded by filling a template.

Cap'n Proto lays a message out by the sizes of its fields, never by their content: two messages whose variable Data
fields have the same lengths (and whose other fields are equal) encode to the same bytes except inside those fields.
So the encoding of one such message, cut around its variable fields, encodes every other message of that shape with
one `b"".join`: no message object, no per-field work. A client's calls are such messages (a Task differs from the
next one of the same function in its id and its arguments' bytes), and this makes them several times cheaper to
encode than building and encoding each Task.

The cut is found without knowing the layout: the message is encoded with each variable field in turn filled with
0xff bytes and the others with zeros; the bytes that change are that field's. A template is kept only if every
variable field shows up as one run of exactly its length and a message with other contents encodes to what the
template gives, so anything the encoder does differently (a schema change, an unusual layout) falls back to it.

Finding the cut encodes the message once per variable field, so a template pays only for a shape met about that many
times (worth_a_template): a graph node reading a thousand results, met once, is encoded once, not a thousand times.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from scaler.fastpath.codec import encode

# values (bytes, one per variable field, in the caller's order) -> the message they describe
Builder = Callable[[Sequence[bytes]], object]


class Template:
    """The constant pieces of one message shape and where each variable value goes between them."""

    __slots__ = ("encode", "constants", "order")

    def __init__(self, constants: List[bytes], order: List[int]) -> None:
        # encode(values) -> bytes: constants[0], then each value in `order` followed by the next constant
        self.encode: Callable[[Sequence[bytes]], bytes] = _filler(constants, order)
        # for a caller that joins many messages into one: their pieces, joined once (success_results.SuccessResults)
        self.constants = tuple(constants)
        self.order = tuple(order)


def _filler(constants: List[bytes], order: List[int]) -> Callable[[Sequence[bytes]], bytes]:
    """The fastest join for this shape: spelled out for one or two values in their own order (calls of one or two
    arguments), a loop otherwise."""
    join = b"".join
    if order == [0]:
        first, last = constants

        def fill_one(values: Sequence[bytes]) -> bytes:
            return join((first, values[0], last))

        return fill_one
    if order == [0, 1]:
        first, middle, last = constants

        def fill_two(values: Sequence[bytes]) -> bytes:
            return join((first, values[0], middle, values[1], last))

        return fill_two
    pairs = list(zip(order, constants[1:]))
    head = constants[0]

    def fill(values: Sequence[bytes]) -> bytes:
        parts = [head]
        for index, constant in pairs:
            parts.append(values[index])
            parts.append(constant)
        return join(parts)

    return fill


def worth_a_template(seen: Dict[Any, int], shape: Any, values: int) -> bool:
    """Count one more meeting of `shape`, of `values` variable fields, in `seen` (shape -> meetings); whether it has
    now been met often enough that its template costs less than encoding it in full every time (make_template encodes
    it values + 2 times). A shape worth it leaves `seen`: its template is kept by the caller."""
    count = seen.get(shape, 0) + 1
    if count > values:
        seen.pop(shape, None)
        return True
    seen[shape] = count
    return False


def make_template(build: Builder, lengths: Sequence[int]) -> Optional[Template]:
    """The template of the messages `build` makes from values of these lengths, or None if none can be trusted."""
    zeros = [bytes(length) for length in lengths]
    base = encode(build(zeros))
    spans: List[Tuple[int, int]] = []  # (start, value index), for every value that is not empty
    for index, length in enumerate(lengths):
        if not length:
            continue
        marked = list(zeros)
        marked[index] = b"\xff" * length
        changed = _changed(base, encode(build(marked)))
        if changed is None or changed[1] - changed[0] != length:
            return None
        spans.append((changed[0], index))
    spans.sort()
    constants: List[bytes] = []
    order: List[int] = []
    cursor = 0
    for start, index in spans:
        if start < cursor:
            return None  # overlapping runs: not a layout by lengths
        constants.append(base[cursor:start])
        order.append(index)
        cursor = start + lengths[index]
    constants.append(base[cursor:])
    template = Template(constants, order)
    sample = [os.urandom(length) for length in lengths]
    if template.encode(sample) != encode(build(sample)):
        return None
    return template


def _changed(base: bytes, other: bytes) -> Optional[Tuple[int, int]]:
    """The first and last-plus-one positions where `other` differs from `base`, if the lengths agree and it does."""
    if len(base) != len(other) or base == other:
        return None
    start = 0
    while base[start] == other[start]:
        start += 1
    end = len(base)
    while base[end - 1] == other[end - 1]:
        end -= 1
    return start, end
