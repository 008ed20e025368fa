"""Results held on workers, in the scheduler's core without sockets: where they are, relays, releases and lineage.

A worker with a data address keeps a large result and sends its size (TaskResult.heldBytes); the scheduler keeps the
location and the task that made it, never the bytes."""

from __future__ import annotations

from typing import Dict, List, Tuple

from scaler.protocol import (
    PROTOCOL_VERSION,
    BalanceRequest,
    BalanceResponse,
    ClientDisconnect,
    ClientHeartbeat,
    Goodbye,
    HeldResult,
    Hello,
    HelloReply,
    ObjectDelete,
    ObjectKind,
    ObjectPut,
    ObjectRequest,
    ObjectResponse,
    Role,
    Task,
    TaskCancel,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerHeartbeat,
    WorkerRetire,
)
from scaler.scheduler.core import LOCALITY_SLACK
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, WORKER_B, Harness, of_type

WORKER_C = b"W|test|4|c"
WORKER_D = b"W|test|5|d"
WORKER_E = b"W|test|6|e"

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


def test_a_peer_that_asks_again_gets_each_chunk_once_and_from_the_first() -> None:
    """A client whose connection resumed asks again for what it waits for: before any chunk, it still gets each chunk
    once; past the first, the chunks it may have missed are gone, and it gets the next upload whole."""
    harness, task = held_on_a(fetches=False)
    request = ObjectRequest(object_ids=[task.task_id])
    harness.send(CLIENT, request)
    assert harness.send(CLIENT, request) == {}, "no second upload asked for"
    first = ObjectPut(object_id=task.task_id, kind=ObjectKind.result, payload=b"a", chunk_index=0, chunk_count=2)
    assert [response.chunk_index for response in harness.send(WORKER_A, first)[CLIENT]] == [0]
    assert harness.send(CLIENT, request) == {}, "it waits for the next upload"
    last = ObjectPut(object_id=task.task_id, kind=ObjectKind.result, payload=b"b", chunk_index=1, chunk_count=2)
    out = harness.send(WORKER_A, last)
    assert CLIENT not in out, "no chunk of the upload it may have half missed"
    assert out[WORKER_A] == [ObjectRequest(object_ids=[task.task_id], via_scheduler=True)]
    relayed = [response for chunk in (first, last) for response in harness.send(WORKER_A, chunk)[CLIENT]]
    assert [(response.chunk_index, response.payload) for response in relayed] == [(0, b"a"), (1, b"b")]


def test_the_rest_of_an_upload_of_a_result_freed_meanwhile_is_dropped_quietly() -> None:
    """The client drops a result its holder is uploading for a relay: the later chunks find nothing, and are not held
    against the holder as malformed (enough of those and a worker is dropped)."""
    harness, task = held_on_a(fetches=False)
    harness.send(CLIENT, ObjectRequest(object_ids=[task.task_id]))
    harness.send(CLIENT, ObjectDelete(object_ids=[task.task_id]))
    for index in range(4):
        put = ObjectPut(object_id=task.task_id, kind=ObjectKind.result, payload=b"a", chunk_index=index, chunk_count=4)
        assert harness.send(WORKER_A, put) == {}
    assert harness.core.workers[WORKER_A].malformed == 0


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


def place_reader(busy_on_a: int) -> Tuple[Harness, Task, Dict[bytes, List[object]]]:
    """A reader of two results held on A (1 MB and 16 MiB), placed while A runs `busy_on_a` other tasks and B idles."""
    harness = Harness()
    harness.connect_client(fetches_from_holders=True)
    harness.connect_worker(WORKER_A, data_address=ADDRESS_A)
    small, big = harness.task(report_result=False), harness.task(report_result=False)
    reader = harness.task(dependencies=[small.task_id, big.task_id])
    busy = [harness.task() for _ in range(busy_on_a)]  # still running on A when the reader is placed
    harness.send(CLIENT, small, big, reader, *busy)
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)  # idle: the least loaded worker
    harness.send(WORKER_A, TaskResult(task_id=small.task_id, in_object=True, held_bytes=1000 * 1000))
    out = harness.send(WORKER_A, TaskResult(task_id=big.task_id, in_object=True, held_bytes=SIZE))
    return harness, reader, out


def test_a_graph_node_goes_where_most_of_its_held_input_bytes_are() -> None:
    _, reader, out = place_reader(busy_on_a=LOCALITY_SLACK)
    assert [task.task_id for task in of_type(out.get(WORKER_A, []), Task)] == [reader.task_id], (
        "on the holder of its inputs, though B holds nothing and runs nothing"
    )


def test_a_graph_node_leaves_a_holder_much_busier_than_the_least_loaded_worker() -> None:
    _, reader, out = place_reader(busy_on_a=LOCALITY_SLACK + 1)
    assert [task.task_id for task in of_type(out.get(WORKER_B, []), Task)] == [reader.task_id], (
        "on the idle worker, which fetches its inputs, rather than queued behind the holder's tasks"
    )


def test_graph_nodes_balanced_away_from_their_inputs_holder_go_to_the_idle_worker() -> None:
    harness = Harness(balance_interval_seconds=1.0)
    harness.connect_client(fetches_from_holders=True)
    harness.connect_worker(WORKER_A, data_address=ADDRESS_A)
    source = harness.task(report_result=False)
    readers = [harness.task(dependencies=[source.task_id]) for _ in range(4)]
    harness.send(CLIENT, source, *readers)
    out = harness.send(WORKER_A, TaskResult(task_id=source.task_id, in_object=True, held_bytes=SIZE))
    assert len(of_type(out[WORKER_A], Task)) == 4, "the only worker, and the holder"
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    assert harness.tick(advance=1.5)[WORKER_A] == [BalanceRequest(count=2)]
    moved = [reader.task_id for reader in readers[2:]]
    out = harness.send(WORKER_A, BalanceResponse(task_ids=moved))
    assert [task.task_id for task in of_type(out.get(WORKER_B, []), Task)] == moved, (
        "to the idle worker, not back to the holder they were taken from (within LOCALITY_SLACK of it)"
    )


# ---- a retiring holder hands what it holds over ----------------------------------------------------------------------

ADDRESS_C = "tcp://10.0.0.3:5003"


def taken(task: Task, size: int = SIZE) -> ObjectResponse:
    """A worker's answer to ObjectRequest.takeFrom: it holds the result now."""
    return ObjectResponse(object_id=task.task_id, found=True, kind=ObjectKind.result, chunk_count=0, total_size=size)


def test_a_retiring_holder_hands_its_result_over_and_leaves_once_it_is_taken() -> None:
    harness, task = held_on_a()
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    out = harness.send(WORKER_A, WorkerRetire(reason="SIGTERM", deadline_ms=30_000))
    assert out[WORKER_B] == [ObjectRequest(object_ids=[task.task_id], take_from=ADDRESS_A)], "B fetches it from A"
    assert not of_type(out.get(WORKER_A, []), Goodbye), "A stays while B takes what it holds"
    assert harness.tick(1.0).get(WORKER_A) is None
    out = harness.send(WORKER_B, taken(task))
    assert of_type(out[WORKER_A], Goodbye) == [Goodbye(reason="retired: every task you held is settled", retired=True)]
    assert harness.core.objects[task.task_id].holder == WORKER_B and WORKER_A not in harness.core.workers
    (where,) = harness.send(CLIENT, ObjectRequest(object_ids=[task.task_id]))[CLIENT]
    assert where.holder_address == ADDRESS_B, "the client is told where it is now"
    assert harness.core.recomputed_results == 0 and harness.core.finished_counts[TaskStatus.success] == 1, "ran once"
    out = harness.send(CLIENT, ObjectDelete(object_ids=[task.task_id]))
    assert out[WORKER_B] == [ObjectDelete(object_ids=[task.task_id])], "its new holder drops it once the client has it"


def test_results_go_to_the_workers_holding_the_fewest_bytes_and_never_to_a_retiring_one() -> None:
    harness = Harness()
    harness.connect_client(fetches_from_holders=True)
    harness.connect_worker(WORKER_A, data_address=ADDRESS_A)
    tasks = [harness.task() for _ in range(4)]
    harness.send(CLIENT, *tasks)
    harness.connect_worker(WORKER_C, data_address=ADDRESS_C)
    on_c = harness.task()
    assert of_type(harness.send(CLIENT, on_c)[WORKER_C], Task) == [on_c], "A is the busier"
    harness.send(WORKER_C, TaskResult(task_id=on_c.task_id, in_object=True, held_bytes=2 * SIZE))
    for task in tasks:
        harness.send(WORKER_A, TaskResult(task_id=task.task_id, in_object=True, held_bytes=SIZE))
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    harness.connect_worker(WORKER_D, data_address="tcp://10.0.0.4:5004", takes_handoffs=False)  # an older worker
    harness.connect_worker(WORKER_E, data_address="tcp://10.0.0.5:5005")
    harness.send(WORKER_E, WorkerRetire(reason="SIGTERM", deadline_ms=30_000))
    out = harness.send(WORKER_A, WorkerRetire(reason="SIGTERM", deadline_ms=30_000))
    ids = [task.task_id for task in tasks]
    # B holds nothing, C 2 x SIZE: B takes two, then at a tie C (connected first) one, then B the last
    assert out[WORKER_B] == [ObjectRequest(object_ids=[ids[0], ids[1], ids[3]], take_from=ADDRESS_A)]
    assert out[WORKER_C] == [ObjectRequest(object_ids=[ids[2]], take_from=ADDRESS_A)]
    assert WORKER_D not in out and WORKER_E not in out, "not an older worker, nor a retiring one"


def test_a_result_made_on_a_retiring_worker_is_handed_over_as_it_is_made() -> None:
    harness = Harness()
    harness.connect_client(fetches_from_holders=True)
    harness.connect_worker(WORKER_A, data_address=ADDRESS_A)
    task = harness.task()
    harness.send(CLIENT, task)
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    out = harness.send(WORKER_A, WorkerRetire(reason="SIGTERM", deadline_ms=30_000))
    assert WORKER_B not in out, "nothing held yet"
    harness.send(WORKER_A, BalanceResponse(task_ids=[]))  # it runs the task
    out = harness.send(WORKER_A, TaskResult(task_id=task.task_id, in_object=True, held_bytes=SIZE))
    assert out[WORKER_B] == [ObjectRequest(object_ids=[task.task_id], take_from=ADDRESS_A)]
    assert WORKER_A in harness.core.workers and not of_type(out.get(WORKER_A, []), Goodbye)
    out = harness.send(WORKER_B, taken(task))
    assert of_type(out[WORKER_A], Goodbye)[0].retired


def test_a_result_that_could_not_be_taken_is_made_again_once_its_holder_left() -> None:
    harness, task = held_on_a()
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    harness.send(WORKER_A, WorkerRetire(reason="SIGTERM", deadline_ms=30_000))
    out = harness.send(WORKER_B, ObjectResponse(object_id=task.task_id, found=False))  # its fetch failed
    assert of_type(out[WORKER_A], Goodbye)[0].retired
    assert [again.task_id for again in of_type(out[WORKER_B], Task)] == [task.task_id], "made again, from lineage"
    assert harness.core.recomputed_results == 1


def test_past_its_deadline_a_retiring_holder_leaves_and_a_late_copy_is_dropped_with_the_result() -> None:
    harness, task = held_on_a()
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    harness.send(WORKER_A, WorkerRetire(reason="SIGTERM", deadline_ms=1_000))
    out = harness.tick(1.5)
    (goodbye,) = of_type(out[WORKER_A], Goodbye)
    assert goodbye.retired and "made again" in goodbye.reason
    assert [again.task_id for again in of_type(out[WORKER_B], Task)] == [task.task_id]
    assert harness.send(WORKER_B, taken(task)) == {}, "its fetch ended late: kept, as the result is still needed"
    harness.send(WORKER_B, TaskResult(task_id=task.task_id, in_object=True, held_bytes=SIZE))
    out = harness.send(CLIENT, ObjectDelete(object_ids=[task.task_id]))
    assert out[WORKER_B] == [ObjectDelete(object_ids=[task.task_id])]
    assert not harness.core.objects


def test_a_taker_that_leaves_lets_the_retiring_holder_go() -> None:
    harness, task = held_on_a()
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    harness.send(WORKER_A, WorkerRetire(reason="SIGTERM", deadline_ms=30_000))
    harness.connect_worker(WORKER_C, data_address=ADDRESS_C)
    out = harness.send(WORKER_B, WorkerDisconnect(reason="gone"))
    assert of_type(out[WORKER_A], Goodbye)[0].retired, "nothing left to wait for"
    assert [again.task_id for again in of_type(out[WORKER_C], Task)] == [task.task_id]


def test_a_result_freed_while_it_is_handed_over_is_dropped_by_its_taker() -> None:
    harness, task = held_on_a()
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    harness.send(WORKER_A, WorkerRetire(reason="SIGTERM", deadline_ms=30_000))
    out = harness.send(CLIENT, ObjectDelete(object_ids=[task.task_id]))  # the client fetched it from A meanwhile
    assert of_type(out[WORKER_A], Goodbye)[0].retired
    assert harness.send(WORKER_B, taken(task)) == {WORKER_B: [ObjectDelete(object_ids=[task.task_id])]}


def test_a_relay_under_way_from_a_retiring_holder_starts_over_from_its_new_holder() -> None:
    harness, task = held_on_a(fetches=False)
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    harness.send(CLIENT, ObjectRequest(object_ids=[task.task_id]))
    first = ObjectPut(object_id=task.task_id, kind=ObjectKind.result, payload=b"a", chunk_index=0, chunk_count=2)
    harness.send(WORKER_A, first)
    harness.send(WORKER_A, WorkerRetire(reason="SIGTERM", deadline_ms=30_000))
    out = harness.send(WORKER_B, taken(task, 2))
    assert out[WORKER_B] == [ObjectRequest(object_ids=[task.task_id], via_scheduler=True)], "uploaded again, from B"
    last = ObjectPut(object_id=task.task_id, kind=ObjectKind.result, payload=b"b", chunk_index=1, chunk_count=2)
    assert WORKER_A not in harness.core.workers and harness.send(WORKER_A, last)[WORKER_A][0].reconnect
    for put in (first, last):
        (relayed,) = harness.send(WORKER_B, put)[CLIENT]
        assert (relayed.payload, relayed.chunk_index) == (put.payload, put.chunk_index), "from chunk 0 again"


def test_a_retiring_holder_no_worker_can_relieve_leaves_at_once_and_its_results_are_made_again() -> None:
    harness, task = held_on_a()
    harness.connect_worker(WORKER_B)  # no data address: it cannot serve what it would hold
    out = harness.send(WORKER_A, WorkerRetire(reason="SIGTERM", deadline_ms=30_000))
    assert of_type(out[WORKER_A], Goodbye)[0].retired
    assert [again.task_id for again in of_type(out[WORKER_B], Task)] == [task.task_id]


# ---- results held across a scheduler restart -------------------------------------------------------------------------


def restarted(client_timeout_seconds: float = 30.0) -> Tuple[Harness, Task]:
    """A scheduler started again: its client comes back, and worker A registers again holding a result of a task."""
    harness = Harness(client_timeout_seconds=client_timeout_seconds)
    harness.connect_client(fetches_from_holders=True)
    task = harness.task()
    reply = harness.connect_worker(WORKER_A, data_address=ADDRESS_A, held_results={task.task_id: SIZE})
    assert reply.adopts_held_results, "it tells the worker to keep them"
    return harness, task


def register_holding(harness: Harness, peer: bytes, address: str, object_ids: List[bytes]) -> Dict[bytes, list]:
    """A worker registers again holding these results (SIZE each); what the scheduler sent."""
    hello = Hello(
        protocol_version=PROTOCOL_VERSION,
        role=Role.worker,
        name=peer.decode(),
        capacity=10,
        data_address=address,
        held_results=[HeldResult(object_id=object_id, size=SIZE) for object_id in object_ids],
    )
    return harness.send(peer, hello)


def test_a_resubmitted_task_whose_result_is_held_is_answered_without_running() -> None:
    harness, task = restarted()
    assert harness.outbox() == {}, "the worker keeps it"
    out = harness.send(CLIENT, task)
    assert out == {CLIENT: [TaskResult(task_id=task.task_id, in_object=True, held_bytes=SIZE)]}, "not run again"
    (where,) = harness.send(CLIENT, ObjectRequest(object_ids=[task.task_id]))[CLIENT]
    assert where.holder_address == ADDRESS_A and where.total_size == SIZE
    out = harness.send(CLIENT, ObjectDelete(object_ids=[task.task_id]))
    assert out == {WORKER_A: [ObjectDelete(object_ids=[task.task_id])]}
    assert harness.core.adopted_results == 1 and not harness.core.objects


def test_a_resubmitted_graph_reads_its_held_intermediate_where_it_is() -> None:
    harness = Harness()
    harness.connect_client(fetches_from_holders=True)
    first = harness.task(report_result=False)
    second = harness.task(dependencies=[first.task_id])
    harness.connect_worker(WORKER_A, data_address=ADDRESS_A, held_results={first.task_id: SIZE})
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    out = harness.send(CLIENT, first, second)  # one frame, dependencies first, as a client resubmits a graph
    assert of_type(out[WORKER_A], Task) == [second] and WORKER_B not in out, "only the node not held runs, on A"
    assert CLIENT not in out, "nobody asked for the intermediate"
    out = harness.send(WORKER_A, TaskResult(task_id=second.task_id, payload=b"done"))
    assert out[WORKER_A] == [ObjectDelete(object_ids=[first.task_id])], "its reader is done: freed"
    assert [result.task_id for result in of_type(out[CLIENT], TaskResult)] == [second.task_id]


def test_a_task_resubmitted_before_its_holder_registered_again_is_answered_when_it_does() -> None:
    harness = Harness()
    harness.connect_client(fetches_from_holders=True)
    task = harness.task()
    assert harness.send(CLIENT, task) == {}, "no worker yet: it waits"
    out = register_holding(harness, WORKER_A, ADDRESS_A, [task.task_id])
    assert [type(message) for message in out[WORKER_A]] == [HelloReply], "registered, and given no task"
    assert out[CLIENT] == [TaskResult(task_id=task.task_id, in_object=True, held_bytes=SIZE)]
    assert not harness.core.tasks and harness.core.objects[task.task_id].holder == WORKER_A


def test_held_results_nobody_claims_in_time_are_dropped() -> None:
    harness, task = restarted(client_timeout_seconds=5.0)
    for _ in range(2):
        assert harness.tick(2.45) == {}
        harness.send(CLIENT, ClientHeartbeat())
        harness.send(WORKER_A, WorkerHeartbeat())
    assert harness.tick(0.2) == {WORKER_A: [ObjectDelete(object_ids=[task.task_id])]}
    out = harness.send(CLIENT, task)
    assert of_type(out[WORKER_A], Task) == [task], "claimed too late: it runs"


def test_a_worker_registering_again_drops_what_is_known_or_runs_elsewhere() -> None:
    harness, task = held_on_a()
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    running = harness.task()
    harness.send(CLIENT, running)
    assert harness.core.tasks[running.task_id].worker is not None
    # the same scheduler: A's connection dropped and it registers again under a new identity, with what it holds
    out = register_holding(harness, WORKER_C, ADDRESS_A, [task.task_id, running.task_id])
    assert out[WORKER_C][1:] == [ObjectDelete(object_ids=[task.task_id, running.task_id])]
    assert harness.core.objects[task.task_id].holder == WORKER_A, "known here under its old identity"


def test_a_claimed_task_canceled_in_the_same_frame_frees_what_it_claimed() -> None:
    harness, task = restarted()
    out = harness.send(CLIENT, task, TaskCancel(task_ids=[task.task_id]))
    assert out[WORKER_A] == [ObjectDelete(object_ids=[task.task_id])]
    assert [result.status for result in of_type(out[CLIENT], TaskResult)] == [TaskStatus.canceled]
    assert not harness.core.objects and not harness.core.tasks


def test_held_results_leave_with_their_worker_and_their_tasks_run() -> None:
    harness, task = restarted()
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    harness.send(WORKER_A, WorkerDisconnect(reason="gone"))
    out = harness.send(CLIENT, task)
    assert of_type(out[WORKER_B], Task) == [task]


def test_a_result_two_workers_report_is_kept_on_the_first_one() -> None:
    harness, task = restarted()
    out = register_holding(harness, WORKER_B, ADDRESS_B, [task.task_id, task.task_id])
    assert out[WORKER_B][1:] == [ObjectDelete(object_ids=[task.task_id])], "the second copy goes, once"
    out = harness.send(CLIENT, task)
    assert out == {CLIENT: [TaskResult(task_id=task.task_id, in_object=True, held_bytes=SIZE)]}
    assert harness.core.objects[task.task_id].holder == WORKER_A


# ---- found by a seeded fuzzer of the core (uploads, cancels and reconnections crossing held results) ----------------


def test_an_upload_of_an_attempt_that_died_gives_way_to_the_held_result_of_the_next() -> None:
    """A worker without a data address uploads half a result, then dies before its TaskResult; the task runs again on
    a worker that holds its result: that one is where the result is, and it is told to drop it once released."""
    harness = Harness()
    harness.connect_client(fetches_from_holders=True)
    harness.connect_worker(WORKER_A)
    task = harness.task()
    harness.send(CLIENT, task)
    half = ObjectPut(object_id=task.task_id, kind=ObjectKind.result, payload=b"half", chunk_count=2, total_size=8)
    harness.send(WORKER_A, half)
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    harness.send(WORKER_A, WorkerDisconnect(reason="killed"))
    harness.send(WORKER_B, TaskResult(task_id=task.task_id, in_object=True, held_bytes=8))
    assert harness.core.objects[task.task_id].holder == WORKER_B
    (answer,) = harness.send(CLIENT, ObjectRequest(object_ids=[task.task_id]))[CLIENT]
    assert answer.found and answer.holder_address == ADDRESS_B
    out = harness.send(CLIENT, ObjectDelete(object_ids=[task.task_id]))
    assert out[WORKER_B] == [ObjectDelete(object_ids=[task.task_id])]


def test_a_holder_removed_while_its_result_s_last_reader_is_canceled_there() -> None:
    """Settling the canceled reader as its worker is removed frees the result that worker held: not a lost one."""
    harness, held = held_on_a()
    reader = harness.task(dependencies=[held.task_id])
    harness.send(CLIENT, reader)
    assert reader.task_id in harness.core.workers[WORKER_A].assigned
    harness.send(CLIENT, ObjectDelete(object_ids=[held.task_id]))  # the reader still needs it
    harness.send(CLIENT, TaskCancel(task_ids=[reader.task_id]))
    out = harness.send(WORKER_A, WorkerDisconnect(reason="killed"))
    assert [r.status for r in of_type(out[CLIENT], TaskResult)] == [TaskStatus.canceled]
    assert not harness.core.objects and not harness.core.tasks


def test_a_held_result_made_from_an_uploaded_one_is_made_again_after_that_is_freed() -> None:
    """A large result uploaded by a worker without a data address is kept on the scheduler, as a small one: its
    recipe is kept too, so a held result made from it can be made again once it is freed."""
    harness = Harness()
    harness.connect_client(fetches_from_holders=True)
    harness.connect_worker(WORKER_A)
    uploaded = harness.task()
    harness.send(CLIENT, uploaded)
    chunks = [
        ObjectPut(object_id=uploaded.task_id, kind=ObjectKind.result, payload=b"1234", chunk_count=2, total_size=8),
        ObjectPut(object_id=uploaded.task_id, kind=ObjectKind.result, payload=b"5678", chunk_index=1, chunk_count=2),
    ]
    harness.send(WORKER_A, *chunks, TaskResult(task_id=uploaded.task_id, in_object=True))
    harness.send(WORKER_A, WorkerDisconnect(reason="scaled down"))
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    made = harness.task(dependencies=[uploaded.task_id])
    harness.send(CLIENT, made)
    harness.send(WORKER_B, TaskResult(task_id=made.task_id, in_object=True, held_bytes=8))
    harness.send(CLIENT, ObjectDelete(object_ids=[uploaded.task_id]))  # the client has it
    harness.connect_worker(WORKER_C, data_address="tcp://10.0.0.3:5003")
    out = harness.send(WORKER_B, WorkerDisconnect(reason="killed"))
    assert [t.task_id for t in of_type(out[WORKER_C], Task)] == [uploaded.task_id], "its input first"
    assert made.task_id in harness.core.objects, "being made again, not lost"


def test_a_worker_registering_again_drops_a_freed_result_kept_only_as_lineage() -> None:
    """A result freed while its holder's connection dropped (the delete did not reach it), whose recipe is kept for a
    held result made from it: the holder lists it as it registers again, and is told to drop it."""
    harness, held = held_on_a()
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    made = harness.task(dependencies=[held.task_id])
    harness.send(CLIENT, made)
    worker = harness.core.tasks[made.task_id].worker
    assert worker is not None
    harness.send(worker, TaskResult(task_id=made.task_id, in_object=True, held_bytes=SIZE))
    harness.send(CLIENT, ObjectDelete(object_ids=[held.task_id]))
    assert held.task_id in harness.core.lineage
    out = register_holding(harness, WORKER_C, ADDRESS_A, [held.task_id])
    assert out[WORKER_C][1:] == [ObjectDelete(object_ids=[held.task_id])]
    assert not harness.core._unclaimed


def test_the_rest_of_an_upload_whose_client_left_is_dropped_quietly() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    task = harness.task()
    harness.send(CLIENT, task)
    harness.send(CLIENT, ClientDisconnect())
    for index in range(2):
        put = ObjectPut(
            object_id=task.task_id, kind=ObjectKind.result, payload=b"1234", chunk_index=index, chunk_count=2
        )
        harness.send(WORKER_A, put)
    assert harness.core.workers[WORKER_A].malformed == 0
