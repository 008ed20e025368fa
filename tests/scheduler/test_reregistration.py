"""Peers that come back: a Hello that says it registered before, a Hello again on a connection the scheduler still
knows, strangers told to register again, and the goodbye of a scheduler stopped from outside."""

from __future__ import annotations

import logging

from scaler.protocol import PROTOCOL_VERSION, ClientHeartbeat, Goodbye, Hello, HelloReply, Role, Task, TaskStatus
from scaler.testing.scheduler_harness import CLIENT, WORKER_A, Harness, of_type, result


def hello(role: Role, previous_registrations: int = 0, **fields) -> Hello:
    return Hello(
        protocol_version=PROTOCOL_VERSION,
        role=role,
        name="peer",
        previous_registrations=previous_registrations,
        **fields,
    )


def test_a_stranger_is_told_to_register_again(caplog) -> None:
    harness = Harness()
    (goodbye,) = harness.send(CLIENT, ClientHeartbeat(sent_at_us=1))[CLIENT]
    assert isinstance(goodbye, Goodbye) and goodbye.reconnect and "Hello" in goodbye.reason


def test_a_peer_registering_again_is_logged_and_counted(caplog) -> None:
    harness = Harness()
    with caplog.at_level(logging.INFO, logger="scaler.scheduler.core"):
        (reply,) = harness.send(CLIENT, hello(Role.client, previous_registrations=2))[CLIENT]
        harness.send(WORKER_A, hello(Role.worker, previous_registrations=1, capacity=3))
    assert reply.accepted and not reply.resumed
    assert harness.core.registered_again == 2
    assert harness.core.workers[WORKER_A].row.previous_registrations == 1, "published in its status row"
    assert harness.core.clients[CLIENT].previous_registrations == 2
    assert "client peer registered again (it had registered 2 time(s) before" in caplog.text
    assert "worker peer registered again (it had registered 1 time(s) before" in caplog.text


def test_a_client_saying_hello_again_keeps_its_session_and_its_resubmissions_are_ignored() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    first, second = harness.task(), harness.task()
    harness.send(CLIENT, first, second)
    harness.send(WORKER_A, result(first))  # its result was lost on the dropped connection, say
    (reply,) = harness.send(CLIENT, hello(Role.client, previous_registrations=1))[CLIENT]
    assert isinstance(reply, HelloReply) and reply.accepted and reply.resumed
    assert harness.core.registered_again == 0, "the same session: not a new registration"
    out = harness.send(CLIENT, first, second)  # the client resubmits everything unanswered
    assert CLIENT not in out, "second is still held: ignored, not refused"
    assert of_type(out[WORKER_A], Task) == [first], "first was finished and forgotten: it runs again"
    assert len(harness.core.tasks) == 2


def test_a_duplicate_task_id_is_still_refused_from_a_client_that_never_said_hello_again() -> None:
    harness = Harness()
    harness.connect_client()
    task = harness.task()
    harness.send(CLIENT, task)
    (refusal,) = harness.send(CLIENT, task)[CLIENT]
    assert refusal.status == TaskStatus.refused


def test_a_worker_saying_hello_again_is_a_new_worker_and_its_tasks_run_again() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker(capacity=1)
    task = harness.task()
    harness.send(CLIENT, task)
    assert harness.core.workers[WORKER_A].assigned
    out = harness.send(WORKER_A, hello(Role.worker, previous_registrations=1, capacity=1))
    reply, resent = out[WORKER_A]
    assert isinstance(reply, HelloReply) and reply.accepted and not reply.resumed
    assert resent == task, "the worker dropped what it held: the task is sent again"


def test_a_scheduler_stopped_from_outside_tells_peers_to_wait_for_the_next_one() -> None:
    harness = Harness()
    harness.connect_client()
    harness.connect_worker()
    harness.core.shutdown("received SIGTERM", reconnect=True)
    out = harness.outbox()
    assert all(message.reconnect for peer in (CLIENT, WORKER_A) for message in of_type(out[peer], Goodbye))
    harness = Harness()
    harness.connect_client()
    harness.core.shutdown("a client shut the cluster down")
    (goodbye,) = harness.outbox()[CLIENT]
    assert not goodbye.reconnect
