"""Large objects kept by the clients that sent them, in the scheduler's core without sockets: the scheduler keeps
their size and where they are (ObjectPut.heldBySender), tells workers where to fetch them, relays them for workers
that cannot, and frees them everywhere when their client deletes them or leaves."""

from __future__ import annotations

from typing import Tuple

from scaler.protocol import (
    Argument,
    ArgumentKind,
    ClientDisconnect,
    ObjectDelete,
    ObjectKind,
    ObjectPut,
    ObjectRequest,
    ObjectResponse,
    Task,
)
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, WORKER_B, Harness, of_type, result

CLIENT_ADDRESS = "tcp://10.0.0.9:6001"
OBJECT = b"o" * 16
SIZE = 256 * 1024 * 1024


def kept(fetches: bool = True) -> Tuple[Harness, Task]:
    """A client that keeps a 256 MiB object, a worker that runs a task reading it."""
    harness = Harness()
    reply = harness.connect_client(fetches_from_holders=True, data_address=CLIENT_ADDRESS)
    assert reply.holds_on_clients
    harness.connect_worker(WORKER_A, fetches_from_holders=fetches)
    put = ObjectPut(object_id=OBJECT, kind=ObjectKind.object, chunk_count=0, total_size=SIZE, held_by_sender=True)
    assert harness.send(CLIENT, put) == {}, "nothing to say: the scheduler knows where it is"
    stored = harness.core.objects[OBJECT]
    assert (stored.holder, stored.total_size, stored.chunks) == (CLIENT, SIZE, []), "its size and where, no bytes"
    task = harness.task()
    task.args = [Argument(kind=ArgumentKind.object_ref, data=OBJECT)]
    assert of_type(harness.send(CLIENT, task)[WORKER_A], Task)
    return harness, task


def test_a_worker_is_told_to_fetch_it_from_its_client() -> None:
    harness, _ = kept()
    (where,) = harness.send(WORKER_A, ObjectRequest(object_ids=[OBJECT]))[WORKER_A]
    assert where == ObjectResponse(
        object_id=OBJECT,
        found=True,
        kind=ObjectKind.object,
        chunk_count=0,
        total_size=SIZE,
        holder_address=CLIENT_ADDRESS,
    )


def test_an_older_worker_gets_it_relayed_from_its_client_and_nothing_is_kept() -> None:
    harness, _ = kept(fetches=False)
    out = harness.send(WORKER_A, ObjectRequest(object_ids=[OBJECT]))
    assert out == {CLIENT: [ObjectRequest(object_ids=[OBJECT], via_scheduler=True)]}, "the client is asked to upload"
    for index, chunk in enumerate((b"x" * 10, b"y" * 6)):
        upload = ObjectPut(object_id=OBJECT, payload=chunk, chunk_index=index, chunk_count=2, total_size=16)
        (relayed,) = harness.send(CLIENT, upload)[WORKER_A]
        assert (relayed.payload, relayed.chunk_index, relayed.chunk_count) == (chunk, index, 2)
        assert not harness.core.objects[OBJECT].chunks, "passed on, not kept"


def test_an_upload_the_client_cannot_make_fails_the_waiting_worker_cleanly() -> None:
    harness, _ = kept(fetches=False)
    harness.send(WORKER_A, ObjectRequest(object_ids=[OBJECT]))
    out = harness.send(CLIENT, ObjectResponse(object_id=OBJECT, found=False))
    assert out == {WORKER_A: [ObjectResponse(object_id=OBJECT, found=False)]}


def test_deleting_it_or_leaving_tells_every_worker_that_fetched_it() -> None:
    for goodbye in (ObjectDelete(object_ids=[OBJECT]), ClientDisconnect()):
        harness, task = kept()
        harness.connect_worker(WORKER_B, fetches_from_holders=True)
        harness.send(WORKER_A, ObjectRequest(object_ids=[OBJECT]))
        harness.send(WORKER_B, ObjectRequest(object_ids=[OBJECT]))
        if type(goodbye) is ObjectDelete:
            harness.send(WORKER_A, result(task))
        out = harness.send(CLIENT, goodbye)
        for worker in (WORKER_A, WORKER_B):
            assert ObjectDelete(object_ids=[OBJECT]) in of_type(out.get(worker, []), ObjectDelete), (goodbye, worker)
        assert OBJECT not in harness.core.objects


def test_a_client_without_a_data_address_cannot_say_it_keeps_an_object() -> None:
    harness = Harness()
    harness.connect_client(fetches_from_holders=True)
    put = ObjectPut(object_id=OBJECT, kind=ObjectKind.object, chunk_count=0, total_size=SIZE, held_by_sender=True)
    harness.send(CLIENT, put)
    assert OBJECT not in harness.core.objects, "refused, as misuse, and nothing recorded"
