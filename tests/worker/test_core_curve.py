"""The worker core with CurveZMQ keys: its data address accepts the keys the scheduler sends (DataKeys), it answers
with the key it serves under, holds results only after that exchange, and fetches with the holder's key."""

from __future__ import annotations

from pathlib import Path

from zmq.utils import z85

from scaler import config
from scaler.io.curve import generate_key_pair
from scaler.io.curve_keys import load_peer_keys
from scaler.protocol import (
    PROTOCOL_VERSION,
    DataKeys,
    HelloReply,
    ObjectKind,
    ObjectPut,
    ObjectResponse,
    TaskResult,
)
from scaler.worker.instructions import FetchData
from tests.worker.core_harness import FUNCTION, Harness

ADDRESS = "tcp://10.0.0.1:5000"
PEER_KEY = b"p" * 32


def _harness(tmp_path: Path) -> Harness:
    generate_key_pair(str(tmp_path), "worker")
    public_file, _ = generate_key_pair(str(tmp_path), "scheduler")
    return Harness(
        data_address=ADDRESS,
        curve_secret_key_file=str(tmp_path / "worker.key_secret"),
        curve_server_key_file=public_file,
    )


def _reply() -> HelloReply:
    return HelloReply(
        protocol_version=PROTOCOL_VERSION, accepted=True, heartbeat_interval_ms=1000, holds_on_workers=True
    )


def _run_large(harness: Harness) -> list:
    harness.serve(FUNCTION)
    harness.send(harness.task())
    sim = harness.active
    sim.read_orders()
    sim.start_next()
    sim.finish(payload=b"x" * (config.DEFAULT_INLINE_LIMIT_BYTES + 1))
    return harness.report(sim.number)


def test_the_keys_before_the_reply_open_the_data_address_and_are_answered(tmp_path: Path) -> None:
    harness = _harness(tmp_path)
    out = harness.send(DataKeys(authorized_keys=[PEER_KEY]), _reply())
    keys = load_peer_keys(str(tmp_path / "worker.key_secret"), str(tmp_path / "scheduler.key"))
    assert keys is not None
    assert out == [DataKeys(public_key=z85.decode(keys.public_key))]
    assert harness.data_keys == [frozenset({PEER_KEY})]
    assert harness.core.holds_results
    (told,) = _run_large(harness)
    assert type(told) is TaskResult and told.held_bytes, "held: others can fetch it here"


def test_a_scheduler_that_sends_no_keys_gets_results_put(tmp_path: Path) -> None:
    """With CurveZMQ, nobody could fetch from a data address whose keys the scheduler never said (an older one)."""
    harness = _harness(tmp_path)
    harness.send(_reply())
    assert not harness.core.holds_results and harness.data_keys == []
    assert [type(message) for message in _run_large(harness)] == [ObjectPut, TaskResult]


def test_a_held_input_is_fetched_with_its_holders_key(tmp_path: Path) -> None:
    harness = _harness(tmp_path)
    harness.send(DataKeys(authorized_keys=[PEER_KEY]), _reply())
    harness.serve(FUNCTION)
    harness.send(harness.task(b"h" * 16))
    found = dict(found=True, kind=ObjectKind.result, chunk_count=0, total_size=9)
    holder = "tcp://10.0.0.2:5000"
    harness.send(ObjectResponse(object_id=b"h" * 16, holder_address=holder, holder_public_key=PEER_KEY, **found))
    assert harness.fetches == [FetchData(holder, b"h" * 16, PEER_KEY)]
