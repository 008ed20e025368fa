"""Internal: Dask collections on Scaler: what `dask.compute(..., scheduler=client.get)` hands a scheduler, planned as
tasks.

A scheduler's `get(dsk, keys, **kwargs)` receives, from current dask, an expression whose `__dask_graph__()` is a dict
of task-spec nodes (`dask._task_spec`: `Task`, `Alias`, `DataNode`, with `TaskRef`s and nested containers in their
arguments), sometimes mixed with old tuple tasks; older dask passed a HighLevelGraph or a dict of tuples. `keys` is one
key, or a list of keys that may nest lists, and the results must come back in the same shape. dask's own
`convert_legacy_graph` turns every graph into task-spec nodes, which become tasks here:

- a `Task` whose arguments are `TaskRef`s, `Alias`es, `DataNode`s or plain values calls its function directly on the
  worker, keyword arguments included, so the function travels once per client as with submit;
- a `Task` with nested tasks or containers in its arguments runs `evaluate_task`, which rebuilds it on the worker and
  has dask evaluate it with the values of its dependencies (its function is a constant shared by every such node);
- an `Alias` is no task: its key names its target;
- a `DataNode` is a constant, inlined into the tasks that use it (see graph_encoding.py for large or shared ones).

dask is imported only when such a graph arrives; the workers need it installed too, like any library tasks use.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Dict, Hashable, List, Optional, Tuple

from scaler.client.graph import (
    Constant,
    Expression,
    GraphBuilder,
    GraphPlan,
    KeyRef,
    ObjectArg,
    PlannedTask,
    check_keys_in_graph,
    is_key,
    raise_cycle,
)
from scaler.client.objects import ObjectReference


def is_dask_call(graph: Any, keys: Any) -> bool:
    """Whether get() was called the way dask calls a scheduler: with a collection's graph (not a plain dict), a graph
    of task-spec nodes, one key, or nested lists of keys. Then results come back shaped like `keys`; otherwise as the
    seed API's {key: value}."""
    if not isinstance(graph, dict):
        return True
    if type(keys) is list:
        return any(type(key) is list for key in keys) or has_task_spec_nodes(graph)
    if type(keys) is tuple and not is_key(graph, keys):  # a tuple of keys; ('x', 0) would be one key
        return has_task_spec_nodes(graph)
    return True


def has_task_spec_nodes(graph: Dict[Hashable, Any]) -> bool:
    task_spec = sys.modules.get("dask._task_spec")  # if dask was never imported, no node can be one of its objects
    if task_spec is None:
        return False
    node_type = task_spec.GraphNode
    return any(isinstance(node, node_type) for node in graph.values())


def dask_available() -> bool:
    try:
        import dask._task_spec  # noqa: F401
    except ImportError:
        return False
    return True


def flatten_keys(keys: Any) -> List[Hashable]:
    """The keys of a (possibly nested) list of keys, or of one key, in order, each once."""
    if type(keys) is not list:
        return [keys]
    flat: Dict[Hashable, None] = {}
    stack = [iter(keys)]
    while stack:
        for key in stack[-1]:
            if type(key) is list:
                stack.append(iter(key))
                break
            flat[key] = None
        else:
            stack.pop()
    return list(flat)


def shape_like(keys: Any, values: Dict[Hashable, Any]) -> Any:
    """`keys` with each key replaced by its value: lists nest, anything else is a key (dask's convention)."""
    if type(keys) is list:
        return [shape_like(key, values) for key in keys]
    return values[keys]


def plan_dask_graph(graph: Any, keys: List[Hashable]) -> GraphPlan:
    """Plan the tasks `keys` need in a dask graph (an expression, a HighLevelGraph, or a dict of task-spec or tuple
    nodes); TypeError/ValueError naming the problem, graphlib.CycleError for a cycle."""
    try:
        from dask._task_spec import convert_legacy_graph
    except ImportError as error:
        raise ImportError('this graph needs dask installed here and on the workers: pip install "scaler[dask]"') from (
            error
        )
    if not isinstance(graph, Mapping):
        materialize = getattr(graph, "__dask_graph__", None)
        if materialize is None:
            raise TypeError(
                f"graph must be a dict of key -> node or a dask collection's graph, got {type(graph).__name__}"
            )
        graph = materialize()
    dsk = convert_legacy_graph(graph)
    check_keys_in_graph(dsk, keys)
    builder = _TaskSpecBuilder(dsk)
    for key, node in dsk.items():
        builder.parse_node(key, node)
    return builder.plan(keys)


def evaluate_task(function: Any, spec: Tuple[tuple, Dict[str, Any], tuple], *values: Any) -> Any:
    """Graph helper task, run on a worker: a task-spec Task with nested tasks or containers in its arguments, rebuilt
    from its function and spec (args, kwargs, dependency keys), evaluated by dask with `values` as the results of its
    dependencies."""
    from dask._task_spec import Task

    args, kwargs, keys = spec
    return Task(None, function, *args, **kwargs)(dict(zip(keys, values)))


class _TaskSpecBuilder(GraphBuilder):
    def __init__(self, graph: Dict[Hashable, Any]) -> None:
        super().__init__()
        from dask._task_spec import Alias, DataNode, GraphNode, Task, TaskRef

        self._graph = graph
        self._aliases: Dict[Hashable, Hashable] = {}  # key -> the key it names
        self._task_type = Task
        self._alias_type = Alias
        self._data_type = DataNode
        self._node_type = GraphNode
        self._ref_type = TaskRef

    def parse_node(self, key: Hashable, node: Any) -> None:
        if isinstance(node, self._alias_type):
            self._aliases[key] = node.target
        elif isinstance(node, self._data_type):
            self.values[key] = _value(node.value)
        elif isinstance(node, self._task_type):
            self.tasks[key] = self._task(key, node)
        else:  # convert_legacy_graph makes every node one of the above
            raise TypeError(f"graph[{key!r}] is a {type(node).__name__}, not a dask task-spec node")

    def resolve(self, key: Hashable) -> Hashable:
        """Follow aliases to the node that computes or holds the value; ValueError for a key not in the graph."""
        aliases = self._aliases
        if key not in aliases:
            if key not in self.tasks and key not in self.values:
                raise ValueError(f"the graph refers to key {key!r}, which is not in it")
            return key
        path = [key]
        seen = {key}
        while key in aliases:
            key = aliases[key]
            if key in seen:
                raise_cycle(path[path.index(key) :] + [key])
            seen.add(key)
            path.append(key)
        if key not in self.tasks and key not in self.values:
            raise ValueError(f"the graph refers to key {key!r}, which is not in it")
        return key

    def _task(self, key: Hashable, task: Any) -> PlannedTask:
        args: List[Expression] = []
        for arg in task.args:
            expression = self._plain(arg)
            if expression is None:
                return self._evaluated(key, task)
            args.append(expression)
        kwargs: Optional[Dict[str, Expression]] = None
        if task.kwargs:
            kwargs = {}
            for name, arg in task.kwargs.items():
                expression = self._plain(arg)
                if expression is None:
                    return self._evaluated(key, task)
                kwargs[name] = expression
        return PlannedTask(key, task.func, args, kwargs)

    def _plain(self, arg: Any) -> Optional[Expression]:
        """The expression of an argument that needs no evaluation by dask, or None."""
        if isinstance(arg, self._ref_type):
            return KeyRef(arg.key)
        if isinstance(arg, self._node_type):
            if isinstance(arg, self._alias_type):
                return KeyRef(arg.target)
            if isinstance(arg, self._data_type):
                return _value(arg.value)
            return None  # a nested task or container
        return _value(arg)

    def _evaluated(self, key: Hashable, task: Any) -> PlannedTask:
        # The function is a constant of its own, shared by the nodes of one layer (and so sent once); the rest of the
        # task is one constant per node.
        keys = tuple(task.dependencies)
        args: List[Expression] = [Constant(task.func), Constant((task.args, task.kwargs, keys))]
        args.extend(KeyRef(dependency) for dependency in keys)
        return PlannedTask(key, evaluate_task, args)


def _value(value: Any) -> Expression:
    return ObjectArg(value) if type(value) is ObjectReference else Constant(value)
