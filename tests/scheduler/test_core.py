"""The sans-IO scheduler core, one transition at a time, with real encoded messages and no sockets."""

from __future__ import annotations

from typing import List, Tuple

from scaler.protocol import (
    PROTOCOL_VERSION,
    BalanceRequest,
    BalanceResponse,
    ClientDisconnect,
    ClientHeartbeat,
    DisconnectReply,
    Goodbye,
    HeartbeatEcho,
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
    TaskOutput,
    TaskResult,
    TaskStatus,
    WorkerDisconnect,
    WorkerHeartbeat,
    WorkerRetire,
    decode_frame,
    encode_many,
)
from scaler.scheduler.core import PROMPT_BALANCE_SECONDS
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, WORKER_B, Harness, of_type, result


def test_handshake_accepts_client_and_worker_with_timings() -> None:
    harness = Harness(heartbeat_interval_seconds=2.0, worker_timeout_seconds=7.0)
    client_reply = harness.connect_client()
    worker_reply = harness.connect_worker()
    assert client_reply.protocol_version == PROTOCOL_VERSION
    assert worker_reply.heartbeat_interval_ms == 2000
    assert worker_reply.peer_timeout_ms == 7000
    assert client_reply.forwards_task_output and worker_reply.forwards_task_output
    assert set(harness.core.clients) == {CLIENT} and set(harness.core.workers) == {WORKER_A}


def test_other_protocol_version_is_refused_with_reason_and_not_registered() -> None:
    harness = Harness()
    out = harness.send(CLIENT, Hello(protocol_version=PROTOCOL_VERSION + 1, role=Role.client))
    (reply,) = out[CLIENT]
    assert isinstance(reply, HelloReply) and not reply.accepted
    assert str(PROTOCOL_VERSION + 1) in reply.reason and str(PROTOCOL_VERSION) in reply.reason
    assert not harness.core.clients


def test_message_before_hello_gets_goodbye_and_is_ignored() -> None:
    harness = Harness()
    harness.connect_worker()
    out = harness.send(CLIENT, harness.task())
    (goodbye,) = out[CLIENT]
    assert isinstance(goodbye, Goodbye) and "Hello" in goodbye.reason
    assert WORKER_A not in out and not harness.core.tasks


def test_worker_with_zero_capacity_is_refused() -> None:
    harness = Harness()
    (reply,) = harness.send(WORKER_A, Hello(protocol_version=PROTOCOL_VERSION, role=Role.worker, capacity=0))[WORKER_A]
    assert not reply.accepted and "capacity" in reply.reason


def test_heartbeats_are_echoed_and_worker_stats_kept() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    (echo,) = harness.send(CLIENT, ClientHeartbeat(sent_at_us=42))[CLIENT]
    assert echo == HeartbeatEcho(sent_at_us=42, heartbeat_interval_ms=1000, peer_timeout_ms=30_000)  # the cadence
    (echo,) = harness.send(WORKER_A, WorkerHeartbeat(sent_at_us=7, queued=3, lag_us=900, agent_rss=5))[WORKER_A]
    assert echo.sent_at_us == 7
    worker = harness.core.workers[WORKER_A]
    assert (worker.row.queued, worker.row.lag_us, worker.row.agent_rss) == (3, 900, 5)


def test_task_and_result_are_forwarded_byte_for_byte() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    task = harness.task()
    out = harness.send(CLIENT, task)
    (forwarded,) = out[WORKER_A]
    assert forwarded == task
    sent_raw = harness.core.tasks[task.task_id].raw
    assert sent_raw == forwarded.raw
    out = harness.send(WORKER_A, result(task, payload=b"42"))
    (delivered,) = out[CLIENT]
    assert delivered == result(task, payload=b"42")
    assert not harness.core.tasks and not harness.core.workers[WORKER_A].assigned
    assert harness.core.finished_counts[TaskStatus.success] == 1


def test_task_output_reaches_the_client_as_the_worker_encoded_it_before_the_result() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    harness.connect_worker(WORKER_B)
    task = harness.task(stream_output=True)
    harness.send(CLIENT, task)
    owner, other = (WORKER_A, WORKER_B) if harness.core.workers[WORKER_A].assigned else (WORKER_B, WORKER_A)
    line = TaskOutput(task_id=task.task_id, stream=1, data=b"hello\n")
    frame = encode_many([line, result(task)])
    harness.core.receive(owner, decode_frame(frame), harness.now)
    assert b"".join(harness.core.take_outgoing()[CLIENT]) == frame, "forwarded byte for byte, output first"
    assert harness.core.received_counts[TaskOutput.WHICH] == 1 and harness.core.sent_counts[TaskOutput.WHICH] == 1
    # after its result the task is unknown: late output goes nowhere; so does output from a worker the task is not
    # assigned to, and output for a task whose client left
    assert harness.send(owner, line) == {}
    late = harness.task(stream_output=True)
    harness.send(CLIENT, late)
    owner, other = (WORKER_A, WORKER_B) if harness.core.workers[WORKER_A].assigned else (WORKER_B, WORKER_A)
    stray = TaskOutput(task_id=late.task_id, stream=0, data=b"x\n")
    assert harness.send(other, stray) == {}
    harness.send(CLIENT, ClientDisconnect())
    assert CLIENT not in harness.send(owner, stray)
    assert harness.core.malformed == 0


def test_a_client_may_not_send_task_output() -> None:
    harness = Harness()
    harness.connect_client()
    harness.send(CLIENT, TaskOutput(task_id=b"t" * 16, data=b"x"))
    assert harness.core.malformed == 1


def test_capacity_is_never_exceeded_and_the_queue_drains_as_results_return() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(capacity=2)
    tasks = [harness.task() for _ in range(5)]
    out = harness.send(CLIENT, *tasks)
    assert [t.task_id for t in out[WORKER_A]] == [t.task_id for t in tasks[:2]]
    out = harness.send(WORKER_A, result(tasks[0]))
    assert [t.task_id for t in of_type(out[WORKER_A], Task)] == [tasks[2].task_id]
    assert len(harness.core.workers[WORKER_A].assigned) == 2


def test_a_burst_spreads_evenly_over_workers() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=100)
    harness.connect_worker(WORKER_B, capacity=100)
    out = harness.send(CLIENT, *[harness.task() for _ in range(10)])
    assert len(out[WORKER_A]) == 5 and len(out[WORKER_B]) == 5


def test_least_loaded_worker_gets_new_tasks() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=100)
    harness.send(CLIENT, *[harness.task() for _ in range(4)])
    harness.connect_worker(WORKER_B, capacity=100)
    out = harness.send(CLIENT, *[harness.task() for _ in range(6)])
    assert len(out[WORKER_B]) == 5 and len(out[WORKER_A]) == 1


def test_tasks_wait_until_a_worker_arrives() -> None:
    harness = Harness()
    harness.connect_client()
    task = harness.task()
    assert harness.send(CLIENT, task) == {}
    hello = Hello(protocol_version=PROTOCOL_VERSION, role=Role.worker, capacity=5)
    out = harness.send(WORKER_A, hello)
    assert of_type(out[WORKER_A], Task) == [task]


def test_duplicate_task_id_and_too_many_waiting_are_refused() -> None:
    harness = Harness(max_tasks_waiting=2)
    harness.connect_client()
    first, second, third = harness.task(), harness.task(), harness.task()
    harness.send(CLIENT, first)
    (refusal,) = harness.send(CLIENT, Task(task_id=first.task_id, function_id=b"f"))[CLIENT]
    assert refusal.status == TaskStatus.refused and "already in use" in refusal.error_text
    harness.send(CLIENT, second)
    (refusal,) = harness.send(CLIENT, third)[CLIENT]
    assert refusal.task_id == third.task_id and refusal.status == TaskStatus.refused
    assert "too many tasks" in refusal.error_text


def test_cancel_of_a_waiting_task_answers_at_once() -> None:
    harness = Harness()
    harness.connect_client()
    task = harness.task()
    harness.send(CLIENT, task)
    (answer,) = harness.send(CLIENT, TaskCancel(task_ids=[task.task_id]))[CLIENT]
    assert answer.status == TaskStatus.canceled and answer.task_id == task.task_id
    assert not harness.core.tasks and harness.core.state_counts == [0, 0, 0, 0]


def test_cancel_of_an_assigned_task_goes_through_its_worker() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    task = harness.task()
    harness.send(CLIENT, task)
    out = harness.send(CLIENT, TaskCancel(task_ids=[task.task_id]))
    assert out == {WORKER_A: [TaskCancel(task_ids=[task.task_id])]}
    (answer,) = harness.send(WORKER_A, result(task, TaskStatus.canceled, payload=b""))[CLIENT]
    assert answer.status == TaskStatus.canceled
    assert not harness.core.tasks


def test_result_crossing_a_cancel_is_delivered_once() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    task = harness.task()
    harness.send(CLIENT, task)
    harness.send(CLIENT, TaskCancel(task_ids=[task.task_id]))
    (answer,) = harness.send(WORKER_A, result(task))[CLIENT]
    assert answer.status == TaskStatus.success
    assert harness.send(WORKER_A, result(task, TaskStatus.not_found, payload=b"")) == {}


def test_cancel_of_unknown_task_is_not_found() -> None:
    harness = Harness()
    harness.connect_client()
    (answer,) = harness.send(CLIENT, TaskCancel(task_ids=[b"nope"]))[CLIENT]
    assert answer == TaskResult(task_id=b"nope", status=TaskStatus.not_found)


def test_silent_worker_is_dropped_and_its_tasks_run_elsewhere() -> None:
    harness = Harness(worker_timeout_seconds=5.0)
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    tasks = [harness.task() for _ in range(3)]
    harness.send(CLIENT, *tasks)
    harness.tick(advance=3.0)
    harness.connect_worker(WORKER_B)
    out = harness.tick(advance=2.5)
    assert WORKER_A not in harness.core.workers
    assert [t.task_id for t in of_type(out[WORKER_B], Task)] == [t.task_id for t in tasks]


def test_task_that_kills_every_worker_fails_after_the_retry_limit() -> None:
    harness = Harness(task_retry_limit=2)
    harness.connect_client()
    task = harness.task()
    harness.connect_worker(WORKER_A)
    harness.send(CLIENT, task)
    out = harness.send(WORKER_A, WorkerDisconnect(reason="killed"))
    assert CLIENT not in out
    out = harness.send(WORKER_B, Hello(protocol_version=PROTOCOL_VERSION, role=Role.worker, capacity=5))
    assert of_type(out[WORKER_B], Task) == [task]
    out = harness.send(WORKER_B, WorkerDisconnect(reason="killed again"))
    (failure,) = out[CLIENT]
    assert failure.status == TaskStatus.worker_died and "2 workers" in failure.error_text


def test_canceling_task_on_a_dead_worker_ends_canceled() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    task = harness.task()
    harness.send(CLIENT, task)
    harness.send(CLIENT, TaskCancel(task_ids=[task.task_id]))
    (answer,) = harness.send(WORKER_A, WorkerDisconnect())[CLIENT]
    assert answer.status == TaskStatus.canceled


def test_client_disconnect_cancels_its_tasks_and_frees_its_objects() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    harness.send(CLIENT, ObjectPut(object_id=b"o1", kind=ObjectKind.object, payload=b"x"))
    queued, running = harness.task(), harness.task()
    harness.send(CLIENT, running, queued)
    out = harness.send(CLIENT, ClientDisconnect())
    assert out[CLIENT] == [DisconnectReply(accepted=True)]
    assert of_type(out[WORKER_A], TaskCancel)
    assert not harness.core.objects and not harness.core.clients


def test_silent_client_is_dropped() -> None:
    harness = Harness(client_timeout_seconds=10.0)
    harness.connect_client()
    harness.send(CLIENT, harness.task())
    harness.tick(advance=11.0)
    assert not harness.core.clients and not harness.core.tasks


def test_protected_scheduler_refuses_shutdown() -> None:
    harness = Harness(protected=True)
    harness.connect_client()
    (reply,) = harness.send(CLIENT, ClientDisconnect(shutdown_cluster=True))[CLIENT]
    assert not reply.accepted and "protected" in reply.reason
    assert not harness.core.stopping and CLIENT in harness.core.clients


def test_unprotected_shutdown_says_goodbye_to_everyone() -> None:
    harness = Harness(protected=False)
    harness.connect_client()
    other = b"C|test|9|other"
    harness.connect_client(other)
    harness.connect_worker()
    out = harness.send(CLIENT, ClientDisconnect(shutdown_cluster=True))
    assert out[CLIENT] == [DisconnectReply(accepted=True)]
    assert of_type(out[WORKER_A], Goodbye) and of_type(out[other], Goodbye)
    assert harness.core.stopping


def test_malformed_frames_are_counted_and_a_flooding_peer_dropped() -> None:
    harness = Harness(max_malformed_per_peer=3)
    harness.connect_worker()
    harness.core.receive_malformed(WORKER_A, "truncated", harness.now)
    harness.core.receive_malformed(WORKER_A, "truncated", harness.now)
    assert WORKER_A in harness.core.workers and harness.core.malformed == 2
    harness.core.receive_malformed(WORKER_A, "truncated", harness.now)
    assert WORKER_A not in harness.core.workers
    assert of_type(harness.outbox()[WORKER_A], Goodbye)


def test_message_of_the_wrong_role_counts_as_malformed() -> None:
    harness = Harness()
    harness.connect_worker()
    harness.send(WORKER_A, harness.task())
    assert harness.core.malformed == 1 and not harness.core.tasks


def test_objects_are_stored_chunked_served_and_deleted() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    harness.send(
        CLIENT,
        ObjectPut(object_id=b"big", kind=ObjectKind.object, payload=b"ab", chunk_index=0, chunk_count=2, total_size=4),
        ObjectPut(object_id=b"big", kind=ObjectKind.object, payload=b"cd", chunk_index=1, chunk_count=2, total_size=4),
    )
    out = harness.send(WORKER_A, ObjectRequest(object_ids=[b"big", b"missing"]))
    responses = out[WORKER_A]
    assert [(r.object_id, r.found, r.payload, r.chunk_index) for r in responses] == [
        (b"big", True, b"ab", 0),
        (b"big", True, b"cd", 1),
        (b"missing", False, b"", 0),
    ]
    out = harness.send(CLIENT, ObjectDelete(object_ids=[b"big"]))
    assert out.get(WORKER_A) == [ObjectDelete(object_ids=[b"big"])], "the worker it was sent to drops its copy"
    (gone,) = harness.send(WORKER_A, ObjectRequest(object_ids=[b"big"]))[WORKER_A]
    assert gone == ObjectResponse(object_id=b"big", found=False)


def test_a_client_that_leaves_has_its_objects_dropped_by_the_workers_that_fetched_them() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A)
    harness.connect_worker(WORKER_B)
    put = ObjectPut(
        object_id=b"kept", kind=ObjectKind.object, payload=b"ab", chunk_index=0, chunk_count=1, total_size=2
    )
    harness.send(CLIENT, put, ObjectPut(object_id=b"unused", kind=ObjectKind.object, payload=b"c", total_size=1))
    harness.send(WORKER_A, ObjectRequest(object_ids=[b"kept"]))
    out = harness.send(CLIENT, ClientDisconnect())
    assert out.get(WORKER_A) == [ObjectDelete(object_ids=[b"kept"])]
    assert WORKER_B not in out, "told only to the workers that fetched it"


def test_out_of_order_chunk_is_rejected() -> None:
    harness = Harness()
    harness.connect_client()
    harness.send(CLIENT, ObjectPut(object_id=b"x", payload=b"a", chunk_index=0, chunk_count=3))
    harness.send(CLIENT, ObjectPut(object_id=b"x", payload=b"c", chunk_index=2, chunk_count=3))
    assert harness.core.malformed == 1 and len(harness.core.objects[b"x"].chunks) == 1


def test_function_names_feed_the_per_function_counts() -> None:
    harness = Harness()
    harness.connect_client()
    harness.send(CLIENT, ObjectPut(object_id=b"f" * 16, kind=ObjectKind.function, name="calculate", payload=b"fn"))
    harness.send(CLIENT, harness.task(), harness.task())
    assert harness.core.function_tasks == {b"f" * 16: 2}
    assert harness.core.function_names[b"f" * 16] == "calculate"


def test_graph_node_waits_for_its_dependency_and_reads_its_large_result_object() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    source = harness.task(report_result=False)
    sink = harness.task(dependencies=[source.task_id])
    out = harness.send(CLIENT, source, sink)
    assert [t.task_id for t in out[WORKER_A]] == [source.task_id]
    large = b"3" * 100_000  # over the inline limit: the worker puts it as an object (small ones: test_graph_inline.py)
    put = ObjectPut(object_id=source.task_id, kind=ObjectKind.result, payload=large, total_size=len(large))
    out = harness.send(WORKER_A, put, result(source, payload=b"", in_object=True))
    assert CLIENT not in out  # not a requested key
    (forwarded,) = of_type(out[WORKER_A], Task)
    assert forwarded == sink, "a large result stays a taskRef, fetched by the worker"
    (stored,) = harness.send(WORKER_A, ObjectRequest(object_ids=[source.task_id]))[WORKER_A]
    assert stored.found and stored.payload == large and stored.kind == ObjectKind.result
    (final,) = harness.send(WORKER_A, result(sink, payload=b"4"))[CLIENT]
    assert final.payload == b"4"
    assert not harness.core.objects and not harness.core.tasks


def test_graph_failure_reaches_every_downstream_node_without_running_it() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    root = harness.task(report_result=False)
    middle = harness.task(dependencies=[root.task_id], report_result=False)
    leaf = harness.task(dependencies=[middle.task_id])
    harness.send(CLIENT, root, middle, leaf)
    out = harness.send(WORKER_A, result(root, TaskStatus.failed, payload=b"exc", error_text="Traceback: boom"))
    (failure,) = out[CLIENT]
    assert failure.task_id == leaf.task_id and failure.status == TaskStatus.failed
    assert (failure.payload, failure.error_text) == (b"exc", "Traceback: boom")
    assert WORKER_A not in out and not harness.core.tasks


def test_long_failing_chain_does_not_recurse() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    chain = [harness.task(report_result=False)]
    for _ in range(5000):
        chain.append(harness.task(dependencies=[chain[-1].task_id], report_result=False))
    harness.send(CLIENT, *chain)
    harness.send(WORKER_A, result(chain[0], TaskStatus.failed, payload=b""))
    assert not harness.core.tasks and harness.core.finished_counts[TaskStatus.failed] == 5001


def test_unknown_dependency_is_not_found() -> None:
    harness = Harness()
    harness.connect_client()
    (answer,) = harness.send(CLIENT, harness.task(dependencies=[b"ghost"]))[CLIENT]
    assert answer.status == TaskStatus.not_found and b"ghost".hex() in answer.error_text


def test_canceling_a_parent_cancels_its_nested_children() -> None:
    harness = Harness()
    harness.connect_client()
    parent = harness.task()
    child = harness.task(parent_task_id=parent.task_id)
    harness.send(CLIENT, parent, child)
    out = harness.send(CLIENT, TaskCancel(task_ids=[parent.task_id]))
    assert {r.task_id: r.status for r in out[CLIENT]} == {
        parent.task_id: TaskStatus.canceled,
        child.task_id: TaskStatus.canceled,
    }


def _eight_queued_on_a_then_b(balance_interval_seconds: float) -> Tuple[Harness, List[Task]]:
    """Worker A holds 8 tasks (it was alone when they came), then worker B connects, holding nothing."""
    harness = Harness(balance_interval_seconds=balance_interval_seconds)
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=100)
    queued = [harness.task() for _ in range(8)]
    harness.send(CLIENT, *queued)
    harness.connect_worker(WORKER_B, capacity=100)
    return harness, queued


def test_idle_worker_receives_queued_tasks_through_balancing() -> None:
    harness, tasks = _eight_queued_on_a_then_b(balance_interval_seconds=1.0)
    out = harness.tick(advance=1.5)
    (request,) = out[WORKER_A]
    assert request == BalanceRequest(count=4)
    assert harness.tick(advance=1.5) == {}  # one request at a time per worker
    moved = [t.task_id for t in tasks[4:]]
    out = harness.send(WORKER_A, BalanceResponse(task_ids=moved))
    assert [t.task_id for t in out[WORKER_B]] == moved
    assert len(harness.core.workers[WORKER_A].assigned) == 4


def test_a_worker_its_results_leave_with_nothing_is_balanced_into_at_once() -> None:
    harness, queued = _eight_queued_on_a_then_b(balance_interval_seconds=60.0)  # no periodic look in the test
    first, second = harness.task(), harness.task()
    harness.send(CLIENT, first, second)  # both to B, the least loaded; A still holds 8
    out = harness.send(WORKER_B, result(first))
    assert WORKER_A not in out  # B still has a task: nothing moves
    out = harness.send(WORKER_B, result(second))
    (request,) = out[WORKER_A]  # in the same step, not at the next look
    assert request == BalanceRequest(count=4)
    out = harness.send(WORKER_A, BalanceResponse(task_ids=[t.task_id for t in queued[4:]]))
    assert [t.task_id for t in out[WORKER_B]] == [t.task_id for t in queued[4:]]


def test_a_worker_running_dry_again_soon_waits_for_the_next_prompt_look() -> None:
    harness, queued = _eight_queued_on_a_then_b(balance_interval_seconds=60.0)
    first = harness.task()
    harness.send(CLIENT, first)
    (request,) = harness.send(WORKER_B, result(first))[WORKER_A]
    moved = queued[4:]
    harness.send(WORKER_A, BalanceResponse(task_ids=[t.task_id for t in moved]))
    assert set(harness.core.workers[WORKER_B].assigned) == {t.task_id for t in moved}
    out = harness.send(WORKER_B, *[result(t) for t in moved])  # dry again, A still holding 4
    assert WORKER_A not in out  # within PROMPT_BALANCE_SECONDS of the last look
    harness.now += PROMPT_BALANCE_SECONDS
    last = harness.task()
    harness.send(CLIENT, last)
    out = harness.send(WORKER_B, result(last))
    assert out[WORKER_A] == [BalanceRequest(count=2)]


def test_balance_response_for_a_canceling_task_ends_it_canceled() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(WORKER_A, capacity=100)
    first, second = harness.task(), harness.task()
    harness.send(CLIENT, first, second)
    harness.send(CLIENT, TaskCancel(task_ids=[second.task_id]))
    out = harness.send(WORKER_A, BalanceResponse(task_ids=[second.task_id]))
    assert out[CLIENT][0].status == TaskStatus.canceled and second.task_id not in harness.core.tasks


def test_state_counts_follow_every_transition() -> None:
    harness = Harness()
    harness.connect_client()
    root = harness.task()
    waiting = harness.task(dependencies=[root.task_id])
    harness.send(CLIENT, root, waiting)
    assert harness.core.state_counts == [1, 1, 0, 0]
    harness.connect_worker()
    assert harness.core.state_counts == [1, 0, 1, 0]
    harness.send(WORKER_A, result(root))
    assert harness.core.state_counts == [0, 0, 1, 0]
    harness.send(CLIENT, TaskCancel(task_ids=[waiting.task_id]))
    assert harness.core.state_counts == [0, 0, 0, 1]


def test_the_core_holds_work_while_it_holds_tasks_or_retiring_workers() -> None:
    """The shell ticks every 0.1 s while it does, less often otherwise (scaler.scheduler.shell._IDLE_TICK_SECONDS)."""
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    assert not harness.core.holds_work()
    task = harness.task()
    harness.send(CLIENT, task)
    assert harness.core.holds_work()
    harness.send(WORKER_A, result(task))
    assert not harness.core.holds_work()
    task = harness.task()
    harness.send(CLIENT, task)
    harness.send(WORKER_A, WorkerRetire(deadline_ms=10_000, reason="test"))  # it finishes what it runs, then goes
    assert harness.core.retiring and harness.core.holds_work()
    harness.send(WORKER_A, result(task))
    assert not harness.core.workers and not harness.core.holds_work()
