"""Seeded fuzzing of decode_frame: 100,000 random and mutated frames, each must decode or raise ProtocolError.

Runs on CPython and PyPy. Any other exception (IndexError, struct.error, MemoryError...) fails the test, and so
does a hang (timeout). Accepted frames must also re-encode to something that decodes to the same thing.
"""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path
from typing import Callable

import pytest

from scaler.protocol import ProtocolError, decode_frame, encode

pytestmark = pytest.mark.timeout(120)

SEED = 1234
ITERATIONS = 100_000
VECTOR_DIR = Path(__file__).parent / "vectors"


def corpus() -> list[bytes]:
    frames = []
    for path in sorted(VECTOR_DIR.glob("*.json")):
        for vector in json.loads(path.read_text(encoding="utf-8"))["vectors"]:
            frames.append(bytes.fromhex(vector["encoded"]))
    return frames


def random_pointer(rng: random.Random) -> bytes:
    """A word that is likely to be interpreted as a pointer of some kind, with mostly small offsets and sizes."""
    kind = rng.randrange(4)
    offset = rng.choice([rng.randint(-8, 40), rng.randint(-(1 << 29), (1 << 29) - 1), -1, 0])
    if kind == 2:
        low = rng.randrange(64) << 3 | rng.randrange(2) << 2 | 2
        return struct.pack("<II", low & 0xFFFFFFFF, rng.choice([0, 1, 2, rng.randrange(1 << 32)]))
    high = rng.choice([rng.randrange(1 << 32), rng.randrange(8) | rng.randrange(64) << 3, rng.randrange(8) << 16 | 3])
    return struct.pack("<iI", offset << 2 | kind, high)


def flip_bits(rng: random.Random, data: bytearray) -> None:
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)


def overwrite_word(rng: random.Random, data: bytearray) -> None:
    if len(data) < 8:
        return
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data) // 8) * 8
        data[at : at + 8] = random_pointer(rng)


def overwrite_bytes(rng: random.Random, data: bytearray) -> None:
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] = rng.choice([0, 0xFF, 0x7F, 0x80, 1, rng.randrange(256)])


def truncate(rng: random.Random, data: bytearray) -> None:
    del data[rng.randrange(len(data)) :]


def extend(rng: random.Random, data: bytearray) -> None:
    data += rng.choice([bytes(rng.randrange(1, 24)), rng.randbytes(rng.randrange(1, 64)), bytes(data)])


def random_segment_table(rng: random.Random, data: bytearray) -> None:
    count = rng.choice([1, 2, 3, rng.randrange(1, 600), rng.randrange(1 << 32)])
    sizes = [rng.choice([0, 1, 2, len(data) // 8, rng.randrange(1 << 32)]) for _ in range(min(count, 5))]
    table = struct.pack(f"<I{len(sizes)}I", (count - 1) & 0xFFFFFFFF, *sizes)
    data[: len(table)] = table


MUTATIONS: list[Callable[[random.Random, bytearray], None]] = [
    flip_bits,
    overwrite_word,
    overwrite_word,
    overwrite_bytes,
    truncate,
    extend,
    random_segment_table,
]


def make_frame(rng: random.Random, frames: list[bytes]) -> bytes:
    choice = rng.random()
    if choice < 0.05:
        return rng.randbytes(rng.randrange(0, 128))
    if choice < 0.12:
        first, second = rng.choice(frames), rng.choice(frames)
        return first[: rng.randrange(len(first) + 1)] + second[rng.randrange(len(second) + 1) :]
    data = bytearray(rng.choice(frames))
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if data:
            rng.choice(MUTATIONS)(rng, data)
    return bytes(data)


def test_fuzz_decode_frame() -> None:
    rng = random.Random(SEED)
    frames = corpus()
    outcomes = {"decoded": 0, "rejected": 0}
    for _ in range(ITERATIONS):
        data = make_frame(rng, frames)
        try:
            messages = decode_frame(data)
        except ProtocolError:
            outcomes["rejected"] += 1
            continue
        outcomes["decoded"] += 1
        for msg in messages:
            encoded = encode(msg)
            assert encode(decode_frame(encoded)[0]) == encoded
    assert outcomes["decoded"] > ITERATIONS // 100 and outcomes["rejected"] > ITERATIONS // 2, outcomes
