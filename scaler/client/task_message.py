"""Internal: the one place a Task message is made from its parts, for every way the client builds one: a call encoded
by template (calls.py), any other call (tasks.py), a graph's nodes (graph_encoding.py), and calls whose arguments
name other tasks (scaler/compat/ray). Options (task policies, an actor's id) are applied here and only here.
"""

from __future__ import annotations

from typing import List, Sequence

from scaler.client.options import TaskOptions
from scaler.protocol import Argument, Task

# every field a Task of the same shape copies (shaped_like): all but what differs from one such Task to the next
_SHAPE_FIELDS = tuple(name for name in Task.__slots__ if name not in ("task_id", "args", "dependencies", "raw"))


def task_message(
    task_id: bytes,
    function_id: bytes,
    args: List[Argument],
    options: TaskOptions,
    profiling: bool,
    parent: bytes,
    serializer_id: bytes,
    dependencies: Sequence[bytes] = (),
    report_result: bool = True,
) -> Task:
    task = Task(
        task_id=task_id,
        function_id=function_id,
        args=args,
        dependencies=list(dependencies),
        profiling=profiling,
        report_result=report_result,
        parent_task_id=parent,
        serializer_id=serializer_id,
    )
    if options.key is not None:
        options.apply(task)
    return task


def shaped_like(task: Task, task_id: bytes, args: List[Argument], dependencies: List[bytes]) -> Task:
    """A Task with `task`'s every other field (function, policies, flags...): a template of a graph's node shape."""
    shaped = Task(task_id=task_id, args=args, dependencies=dependencies)
    for name in _SHAPE_FIELDS:
        setattr(shaped, name, getattr(task, name))
    return shaped
