"""Small graph results travel inside the Tasks that read them, so a graph node's worker fetches nothing."""

from __future__ import annotations

from scaler.config import DEFAULT_INLINE_LIMIT_BYTES
from scaler.protocol import (
    Argument,
    ArgumentKind,
    ObjectKind,
    ObjectPut,
    Task,
    TaskStatus,
    WorkerDisconnect,
)
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, WORKER_B, Harness, of_type, result


def graph_node(harness: Harness, *dependencies: bytes, **fields) -> Task:
    """A node reading its dependencies as two arguments each (positional and keyword), between inline ones."""
    task = harness.task(dependencies=list(dependencies), **fields)
    task.args = [Argument(kind=ArgumentKind.inline, data=b"first")]
    for dependency in dependencies:
        task.args.append(Argument(kind=ArgumentKind.task_ref, data=dependency))
        task.args.append(Argument(kind=ArgumentKind.task_ref, name="again", data=dependency))
    task.args.append(Argument(kind=ArgumentKind.inline, name="last", data=b"last"))
    return task


def test_a_small_result_reaches_its_consumer_inline_and_is_freed_at_once() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    source = harness.task(report_result=False)
    sink = graph_node(harness, source.task_id)
    harness.send(CLIENT, source, sink)
    out = harness.send(WORKER_A, result(source, payload=b"3"))
    (forwarded,) = of_type(out[WORKER_A], Task)
    inline = ArgumentKind.inline
    assert forwarded.args == [
        Argument(kind=inline, data=b"first"),
        Argument(kind=inline, data=b"3"),
        Argument(kind=inline, name="again", data=b"3"),
        Argument(kind=inline, name="last", data=b"last"),
    ]
    assert forwarded.dependencies == []
    assert (forwarded.task_id, forwarded.function_id) == (sink.task_id, sink.function_id)
    assert not harness.core.objects, "no consumer reads the result as an object any more"
    (final,) = harness.send(WORKER_A, result(sink, payload=b"4"))[CLIENT]
    assert final.payload == b"4" and not harness.core.tasks


def test_an_inlined_task_keeps_its_copies_when_it_runs_again_elsewhere() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    source = harness.task(report_result=False)
    sink = graph_node(harness, source.task_id)
    harness.send(CLIENT, source, sink)
    (forwarded,) = of_type(harness.send(WORKER_A, result(source, payload=b"3"))[WORKER_A], Task)
    harness.connect_worker(WORKER_B)
    out = harness.send(WORKER_A, WorkerDisconnect(reason="killed"))
    (again,) = of_type(out[WORKER_B], Task)
    assert again == forwarded and again.args[1].data == b"3"


def test_a_result_inlined_only_while_its_copies_fit_the_inline_limit() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(capacity=100)
    size = DEFAULT_INLINE_LIMIT_BYTES // 3 + 1  # three copies exceed the limit, two fit
    source = harness.task(report_result=False)
    slow = harness.task(report_result=False)
    ready_now = [graph_node(harness, source.task_id) for _ in range(2)]
    later = graph_node(harness, source.task_id, slow.task_id)
    harness.send(CLIENT, source, slow, *ready_now, later)
    out = harness.send(WORKER_A, result(source, payload=b"x" * size))
    forwarded = of_type(out[WORKER_A], Task)
    assert [task.task_id for task in forwarded] == [task.task_id for task in ready_now]
    # Three consumers when the first is released: too many copies, so it reads the object; the second is released
    # in the same step, but the first still counts (it has not finished): objects for both.
    assert all(task.args[1].kind == ArgumentKind.task_ref for task in forwarded)
    assert harness.core.objects[source.task_id].consumers == 3
    harness.send(WORKER_A, *(result(task) for task in ready_now))
    assert harness.core.objects[source.task_id].consumers == 1
    (last,) = of_type(harness.send(WORKER_A, result(slow, payload=b"s"))[WORKER_A], Task)
    assert [argument.data for argument in last.args[1:5]] == [b"x" * size, b"x" * size, b"s", b"s"]
    assert not harness.core.objects


def test_a_large_result_stays_an_object_beside_an_inlined_one() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    small, large = harness.task(report_result=False), harness.task(report_result=False)
    sink = graph_node(harness, small.task_id, large.task_id)
    harness.send(CLIENT, small, large, sink)
    harness.send(WORKER_A, result(small, payload=b"s"))
    payload = b"L" * (DEFAULT_INLINE_LIMIT_BYTES + 1)
    put = ObjectPut(object_id=large.task_id, kind=ObjectKind.result, payload=payload, total_size=len(payload))
    out = harness.send(WORKER_A, put, result(large, payload=b"", in_object=True))
    (forwarded,) = of_type(out[WORKER_A], Task)
    assert [argument.kind for argument in forwarded.args] == [ArgumentKind.inline] * 3 + [ArgumentKind.task_ref] * 2 + [
        ArgumentKind.inline
    ]
    assert forwarded.dependencies == [large.task_id]
    assert set(harness.core.objects) == {large.task_id}
    harness.send(WORKER_A, result(sink))
    assert not harness.core.objects and not harness.core.tasks


def test_a_node_sent_after_its_dependency_finished_gets_the_result_inline() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(capacity=100)
    source, slow = harness.task(report_result=False), harness.task(report_result=False)
    waiting = graph_node(harness, source.task_id, slow.task_id)  # keeps the source's result stored meanwhile
    harness.send(CLIENT, source, slow, waiting)
    harness.send(WORKER_A, result(source, payload=b"3"))
    late = graph_node(harness, source.task_id)
    (forwarded,) = of_type(harness.send(CLIENT, late)[WORKER_A], Task)
    assert forwarded.args[1] == Argument(kind=ArgumentKind.inline, data=b"3") and forwarded.dependencies == []
    assert harness.core.objects[source.task_id].consumers == 1  # the waiting node's
    (released,) = of_type(harness.send(WORKER_A, result(slow, payload=b"s"))[WORKER_A], Task)
    assert released.dependencies == [] and not harness.core.objects


def test_a_failed_dependency_is_never_inlined() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    source = harness.task(report_result=False)
    sink = graph_node(harness, source.task_id)
    harness.send(CLIENT, source, sink)
    out = harness.send(WORKER_A, result(source, TaskStatus.failed, payload=b"exc"))
    assert WORKER_A not in out and out[CLIENT][0].status == TaskStatus.failed
    assert not harness.core.objects and not harness.core.tasks
