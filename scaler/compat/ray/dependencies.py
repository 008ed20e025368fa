"""Internal: the Task of a remote call whose arguments hold references, built from the client's own parts.

A reference to an unfinished task of this client becomes a `taskRef` argument and a dependency, as the nodes of a
graph are sent (scaler/client/graph_encoding.py): the scheduler holds the call until that task succeeds and hands its
result to the worker, inline if small, so the value never travels through the client. An object sent by put is an
`objectRef` argument (one put in an earlier session, which freed it, fails the call with ObjectLostError); a value
already here (a finished task's) travels inline, or as an object when large. A reference to a failed or cancelled
task makes the call fail (or be cancelled) the same way without running it.

The scheduler forgets a result nobody waits for once the client has it, so a call naming a task that finished just
before the call reached the scheduler is answered TaskNotFoundError without running: the reference sends it again
once its dependencies are settled here, with their values (ObjectRef.current_future).

Client.submit takes no futures as arguments; this builds its arguments as a graph's nodes are, and its Task as every
client path does (TaskFactory.task_of, scaler/client/task_message.py).
"""

from __future__ import annotations

import concurrent.futures
from typing import Dict, List, Optional

from scaler import task_context
from scaler.client import Client, ScalerFuture
from scaler.client.ledger import ObjectNeed
from scaler.compat.ray.calls import CallWithRefs, Lifted
from scaler.compat.ray.exceptions import ObjectLostError
from scaler.compat.ray.refs import _NO_VALUE, ObjectRef, failed_future
from scaler.protocol import Argument, ArgumentKind

_TASK_REF = int(ArgumentKind.task_ref)
_INLINE = int(ArgumentKind.inline)


def submit_call(client: Client, function: CallWithRefs, lifted: Lifted, function_name: str) -> ObjectRef:
    """The reference to a call of `function` with the lifted arguments (calls.lift_refs)."""
    refs = lifted[2]
    future = _submit(client, function, lifted)
    if not any(ref._future is not None for ref in refs):
        return ObjectRef(future, None, _NO_VALUE, function_name)

    def resubmit() -> ScalerFuture:
        # Every dependency settled first (each resent itself if it must), so that they all travel as values.
        pending = [ref.current_future() for ref in refs if ref._future is not None]
        concurrent.futures.wait([future for future in pending if future is not None])
        for ref in refs:
            ref.current_future()
        return _submit(client, function, lifted)

    return ObjectRef(future, None, _NO_VALUE, function_name, resubmit)


def _submit(client: Client, function: CallWithRefs, lifted: Lifted) -> ScalerFuture:
    args, kwargs, refs = lifted
    connection = client._open_connection()
    options = client._task_options(connection)
    factory = client._factory
    needs: List[ObjectNeed] = []
    held: List[bytes] = []
    arguments = [
        factory.argument(connection, args, "", needs, held),
        factory.argument(connection, kwargs, "", needs, held),
    ]
    dependencies: Dict[bytes, None] = {}  # once each, in order, however often the call names a task
    for ref in refs:
        if ref._object is not None:
            if ref._object.owner != connection.identity:  # put in a session since shut down, which freed it
                return failed_future(ObjectLostError(f"{ref!r} was put in an earlier session: put it again"))
            arguments.append(factory.argument(connection, ref._object, "", needs, held))
            continue
        if ref._value is not _NO_VALUE:
            arguments.append(factory.argument(connection, ref._value, "", needs, held))
            continue
        future = ref.current_future()
        assert future is not None
        if not future.done() and future._canceller is connection:
            arguments.append(Argument(kind=_TASK_REF, data=future.task_id))
            dependencies[future.task_id] = None
            continue
        settled = _settled_like(future)  # waits for a task of another connection (a previous session's)
        if settled is not None:
            return settled
        arguments.append(factory.argument(connection, future.result(), "", needs, held))
    function_need = factory.function_need(connection, function)
    inline_bytes = sum(len(argument.data) for argument in arguments if argument.kind == _INLINE)
    parent = task_context.current_task_id or b""
    message, future, objects = factory.task_of(
        connection, function_need[0], arguments, client._profiling, parent, options, held, inline_bytes,
        list(dependencies),
    )  # fmt: skip
    factory.send(
        connection, ((function, function_need),), needs, [message], [future], [message], options.retries,
        {future.task_id: objects} if objects else None,
    )  # fmt: skip
    return future


def _settled_like(dependency: ScalerFuture) -> Optional[ScalerFuture]:
    """A future already failed or cancelled as `dependency` was, or None if it succeeded (waiting for it)."""
    if dependency.cancelled():
        future = ScalerFuture(b"")
        future._cancel_locally()
        return future
    error = dependency.exception()
    return None if error is None else failed_future(error)
