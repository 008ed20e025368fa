"""Held results made again after their holder was lost, meeting a retry, a release, a new reader or a peer leaving,
in the scheduler's core without sockets (the harness validates the core after every message)."""

from __future__ import annotations

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

WORKER_C = b"W|test|4|c"
ADDRESS_A = "tcp://10.0.0.1:5001"
ADDRESS_B = "tcp://10.0.0.2:5002"
ADDRESS_C = "tcp://10.0.0.3:5003"
SIZE = 16 * 1024 * 1024


def _held_on_a(harness: Harness, **fields) -> Task:
    """A task whose large result worker A holds, its client still to fetch it."""
    harness.connect_client(fetches_from_holders=True)
    harness.connect_worker(WORKER_A, data_address=ADDRESS_A)
    task = harness.task(**fields)
    harness.send(CLIENT, task)
    harness.send(WORKER_A, TaskResult(task_id=task.task_id, in_object=True, held_bytes=SIZE))
    return task


def test_a_remaking_that_fails_with_a_retry_left_keeps_the_result_it_makes() -> None:
    harness = Harness()
    task = _held_on_a(harness, retries=1)
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    out = harness.send(WORKER_A, WorkerDisconnect(reason="gone"))
    assert [sent.task_id for sent in of_type(out[WORKER_B], Task)] == [task.task_id]
    assert harness.send(CLIENT, ObjectRequest(object_ids=[task.task_id])) == {}  # it waits for the remaking

    out = harness.send(WORKER_B, TaskResult(task_id=task.task_id, status=TaskStatus.failed, payload=b"flaky"))
    assert CLIENT not in out, "the client is told nothing while the remaking runs again"
    assert task.task_id in harness.core.objects

    out = harness.send(WORKER_B, TaskResult(task_id=task.task_id, in_object=True, held_bytes=SIZE))
    assert of_type(out[CLIENT], ObjectResponse)[0].holder_address == ADDRESS_B
    assert harness.core.objects[task.task_id].holder == WORKER_B


def test_a_result_released_while_made_again_is_kept_for_a_reader_lost_after() -> None:
    """x is made again (A left); its client releases it meanwhile; then r, held on B and made from x, is lost too:
    r's remaking reads the x being made, whose record comes back."""
    harness = Harness()
    harness.connect_client(fetches_from_holders=True)
    harness.connect_worker(WORKER_A, capacity=1, data_address=ADDRESS_A)
    x = harness.task()
    harness.send(CLIENT, x)
    harness.send(WORKER_A, TaskResult(task_id=x.task_id, in_object=True, held_bytes=SIZE))
    harness.send(CLIENT, harness.task())  # takes A's one slot: r goes to B
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    r = harness.task(dependencies=[x.task_id])
    assert of_type(harness.send(CLIENT, r)[WORKER_B], Task) == [r]
    harness.send(WORKER_B, TaskResult(task_id=r.task_id, in_object=True, held_bytes=SIZE))
    harness.connect_worker(WORKER_C, data_address=ADDRESS_C)
    harness.send(WORKER_A, WorkerDisconnect(reason="gone"))  # x is made again, on C
    harness.send(CLIENT, ObjectDelete(object_ids=[x.task_id]))  # the client had fetched x before A left
    assert x.task_id not in harness.core.objects

    harness.send(WORKER_B, WorkerDisconnect(reason="gone"))  # r is lost: made again from the x being made
    assert harness.core.tasks[r.task_id].pending_dependencies == 1
    out = harness.send(WORKER_C, TaskResult(task_id=x.task_id, in_object=True, held_bytes=SIZE))
    assert [sent.task_id for sent in of_type(out[WORKER_C], Task)] == [r.task_id], "r runs where x is"
    out = harness.send(WORKER_C, TaskResult(task_id=r.task_id, in_object=True, held_bytes=SIZE))
    assert of_type(out[WORKER_C], ObjectDelete) == [ObjectDelete(object_ids=[x.task_id])], "x freed once r is made"
    assert harness.core.objects[r.task_id].holder == WORKER_C


def test_a_node_submitted_on_a_result_being_made_again_keeps_it_until_it_ran() -> None:
    harness = Harness()
    x = _held_on_a(harness)
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    harness.send(WORKER_A, WorkerDisconnect(reason="gone"))
    y = harness.task(dependencies=[x.task_id])
    harness.send(CLIENT, y)
    out = harness.send(WORKER_B, TaskResult(task_id=x.task_id, in_object=True, held_bytes=SIZE))
    assert [sent.task_id for sent in of_type(out[WORKER_B], Task)] == [y.task_id]

    out = harness.send(CLIENT, ObjectDelete(object_ids=[x.task_id]))  # the client is done with x; y is not
    assert WORKER_B not in out, "x stays on B while y, queued there, reads it"
    out = harness.send(WORKER_B, TaskResult(task_id=y.task_id, payload=b"y"))
    assert ObjectDelete(object_ids=[x.task_id]) in of_type(out[WORKER_B], ObjectDelete)
    assert x.task_id not in harness.core.objects


def test_a_result_made_again_small_skips_a_worker_that_waited_for_it_and_left() -> None:
    harness = Harness()
    x = _held_on_a(harness)
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    harness.send(WORKER_A, WorkerDisconnect(reason="gone"))
    harness.send(WORKER_B, ObjectRequest(object_ids=[x.task_id]))  # B waits for the remaking
    harness.connect_worker(WORKER_C)  # no data address: its results come inline
    out = harness.send(WORKER_B, WorkerDisconnect(reason="gone"))
    assert [sent.task_id for sent in of_type(out[WORKER_C], Task)] == [x.task_id]
    out = harness.send(WORKER_C, TaskResult(task_id=x.task_id, payload=b"x" * 100))
    assert WORKER_B not in out
    assert harness.core.objects[x.task_id].chunk_count == 1, "kept for its client"


def test_a_held_result_read_from_a_small_one_kept_here_is_made_again_with_it() -> None:
    """s is small but read by two nodes, too large to copy into both: kept here as an object, then freed once both
    ran. Its recipe stays while they are held, so that losing them makes s again first."""
    harness = Harness()
    harness.connect_client(fetches_from_holders=True)
    harness.connect_worker(WORKER_A, data_address=ADDRESS_A)
    s = harness.task(report_result=False)
    r1 = harness.task(dependencies=[s.task_id])
    r2 = harness.task(dependencies=[s.task_id])
    harness.send(CLIENT, s, r1, r2)
    harness.send(WORKER_A, TaskResult(task_id=s.task_id, payload=b"s" * 40_000))
    assert harness.core.objects[s.task_id].chunk_count == 1
    harness.send(WORKER_A, TaskResult(task_id=r1.task_id, in_object=True, held_bytes=SIZE))
    harness.send(WORKER_A, TaskResult(task_id=r2.task_id, in_object=True, held_bytes=SIZE))
    assert s.task_id not in harness.core.objects and s.task_id in harness.core.lineage

    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    out = harness.send(WORKER_A, WorkerDisconnect(reason="gone"))
    assert [sent.task_id for sent in of_type(out[WORKER_B], Task)] == [s.task_id], "s first"
    out = harness.send(WORKER_B, TaskResult(task_id=s.task_id, payload=b"s" * 40_000))
    assert sorted(sent.task_id for sent in of_type(out[WORKER_B], Task)) == sorted([r1.task_id, r2.task_id])
    for reader in (r1, r2):
        harness.send(WORKER_B, TaskResult(task_id=reader.task_id, in_object=True, held_bytes=SIZE))
        assert harness.core.objects[reader.task_id].holder == WORKER_B
    assert s.task_id not in harness.core.objects, "s freed again once both were made"


def test_a_node_on_a_result_being_made_again_that_nothing_held_was_made_from() -> None:
    """x is released while made again, and no held result was made from it (no recipe kept for it): a node naming x
    (its task runs, so its id is known) brings its record back, with the lineage references its recipe needs."""
    harness = Harness()
    x = _held_on_a(harness)
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    harness.send(WORKER_A, WorkerDisconnect(reason="gone"))
    harness.send(CLIENT, ObjectDelete(object_ids=[x.task_id]))
    assert x.task_id not in harness.core.objects and x.task_id not in harness.core.lineage
    y = harness.task(dependencies=[x.task_id])
    harness.send(CLIENT, y)
    out = harness.send(WORKER_B, TaskResult(task_id=x.task_id, in_object=True, held_bytes=SIZE))
    assert [sent.task_id for sent in of_type(out[WORKER_B], Task)] == [y.task_id]


def test_small_results_kept_here_keep_no_recipe_while_nothing_held_was_made_from_them() -> None:
    """A ladder of graph nodes whose small results are each read by two nodes (kept here as objects): with no held
    result anywhere, nothing can need their recipes, and none is kept as they are freed; memory follows the running
    frontier, not the graph."""
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=1)
    tasks = []
    layer: list = []
    for _ in range(50):
        dependencies = [task.task_id for task in layer] or None
        layer = [harness.task(dependencies=dependencies, report_result=False) for _ in range(2)]
        tasks.extend(layer)
    harness.send(CLIENT, *tasks)
    for task in tasks[:-4]:
        harness.send(WORKER_A, TaskResult(task_id=task.task_id, payload=b"v" * 40_000))
    assert not harness.core.lineage and not harness.core._lineage_refs


def test_a_large_result_made_again_on_a_worker_that_holds_nothing_is_what_it_uploads() -> None:
    harness = Harness()
    x = _held_on_a(harness)
    harness.connect_worker(WORKER_C)  # no data address: it uploads what it makes, in chunks
    out = harness.send(WORKER_A, WorkerDisconnect(reason="gone"))
    assert [sent.task_id for sent in of_type(out[WORKER_C], Task)] == [x.task_id]
    assert harness.send(CLIENT, ObjectRequest(object_ids=[x.task_id])) == {}  # it waits
    for index in range(2):
        chunk = b"z" * 10
        put = ObjectPut(object_id=x.task_id, kind=ObjectKind.result, payload=chunk, chunk_index=index, chunk_count=2)
        assert harness.send(WORKER_C, put) == {}
    out = harness.send(WORKER_C, TaskResult(task_id=x.task_id, in_object=True))
    assert b"".join(response.payload for response in of_type(out[CLIENT], ObjectResponse)) == b"z" * 20


def test_a_client_waiting_for_a_result_made_again_that_asks_for_its_bytes_gets_them_relayed() -> None:
    """It first asked where the result is (to fetch it from its holder), then, its holder out of reach, for the bytes
    through the scheduler: once made again, the result is relayed to it, not pointed at."""
    harness = Harness()
    x = _held_on_a(harness)
    harness.connect_worker(WORKER_B, data_address=ADDRESS_B)
    harness.send(WORKER_A, WorkerDisconnect(reason="gone"))
    assert harness.send(CLIENT, ObjectRequest(object_ids=[x.task_id])) == {}
    assert harness.send(CLIENT, ObjectRequest(object_ids=[x.task_id], via_scheduler=True)) == {}
    out = harness.send(WORKER_B, TaskResult(task_id=x.task_id, in_object=True, held_bytes=SIZE))
    assert CLIENT not in out, "not told where it is"
    assert out[WORKER_B] == [ObjectRequest(object_ids=[x.task_id], via_scheduler=True)], "its holder uploads it"
