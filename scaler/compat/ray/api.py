"""Internal: `get`, `put`, `wait` and `cancel` of scaler.compat.ray."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any, List, Optional, Sequence, Tuple

from scaler.compat.ray import session
from scaler.compat.ray.refs import ObjectRef


def get(object_refs: Any, *, timeout: Optional[float] = None) -> Any:
    """The value of one ObjectRef, or the list of values of a list of them, waiting at most `timeout` seconds in all
    (None: no limit) before GetTimeoutError. A failed task raises RayTaskError, also an instance of the task's
    exception's class; a cancelled one TaskCancelledError."""
    deadline = None if timeout is None else time.monotonic() + timeout
    if type(object_refs) is ObjectRef:
        return object_refs.get(deadline)
    if isinstance(object_refs, (list, tuple)):
        _check_refs(object_refs, "get")
        return [ref.get(deadline) for ref in object_refs]
    raise ValueError(f"get takes an ObjectRef or a list of ObjectRefs, got {type(object_refs).__name__}")


def put(value: Any) -> ObjectRef:
    """Send `value` to the scheduler once (Client.send_object): pass the reference to remote calls, whose workers
    each fetch it once. Kept until shutdown()."""
    if type(value) is ObjectRef:
        raise TypeError("put() of an ObjectRef: pass the reference itself instead")
    reference = session.current().client.send_object(value)
    return ObjectRef(None, reference, value)


def wait(
    object_refs: Sequence[ObjectRef],
    *,
    num_returns: int = 1,
    timeout: Optional[float] = None,
    fetch_local: bool = True,
) -> Tuple[List[ObjectRef], List[ObjectRef]]:
    """(ready, not ready): at most `num_returns` references whose tasks are done (succeeded or not), in the order
    given, once that many are or after `timeout` seconds (None: no limit); the others, in order, as the second list.
    `fetch_local` is accepted for Ray's sake: a result comes to the client when its task is done."""
    if not isinstance(object_refs, (list, tuple)):
        raise TypeError(f"wait takes a list of ObjectRefs, got {type(object_refs).__name__}")
    _check_refs(object_refs, "wait")
    if len({id(ref) for ref in object_refs}) != len(object_refs):
        raise ValueError("wait takes a list of distinct ObjectRefs")
    if not 0 <= num_returns <= len(object_refs):
        raise ValueError(f"num_returns must be between 0 and {len(object_refs)} (the references given)")
    deadline = None if timeout is None else time.monotonic() + timeout
    ready = {id(ref) for ref in object_refs if ref.ready()}
    while len(ready) < num_returns:
        waiting = {}
        for ref in object_refs:
            if id(ref) not in ready:
                future = ref.current_future()
                if future is not None:
                    waiting[future] = ref
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            break
        try:
            for done in concurrent.futures.as_completed(waiting, timeout=remaining):
                ref = waiting[done]
                if ref.ready():  # False: it was sent again (dependencies.py), wait on its new future
                    ready.add(id(ref))
                    if len(ready) >= num_returns:
                        break
                else:
                    break
        except concurrent.futures.TimeoutError:
            break
    chosen = [ref for ref in object_refs if id(ref) in ready][:num_returns]
    chosen_ids = {id(ref) for ref in chosen}
    return chosen, [ref for ref in object_refs if id(ref) not in chosen_ids]


def cancel(object_ref: ObjectRef, *, force: bool = False, recursive: bool = True) -> None:
    """Cancel the task that makes `object_ref`: removed if queued, stopped if running (its process is replaced, so
    `force` changes nothing); its get() raises TaskCancelledError, as do the calls waiting on it. Children it
    submitted are cancelled with it (`recursive`). A reference from put has no task: nothing happens."""
    if type(object_ref) is not ObjectRef:
        raise TypeError(f"cancel takes an ObjectRef, got {type(object_ref).__name__}")
    future = object_ref.current_future()
    if future is not None:
        future.cancel()


def _check_refs(object_refs: Sequence[Any], call: str) -> None:
    for ref in object_refs:
        if type(ref) is not ObjectRef:
            raise TypeError(f"{call} takes ObjectRefs, got {type(ref).__name__} in the list")
