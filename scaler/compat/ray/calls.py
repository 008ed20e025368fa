"""Internal: remote calls whose arguments hold ObjectRefs, as tasks that read them on the worker.

Such a call runs `CallWithRefs(function)` with three kinds of arguments: the call's arguments with each reference
replaced by a Slot, then one argument per reference, which Scaler resolves on the worker (an object sent by put, the
result of an unfinished task it waits for, or a value already known). On the worker, a Slot at the top level becomes
the value, and a Slot inside a list, tuple or dict argument becomes a reference holding the value, as Ray passes
nested references (the task may `ray.get` it, which returns at once).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from scaler.compat.ray.refs import ObjectRef, resolved

_CONTAINERS = (list, tuple, dict)


class Slot:
    """Where reference number `index` of a call goes."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self) -> Any:
        return (Slot, (self.index,))


Lifted = Tuple[Tuple[Any, ...], Dict[str, Any], List[ObjectRef]]


def lift_refs(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Optional[Lifted]:
    """(args, kwargs with Slots for their references, the references in Slot order); None if they hold none, at the
    top level or one level down in a list, tuple or dict."""
    if not any(_holds_ref(arg) for arg in args) and not any(_holds_ref(arg) for arg in kwargs.values()):
        return None
    refs: List[ObjectRef] = []
    lifted_args = tuple(_lift(arg, refs) for arg in args)
    lifted_kwargs = {name: _lift(arg, refs) for name, arg in kwargs.items()}
    return lifted_args, lifted_kwargs, refs


def _holds_ref(arg: Any) -> bool:
    kind = type(arg)
    if kind is ObjectRef:
        return True
    if kind is dict:
        return any(type(value) is ObjectRef for value in arg.values())
    if kind is list or kind is tuple:
        return any(type(value) is ObjectRef for value in arg)
    return False


def _lift(arg: Any, refs: List[ObjectRef]) -> Any:
    kind = type(arg)
    if kind is ObjectRef:
        return _slot(arg, refs)
    if kind is dict:
        return {key: _slot(value, refs) if type(value) is ObjectRef else value for key, value in arg.items()}
    if kind is list or kind is tuple:
        return kind(_slot(value, refs) if type(value) is ObjectRef else value for value in arg)
    return arg


def _slot(ref: ObjectRef, refs: List[ObjectRef]) -> Slot:
    refs.append(ref)
    return Slot(len(refs) - 1)


class CallWithRefs:
    """The task of a call with references: `function(*args, **kwargs)` once the Slots are filled in on the worker.
    Named after its function, so that the monitor counts its tasks under that name."""

    def __init__(self, function: Any) -> None:
        self.function = function
        self.__name__ = getattr(function, "__name__", "task")
        self.__qualname__ = getattr(function, "__qualname__", self.__name__)

    def __call__(self, args: Tuple[Any, ...], kwargs: Dict[str, Any], *values: Any) -> Any:
        filled_args = [fill_slots(arg, values) for arg in args]
        filled_kwargs = {name: fill_slots(arg, values) for name, arg in kwargs.items()}
        return self.function(*filled_args, **filled_kwargs)


def fill_slots(arg: Any, values: Tuple[Any, ...]) -> Any:
    """One argument with its Slots filled in: the value at the top level, a reference holding it one level down."""
    kind = type(arg)
    if kind is Slot:
        return values[arg.index]
    if kind is dict:
        return {key: resolved(values[value.index]) if type(value) is Slot else value for key, value in arg.items()}
    if kind is list or kind is tuple:
        return kind(resolved(values[value.index]) if type(value) is Slot else value for value in arg)
    return arg
