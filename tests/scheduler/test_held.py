"""Results held on workers, in the scheduler's core without sockets: where they are, relays, releases and lineage.

A worker with a data address keeps a large result and sends its size (TaskResult.heldBytes); the scheduler keeps the
location and the task that made it, never the bytes."""

from __future__ import annotations

from typing import Tuple

from scaler.protocol import (
    ObjectDelete,
    ObjectKind,
    ObjectPut,
    ObjectRequest,
    ObjectResponse,
    Task,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
)
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, WORKER_B, Harness, of_type

ADDRESS_A = "tcp://10.0.0.1:5001"
ADDRESS_B = "tcp://10.0.0.2:5002"
SIZE = 16 * 1024 * 1024


def held_on_a(fetches: bool = True) -> Tuple[Harness, Task]:
    """A task run on worker A, which holds its result."""
    harness = Harness()
    harness.connect_client(fetches_from_holders=fetches)
    harness.connect_worker(WORKER_A, data_address=ADDRESS_A)
    task = harness.task()
    out = harness.send(CLIENT, task)
    assert of_type(out[WORKER_A], Task)
    out = harness.send(WORKER_A, TaskResult(task_id=task.task_id, in_object=True, held_bytes=SIZE))
    (told,) = out[CLIENT]
    assert told.in_object and told.held_bytes == SIZE, "the client hears of it as the worker said it"
    assert not harness.core.objects[task.task_id].chunks, "the scheduler has no bytes of it"
    return harness, task


def test_a_client_that_fetches_is_told_where_and_its_delete_reaches_the_holder() -> None:
    harness, task = held_on_a()
    (where,) = harness.send(CLIENT, ObjectRequest(object_ids=[task.task_id]))[CLIENT]
    assert where == ObjectResponse(
        object_id=task.task_id,
        found=True,
        kind=ObjectKind.result,
        chunk_count=0,
        total_size=SIZE,
        holder_address=ADDRESS_A,
    )
    out = harness.send(CLIENT, ObjectDelete(object_ids=[task.task_id]))
    assert out[WORKER_A] == [ObjectDelete(object_ids=[task.task_id])]
    assert task.task_id not in harness.core.objects and not harness.core.workers[WORKER_A].held


def test_an_older_client_gets_the_bytes_relayed_chunk_by_chunk_and_nothing_is_kept() -> None:
    harness, task = held_on_a(fetches=False)
    out = harness.send(CLIENT, ObjectRequest(object_ids=[task.task_id]))
    assert out == {WORKER_A: [ObjectRequest(object_ids=[task.task_id], via_scheduler=True)]}
    chunks = [b"a" * 10, b"b" * 6]
    for index, chunk in enumerate(chunks):
        put = ObjectPut(
            object_id=task.task_id,
            kind=ObjectKind.result,
            payload=chunk,
            chunk_index=index,
            chunk_count=2,
            total_size=16,
        )
        (relayed,) = harness.send(WORKER_A, put)[CLIENT]
        assert (relayed.payload, relayed.chunk_index, relayed.chunk_count) == (chunk, index, 2)
        assert not harness.core.objects[task.task_id].chunks, "passed on, not kept"


def test_a_peer_that_asks_mid_relay_gets_a_whole_upload_of_its_own() -> None:
    harness, task = held_on_a(fetches=False)
    harness.connect_worker(WORKER_B)
    harness.send(CLIENT, ObjectRequest(object_ids=[task.task_id]))
    put = ObjectPut(object_id=task.task_id, kind=ObjectKind.result, payload=b"a", chunk_index=0, chunk_count=2)
    harness.send(WORKER_A, put)
    assert harness.send(WORKER_B, ObjectRequest(object_ids=[task.task_id])) == {}, "it waits for the next upload"
    last = ObjectPut(object_id=task.task_id, kind=ObjectKind.result, payload=b"b", chunk_index=1, chunk_count=2)
    out = harness.send(WORKER_A, last)
    assert [response.payload for response in out[CLIENT]] == [b"b"]
    assert out[WORKER_A] == [ObjectRequest(object_ids=[task.task_id], via_scheduler=True)], "uploaded again for B"
    for chunk in (put, last):
        out = harness.send(WORKER_A, chunk)
        assert list(out) == [WORKER_B], "only the late asker gets the second upload"


def test_a_result_lost_with_its_holder_is_made_again_and_the_waiting_client_told_where() -> None:
    harness, task = held_on_a()
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    out = harness.send(WORKER_A, WorkerDisconnect(reason="gone"))
    (again,) = of_type(out[WORKER_B], Task)
    assert again.task_id == task.task_id, "run again, on a worker that is still here"
    assert harness.send(CLIENT, ObjectRequest(object_ids=[task.task_id])) == {}, "the client waits for it"
    out = harness.send(WORKER_B, TaskResult(task_id=task.task_id, in_object=True, held_bytes=SIZE))
    (where,) = out[CLIENT]
    assert type(where) is ObjectResponse and where.holder_address == ADDRESS_B, "told where it is now, no new result"
    assert harness.core.recomputed_results == 1 and harness.core.finished_counts[TaskStatus.success] == 2


def test_a_lost_result_whose_held_input_was_freed_is_made_again_from_its_lineage() -> None:
    """first -> second, both held on A; first is freed once second read it. A dies before the client fetched second:
    first is made again from its recipe (the lineage kept for second's sake), then second from it, on B."""
    harness = Harness()
    harness.connect_client(fetches_from_holders=True)
    harness.connect_worker(WORKER_A, data_address=ADDRESS_A)
    first = harness.task(report_result=False)
    second = harness.task(dependencies=[first.task_id])
    harness.send(CLIENT, first, second)
    harness.send(WORKER_A, TaskResult(task_id=first.task_id, in_object=True, held_bytes=SIZE))
    out = harness.send(WORKER_A, TaskResult(task_id=second.task_id, in_object=True, held_bytes=SIZE))
    assert out[WORKER_A] == [ObjectDelete(object_ids=[first.task_id])], "read by its only consumer: freed"
    assert first.task_id in harness.core.lineage, "its recipe is kept while second is held"
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    out = harness.send(WORKER_A, WorkerDisconnect(reason="gone"))
    assert [task.task_id for task in of_type(out[WORKER_B], Task)] == [first.task_id], "inputs first"
    assert harness.send(CLIENT, ObjectRequest(object_ids=[second.task_id])) == {}, "the client waits for it"
    out = harness.send(WORKER_B, TaskResult(task_id=first.task_id, in_object=True, held_bytes=SIZE))
    assert [task.task_id for task in of_type(out[WORKER_B], Task)] == [second.task_id]
    out = harness.send(WORKER_B, TaskResult(task_id=second.task_id, in_object=True, held_bytes=SIZE))
    assert out[WORKER_B] == [ObjectDelete(object_ids=[first.task_id])], "made again for second only: freed again"
    (where,) = out[CLIENT]
    assert type(where) is ObjectResponse and where.holder_address == ADDRESS_B
    assert harness.core.recomputed_results == 2
    harness.send(CLIENT, ObjectDelete(object_ids=[second.task_id]))
    assert not harness.core.lineage and not harness.core.objects, "the client has it: every recipe goes"


def test_a_result_whose_remaking_fails_is_answered_not_found() -> None:
    harness, task = held_on_a()
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    harness.send(WORKER_A, WorkerDisconnect(reason="gone"))
    harness.send(CLIENT, ObjectRequest(object_ids=[task.task_id]))
    out = harness.send(WORKER_B, TaskResult(task_id=task.task_id, status=TaskStatus.failed, payload=b"e"))
    assert out[CLIENT] == [ObjectResponse(object_id=task.task_id, found=False)]
    assert task.task_id not in harness.core.objects


def test_a_graph_consumer_on_another_worker_gets_a_held_input_relayed() -> None:
    harness = Harness()
    harness.connect_client(fetches_from_holders=True)
    harness.connect_worker(WORKER_A, capacity=1, data_address=ADDRESS_A)
    first = harness.task(report_result=False)
    second = harness.task(dependencies=[first.task_id])
    harness.send(CLIENT, first, second)
    harness.connect_worker(WORKER_B, capacity=1)
    harness.send(WORKER_A, TaskResult(task_id=first.task_id, in_object=True, held_bytes=SIZE))
    assert harness.core.tasks[second.task_id].worker is not None
    consumer = harness.core.tasks[second.task_id].worker
    out = harness.send(consumer, ObjectRequest(object_ids=[first.task_id]))
    if consumer == WORKER_A:
        assert out == {WORKER_A: [ObjectRequest(object_ids=[first.task_id], via_scheduler=True)]}
    else:  # a worker that does not fetch from holders is relayed the bytes
        assert out == {WORKER_A: [ObjectRequest(object_ids=[first.task_id], via_scheduler=True)]}
    harness.send(WORKER_A, ObjectPut(object_id=first.task_id, kind=ObjectKind.result, payload=b"x", chunk_count=1))
    out = harness.send(consumer, TaskResult(task_id=second.task_id, payload=b"done"))
    assert out.get(WORKER_A) == [ObjectDelete(object_ids=[first.task_id])], "its only consumer is done: freed"


def test_a_graph_node_goes_where_most_of_its_held_input_bytes_are() -> None:
    harness = Harness()
    harness.connect_client(fetches_from_holders=True)
    harness.connect_worker(WORKER_A, data_address=ADDRESS_A)
    small, big = harness.task(report_result=False), harness.task(report_result=False)
    reader = harness.task(dependencies=[small.task_id, big.task_id])
    busy = [harness.task() for _ in range(3)]  # still running on A when the reader is placed
    harness.send(CLIENT, small, big, reader, *busy)
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)  # idle: the least loaded worker
    harness.send(WORKER_A, TaskResult(task_id=small.task_id, in_object=True, held_bytes=1000 * 1000))
    out = harness.send(WORKER_A, TaskResult(task_id=big.task_id, in_object=True, held_bytes=SIZE))
    assert [task.task_id for task in of_type(out.get(WORKER_A, []), Task)] == [reader.task_id], (
        "on the holder of its inputs, though B holds nothing"
    )
