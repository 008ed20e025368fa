"""Data addresses with CurveZMQ, in the scheduler's core without sockets: a peer serving data is sent the keys its
data address is to accept and answers with the key it serves under, which requesters are told with its address."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
from zmq.utils import z85

from scaler.io.curve_keys import load_peer_keys
from scaler.protocol import (
    PROTOCOL_VERSION,
    DataKeys,
    Hello,
    HelloReply,
    ObjectKind,
    ObjectRequest,
    ObjectResponse,
    Role,
    Task,
    TaskResult,
)
from scaler.testing.curve_files import make_key_files
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, WORKER_B, Harness, of_type

ADDRESS_A = "tcp://10.0.0.1:5001"
ADDRESS_B = "tcp://10.0.0.2:5002"
SIZE = 16 * 1024 * 1024


def _raw(path: Path) -> bytes:
    keys = load_peer_keys(str(path.with_suffix(".key_secret")), str(path))
    assert keys is not None
    return z85.decode(keys.public_key)


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    return make_key_files(tmp_path, ["worker", "client"])


def _curve_harness(keys: Path) -> Harness:
    return Harness(
        curve_secret_key_file=str(keys / "scheduler.key_secret"), curve_authorized_keys_dir=str(keys / "authorized")
    )


def _hello(harness: Harness, peer: bytes, role: int, data_address: str) -> List[object]:
    hello = Hello(
        protocol_version=PROTOCOL_VERSION,
        role=role,
        name=peer.decode(),
        capacity=10,
        task_policies=True,
        data_address=data_address,
        fetches_from_holders=True,
    )
    return harness.send(peer, hello)[peer]


def test_a_peer_serving_data_is_sent_the_authorized_keys_before_its_reply(keys: Path) -> None:
    harness = _curve_harness(keys)
    offered, reply = _hello(harness, WORKER_A, Role.worker, ADDRESS_A)
    assert type(offered) is DataKeys and type(reply) is HelloReply and reply.accepted
    assert sorted(offered.authorized_keys) == sorted([_raw(keys / "worker.key"), _raw(keys / "client.key")])
    (reply,) = _hello(harness, WORKER_B, Role.worker, "")  # serves no data: nothing to accept
    assert type(reply) is HelloReply


def test_without_curve_no_keys_travel() -> None:
    harness = Harness()
    (reply,) = _hello(harness, WORKER_A, Role.worker, ADDRESS_A)
    assert type(reply) is HelloReply


def _held_on_a(keys: Path, holder_key: bool, client_key: bool):
    harness = _curve_harness(keys)
    _hello(harness, CLIENT, Role.client, "tcp://10.0.0.9:6001")
    _hello(harness, WORKER_A, Role.worker, ADDRESS_A)
    if client_key:
        assert harness.send(CLIENT, DataKeys(public_key=_raw(keys / "client.key"))) == {}
    if holder_key:
        assert harness.send(WORKER_A, DataKeys(public_key=_raw(keys / "worker.key"))) == {}
    task = harness.task()
    assert of_type(harness.send(CLIENT, task)[WORKER_A], Task)
    harness.send(WORKER_A, TaskResult(task_id=task.task_id, in_object=True, held_bytes=SIZE))
    return harness, task


def test_a_requester_is_told_the_holders_key_with_its_address(keys: Path) -> None:
    harness, task = _held_on_a(keys, holder_key=True, client_key=True)
    (where,) = harness.send(CLIENT, ObjectRequest(object_ids=[task.task_id]))[CLIENT]
    assert where == ObjectResponse(
        object_id=task.task_id,
        found=True,
        kind=ObjectKind.result,
        chunk_count=0,
        total_size=SIZE,
        holder_address=ADDRESS_A,
        holder_public_key=_raw(keys / "worker.key"),
    )


@pytest.mark.parametrize("holder_key, client_key", [(False, True), (True, False)])
def test_without_both_keys_the_bytes_are_relayed(keys: Path, holder_key: bool, client_key: bool) -> None:
    """A holder whose key is unknown cannot be reached; a requester that sent none (an older peer) cannot reach it."""
    harness, task = _held_on_a(keys, holder_key, client_key)
    out = harness.send(CLIENT, ObjectRequest(object_ids=[task.task_id]))
    assert out == {WORKER_A: [ObjectRequest(object_ids=[task.task_id], via_scheduler=True)]}


def test_a_key_from_a_peer_serving_no_data_or_of_the_wrong_size_is_refused(keys: Path) -> None:
    harness = _curve_harness(keys)
    _hello(harness, WORKER_A, Role.worker, ADDRESS_A)
    _hello(harness, WORKER_B, Role.worker, "")
    harness.send(WORKER_A, DataKeys(public_key=b"short"))
    harness.send(WORKER_B, DataKeys(public_key=_raw(keys / "worker.key")))
    assert harness.core.workers[WORKER_A].data_key == b"" and harness.core.workers[WORKER_B].data_key == b""
    assert harness.core.malformed == 2, "each counted as a malformed frame of its peer, and logged"
