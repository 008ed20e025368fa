"""client.options(): validation at the call, the policy fields on every Task a view creates (submit, map, graphs,
executor), a scheduler without task policies, and what results say (timeouts, attempts). Against a protocol peer
playing the scheduler (peer.py): what the client puts on the wire is what the tests read."""

from __future__ import annotations

import pickle
import sys
from typing import Any, List

import cloudpickle
import pytest

from scaler.client import Client
from scaler.client.results import failure_of
from scaler.errors import ScalerError, TaskPoliciesUnsupportedError, TaskRefusedError, TaskTimeoutError
from scaler.protocol import Resource, Task, TaskResult, TaskStatus
from scaler.testing.protocol_peer import ProtocolPeer

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def add(x: int, y: int = 0) -> int:
    return x + y


def echo_keywords(**kwargs: Any) -> dict:
    return kwargs


def tasks_of(peer: ProtocolPeer) -> List[Task]:
    return peer.messages(Task)


def policies(task: Task) -> tuple:
    return ([(r.name, r.amount) for r in task.resources], task.priority, task.retries, task.timeout_ms)


NONE = ([], 0, 0, 0)
SET = ([("gpu", 1.0), ("mem", 2e9)], 5, 2, 1500)


@pytest.mark.parametrize(
    "keywords, error, match",
    [
        (dict(resources=["gpu"]), TypeError, "resources must be a dict"),
        (dict(resources={1: 1}), TypeError, "resource names must be str"),
        (dict(resources={"gpu": "1"}), TypeError, "amount must be an int or a float"),
        (dict(resources={"gpu": True}), TypeError, "amount must be an int or a float"),
        (dict(resources={"gpu": -1}), ValueError, "finite number >= 0"),
        (dict(resources={"gpu": float("nan")}), ValueError, "finite number >= 0"),
        (dict(resources={"gpu": float("inf")}), ValueError, "finite number >= 0"),
        (dict(resources={"gpu": 10**400}), ValueError, "finite number >= 0"),  # too large for a float
        (dict(timeout_seconds=10**400), ValueError, "timeout_seconds must be a positive number"),
        (dict(resources={"": 1}), ValueError, "must not be empty"),
        (dict(priority=1.5), TypeError, "priority must be an int"),
        (dict(priority=True), TypeError, "priority must be an int"),
        (dict(priority=2**31), ValueError, "priority must be within"),
        (dict(retries=-1), ValueError, "retries must be an int >= 0"),
        (dict(retries=1.0), TypeError, "retries must be an int"),
        (dict(timeout_seconds=0), ValueError, "timeout_seconds must be a positive number"),
        (dict(timeout_seconds=-2.5), ValueError, "timeout_seconds must be a positive number"),
        (dict(timeout_seconds=float("inf")), ValueError, "timeout_seconds must be a positive number"),
        (dict(timeout_seconds="1"), TypeError, "timeout_seconds must be a number"),
        (dict(timeout_seconds=1e9), ValueError, "timeout_seconds must be at most"),
        (dict(profiling=1), TypeError, "profiling must be a bool"),
    ],
)
def test_bad_options_raise_at_the_call(client: Client, keywords: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        client.options(**keywords)
    with pytest.raises(error, match=match):
        client.executor(**keywords)


def test_a_view_sets_the_policies_of_every_task_it_creates_and_the_client_keeps_the_defaults(
    peer: ProtocolPeer, client: Client
) -> None:
    view = client.options(resources={"mem": 2e9, "gpu": 1, "disk": 0}, priority=5, retries=2, timeout_seconds=1.5)
    assert view.submit(add, 1, 2).result(10) == 3  # a call encoded by template
    assert view.submit(add, 1, y=2).result(10) == 3  # a Task message (keywords)
    assert view.map(add, [(1,), (2,)]) == [1, 2]
    assert view.starmap(add, [(3, 4)]) == [7]
    assert view.get({"a": (add, 1, 2), "b": (add, "a", 10)}, ["b"]) == {"b": 13}
    assert [future.result(10) for future in view.submit_graph({"c": (add, 5)}, ["c"])] == [5]
    with view.executor() as executor:
        assert executor.submit(add, 2).result(10) == 2
        assert list(executor.map(add, [1, 2], [3, 4])) == [4, 6]
    sent = tasks_of(peer)
    assert len(sent) == 11 and all(policies(task) == SET for task in sent), [policies(task) for task in sent]
    # the client itself, and the same calls after the view: no policy
    assert client.submit(add, 1).result(10) == 1
    assert client.map(add, [(1,)]) == [1]
    assert client.get({"a": (add, 1)}, ["a"]) == {"a": 1}
    assert all(policies(task) == NONE for task in tasks_of(peer)[11:])
    assert "priority=5" in repr(view) and "priority" not in repr(client)


def test_options_refine_and_a_functions_own_keywords_are_never_taken(peer: ProtocolPeer, client: Client) -> None:
    view = client.options(priority=1).options(retries=2)
    assert view.submit(echo_keywords, priority=7, retries=9, timeout_seconds=3).result(10) == {
        "priority": 7,
        "retries": 9,
        "timeout_seconds": 3,
    }
    (task,) = tasks_of(peer)
    assert policies(task) == ([], 1, 2, 0)
    back = view.options(priority=0, retries=0)
    assert back._options.key is None, "options given back their defaults are the defaults"


def test_executor_keywords_refine_the_views_options(peer: ProtocolPeer, client: Client) -> None:
    with client.options(priority=3).executor(timeout_seconds=2) as executor:
        assert executor.submit(add, 1).result(10) == 1
    (task,) = tasks_of(peer)
    assert policies(task) == ([], 3, 0, 2000)


def test_profiling_none_means_as_the_call_or_the_client_says(peer: ProtocolPeer, client: Client) -> None:
    profiled = client.options(profiling=True)
    assert profiled.submit(add, 1).result(10) == 1
    assert profiled.submit(add, 1, profiling=False).result(10) == 1
    assert profiled.options(profiling=None).submit(add, 1).result(10) == 1
    assert [task.profiling for task in tasks_of(peer)] == [True, False, False]


def test_a_view_shares_the_connection_and_its_disconnect_only_detaches_it(client: Client) -> None:
    view = client.options(priority=2)
    assert view._connection is client._connection
    view.disconnect()
    with pytest.raises(ScalerError, match="disconnected"):
        view.submit(add, 1)
    assert client.submit(add, 1).result(10) == 1


def test_a_pickled_view_keeps_its_options(client: Client) -> None:
    view = client.options(resources={"gpu": 1}, priority=4, retries=1, timeout_seconds=0.25, profiling=True)
    copy = pickle.loads(pickle.dumps(view))
    assert copy._options.key == view._options.key and copy._profiling is True
    assert pickle.loads(pickle.dumps(client))._options.key is None


def test_an_older_scheduler_refuses_policies_rather_than_ignore_them() -> None:
    with ProtocolPeer(task_policies=False) as old, Client(old.address, timeout_seconds=10) as client:
        for view in (client.options(priority=1), client.options(resources={"gpu": 1}), client.executor(retries=1)):
            with pytest.raises(TaskPoliciesUnsupportedError, match="does not implement task policies"):
                view.submit(add, 1)
        view = client.options(timeout_seconds=1)
        with pytest.raises(TaskPoliciesUnsupportedError):
            view.map(add, [(1,)])
        with pytest.raises(TaskPoliciesUnsupportedError):
            view.get({"a": (add, 1)}, ["a"])
        with pytest.raises(TaskPoliciesUnsupportedError):
            view.submit_graph({"a": (add, 1)}, ["a"])
        assert isinstance(TaskPoliciesUnsupportedError("x"), RuntimeError)
        assert not old.messages(Task), "nothing was sent"
        # no policy: fine
        assert client.submit(add, 1).result(10) == 1
        assert client.options(profiling=True, resources={"gpu": 0}).submit(add, 2).result(10) == 2


# ---- results ---------------------------------------------------------------------------------------------------------


def answering(make_result) -> ProtocolPeer:
    return ProtocolPeer(answer=make_result)


def test_a_timed_out_task_raises_task_timeout_error_with_the_workers_text() -> None:
    text = "task 00 ran longer than its timeout of 0.5 s: stopped, process replaced"

    def timed_out(task: Task) -> TaskResult:
        return TaskResult(task_id=task.task_id, status=TaskStatus.timed_out, error_text=text)

    with answering(timed_out) as peer, Client(peer.address, timeout_seconds=10) as client:
        future = client.options(timeout_seconds=0.5).submit(add, 1)
        error = future.exception(10)
        assert isinstance(error, TaskTimeoutError) and isinstance(error, TimeoutError)
        assert isinstance(error, ScalerError) and str(error) == text
        assert not getattr(error, "__notes__", None), "one attempt, no retries: no note"
        with pytest.raises(TaskTimeoutError):
            client.options(timeout_seconds=0.5).map(add, [(1,)])


def test_a_failure_after_retries_notes_its_attempts() -> None:
    def failed(task: Task) -> TaskResult:
        payload = cloudpickle.dumps(ValueError("still broken"))
        return TaskResult(task_id=task.task_id, status=TaskStatus.failed, payload=payload, error_text="tb", attempts=3)

    with answering(failed) as peer, Client(peer.address, timeout_seconds=10) as client:
        error = client.options(retries=2).submit(add, 1).exception(10)
        assert isinstance(error, ValueError) and error.__notes__ == ["Scaler: failed on attempt 3 of 3 (retries=2)"]
        with pytest.raises(ValueError) as raised:
            client.options(retries=2).map(add, [(1,), (2,)])
        assert raised.value.__notes__ == ["Scaler: failed on attempt 3 of 3 (retries=2)"]
        error = client.submit(add, 1).exception(10)  # no retries, yet 3 starts: worker deaths
        assert error.__notes__ == ["Scaler: failed on attempt 3 (retries=0; restarts after worker deaths count too)"]


def test_a_task_refused_before_it_ran_gets_no_attempt_note() -> None:
    def refused(task: Task) -> TaskResult:
        return TaskResult(task_id=task.task_id, status=TaskStatus.refused, error_text="too many tasks")

    with answering(refused) as peer, Client(peer.address, timeout_seconds=10) as client:
        error = client.options(retries=2).submit(add, 1).exception(10)
        assert isinstance(error, TaskRefusedError) and not getattr(error, "__notes__", None)


def test_a_graph_node_failed_by_its_dependency_gets_no_attempt_note_of_its_own() -> None:
    """A node whose dependency failed never ran: the scheduler answers it with the dependency's exception and no
    attempts (0), whatever its own retries. "failed on attempt 1 of 3" would read as if retries had not run."""
    payload = cloudpickle.dumps(ValueError("the dependency's"))
    copy = TaskResult(task_id=b"n" * 16, status=TaskStatus.failed, payload=payload, error_text="tb", attempts=0)
    error = failure_of(copy, retries=2)
    assert isinstance(error, ValueError) and not getattr(error, "__notes__", None)
    own = TaskResult(task_id=b"d" * 16, status=TaskStatus.failed, payload=payload, error_text="tb", attempts=3)
    assert failure_of(own, retries=2).__notes__ == ["Scaler: failed on attempt 3 of 3 (retries=2)"]


def test_profiling_info_counts_attempts() -> None:
    def succeeded(task: Task) -> TaskResult:
        payload = cloudpickle.dumps(7)
        attempts = 2 if task.retries else 0  # 0: what a worker or an older scheduler sends, meaning one
        return TaskResult(task_id=task.task_id, status=TaskStatus.success, payload=payload, attempts=attempts)

    with answering(succeeded) as peer, Client(peer.address, timeout_seconds=10) as client:
        retried = client.options(retries=1).submit(add, 1, profiling=True)
        assert retried.result(10) == 7 and retried.profiling_info().attempts == 2
        once = client.submit(add, 1, profiling=True)
        assert once.result(10) == 7 and once.profiling_info().attempts == 1


def test_resources_travel_as_resource_structs(peer: ProtocolPeer, client: Client) -> None:
    client.options(resources={"gpu": 2, "mem": 1.5}).submit(add, 1).result(10)
    (task,) = tasks_of(peer)
    assert task.resources == [Resource(name="gpu", amount=2.0), Resource(name="mem", amount=1.5)]
