"""Internal: Dask-style graphs: validated at the call, then planned as tasks whose arguments name other tasks.

A graph is a dict from keys to nodes. A node is a task `(callable, *args)`, a list, another key (an alias), an
ObjectReference, or any other value (a constant). An argument of a task is a key (the value of that node), a nested
task tuple, a list (evaluated element by element, so a list of keys is the list of their values), an ObjectReference,
or a constant. A tuple whose first element is not callable is a constant when it is an argument, and malformed when it
is a node. (Graphs of dask's task-spec objects, what dask collections hand a scheduler, are read by dask_graph.py into
the same plan.)

Constants never become tasks: they are inlined into the tasks that use them. Everything else becomes a task, including
the small helper tasks `gather_list` (a list holding keys, nested tasks or references) and `identity` (an alias, or a
requested reference). The helpers need no change to the protocol or to workers: they are ordinary functions.
"""

from __future__ import annotations

import graphlib
from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, Iterable, List, Optional, Sequence, Set, Union

from scaler.client.objects import ObjectReference


def gather_list(*values: Any) -> list:
    """Graph helper task: a list argument whose elements were computed by other tasks."""
    return list(values)


def identity(value: Any) -> Any:
    """Graph helper task: an alias of another key, or a requested ObjectReference."""
    return value


# An argument of a planned task. Plain classes with __slots__: graphs of 100,000 nodes make hundreds of thousands.


class KeyRef:
    """The value of another node: a graph key, or an Anonymous node."""

    __slots__ = ("node",)

    def __init__(self, node: Hashable) -> None:
        self.node = node

    def __repr__(self) -> str:
        return f"KeyRef({self.node!r})"


class Constant:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Constant({self.value!r})"


class ObjectArg:
    __slots__ = ("reference",)

    def __init__(self, reference: ObjectReference) -> None:
        self.reference = reference

    def __repr__(self) -> str:
        return f"ObjectArg({self.reference!r})"


Expression = Union[KeyRef, Constant, ObjectArg]


class Anonymous:
    """The node of a nested task or list: hashable by identity, never equal to a user's key."""

    __slots__ = ("where",)

    def __init__(self, where: Any) -> None:
        self.where = where  # a text, or a _Parser place (made into text only when shown)

    def __repr__(self) -> str:
        where = self.where
        return where if type(where) is str else _place(where)


def _place(where: tuple) -> str:
    """The text of a place in a tuple graph: (key,) is graph[key]; (place, " argument ", 1) is an argument of it."""
    if len(where) == 1:
        return f"graph[{where[0]!r}]"
    return f"{_place(where[0])}{where[1]}{where[2]}"


class PlannedTask:
    """One task of a plan. A plain class with __slots__, as the expressions: graphs have many thousands."""

    __slots__ = ("node", "function", "args", "kwargs", "requested", "dependencies")

    def __init__(
        self,
        node: Hashable,
        function: Any,
        args: List[Expression],
        kwargs: Optional[Dict[str, Expression]] = None,
        requested: bool = False,
    ) -> None:
        self.node = node
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self.requested = requested
        self.dependencies: Optional[List[Hashable]] = None  # the nodes it reads, once known (GraphBuilder.plan)

    def __repr__(self) -> str:
        return f"PlannedTask({self.node!r}, {self.function!r}, {self.args!r}, {self.kwargs!r}, {self.requested!r})"

    def expressions(self) -> Iterable[Expression]:
        if self.kwargs:
            return [*self.args, *self.kwargs.values()]
        return self.args


@dataclass
class GraphPlan:
    tasks: List[PlannedTask] = field(default_factory=list)  # dependencies first
    task_of_key: Dict[Hashable, Hashable] = field(default_factory=dict)  # requested key -> node of its task
    constant_of_key: Dict[Hashable, Any] = field(default_factory=dict)  # requested keys that are plain constants


def plan_graph(graph: Any, keys: Any) -> GraphPlan:
    """Validate the whole graph and plan the tasks `keys` need; raises TypeError/ValueError naming the bad node."""
    if not isinstance(graph, dict):
        raise TypeError(f"graph must be a dict of key -> node, got {type(graph).__name__}")
    if isinstance(keys, (str, bytes)) or not isinstance(keys, (list, tuple)):
        raise TypeError(f"keys must be a list of graph keys (like keys=['e']), got {keys!r}")
    check_keys_in_graph(graph, keys)
    parser = _Parser(graph)
    for key, value in graph.items():
        parser.parse_node(key, value)
    return parser.plan(keys)


def check_keys_in_graph(graph: Any, keys: Iterable[Any]) -> None:
    for key in keys:
        if not is_key(graph, key):
            raise ValueError(f"key {key!r} is not in the graph (graph keys: {_some_keys(graph)})")


class GraphBuilder:
    """The tasks and values of a graph being planned: what every graph format is read into.

    `tasks` maps a node to its task; `values` maps the nodes that are constants or object references to their
    expression, inlined into the tasks that use them.
    """

    def __init__(self) -> None:
        self.tasks: Dict[Hashable, PlannedTask] = {}
        self.values: Dict[Hashable, Expression] = {}

    def resolve(self, key: Hashable) -> Hashable:
        """The node a requested key names (formats with aliases follow them here)."""
        return key

    def plan(self, keys: Sequence[Hashable]) -> GraphPlan:
        """The tasks `keys` need, dependencies first; a cycle anywhere in the graph raises graphlib.CycleError."""
        self._inline_values()
        plan = GraphPlan()
        requested: Set[Hashable] = set()
        for key in keys:
            node = self.resolve(key)
            value = self.values.get(node)
            if value is None:
                requested.add(node)
                plan.task_of_key[key] = node
            elif isinstance(value, Constant):
                plan.constant_of_key[key] = value.value
            else:  # a requested ObjectReference: a task fetches it
                anonymous = Anonymous(f"{key!r} (object reference)")
                self.tasks[anonymous] = PlannedTask(anonymous, identity, [value])
                requested.add(anonymous)
                plan.task_of_key[key] = anonymous
        order = self._topological_order()
        needed = self._reachable(requested)
        for node in order:
            if node in needed:
                task = self.tasks[node]
                task.requested = node in requested
                plan.tasks.append(task)
        return plan

    def _inline_values(self) -> None:
        """A reference names the node resolve() gives; one to a constant or object node becomes that value itself:
        such nodes never run as tasks."""
        values = self.values
        resolve = self.resolve

        def inline(expression: Expression) -> Expression:
            if type(expression) is KeyRef:
                node = resolve(expression.node)
                value = values.get(node)
                if value is not None:
                    return value
                if node is not expression.node:
                    return KeyRef(node)
            return expression

        for task in self.tasks.values():
            task.args = [inline(arg) for arg in task.args]
            if task.kwargs:
                task.kwargs = {name: inline(arg) for name, arg in task.kwargs.items()}

    def _dependencies(self, node: Hashable) -> List[Hashable]:
        task = self.tasks[node]
        dependencies = task.dependencies
        if dependencies is None:  # worked out once: both the order and the reachable set need them
            dependencies = task.dependencies = [arg.node for arg in task.expressions() if type(arg) is KeyRef]
        return dependencies

    def _topological_order(self) -> List[Hashable]:
        """Every task node, dependencies first."""
        state: Dict[Hashable, bool] = {}  # False while on the current path, True once placed in the order
        order: List[Hashable] = []
        for root in self.tasks:
            if root in state:
                continue
            state[root] = False
            stack = [(root, iter(self._dependencies(root)))]
            while stack:
                node, pending = stack[-1]
                for dependency in pending:
                    placed = state.get(dependency)
                    if placed is None:
                        state[dependency] = False
                        stack.append((dependency, iter(self._dependencies(dependency))))
                        break
                    if not placed:
                        path = [entry[0] for entry in stack]
                        raise_cycle(path[path.index(dependency) :] + [dependency])
                else:
                    stack.pop()
                    state[node] = True
                    order.append(node)
        return order

    def _reachable(self, roots: Set[Hashable]) -> Set[Hashable]:
        seen = set(roots)
        frontier = list(roots)
        while frontier:
            for dependency in self._dependencies(frontier.pop()):
                if dependency not in seen:
                    seen.add(dependency)
                    frontier.append(dependency)
        return seen


def raise_cycle(cycle: List[Hashable]) -> None:
    """graphlib.CycleError (a ValueError) showing the cycle, with the cycle's nodes as its second argument, as
    graphlib.TopologicalSorter raises it."""
    raise graphlib.CycleError("graph has a cycle: {}".format(" -> ".join(repr(node) for node in cycle)), cycle)


class _Parser(GraphBuilder):
    """Graphs of tuples: `(callable, *args)` tasks, keys, lists and constants."""

    def __init__(self, graph: Dict[Hashable, Any]) -> None:
        super().__init__()
        self.graph = graph

    # A place in the graph is a tuple (see _place), made into text only for an error or an anonymous node's repr:
    # formatting the repr of every key and argument cost more than the rest of planning a node.

    def parse_node(self, key: Hashable, value: Any) -> None:
        where = (key,)
        if type(value) is tuple and value and callable(value[0]):
            self.tasks[key] = PlannedTask(key, value[0], self._arguments(value[1:], where))
        elif is_key(self.graph, value):
            self.tasks[key] = PlannedTask(key, identity, [KeyRef(value)])
        elif type(value) is tuple:
            if not value:
                raise ValueError(f"{_place(where)} is an empty tuple: a task is (callable, *args)")
            raise TypeError(
                f"{_place(where)} is a tuple whose first element {value[0]!r} is not callable: "
                "a task is (callable, *args); put a constant tuple in a list or return it from a function"
            )
        elif type(value) is list:
            expression = self._argument(value, where)
            if isinstance(expression, KeyRef):
                self.tasks[key] = self.tasks.pop(expression.node)  # the list's gather task is this node
                self.tasks[key].node = key
            else:
                self.values[key] = expression
        elif type(value) is ObjectReference:
            self.values[key] = ObjectArg(value)
        else:
            self.values[key] = Constant(value)

    def _arguments(self, args: Sequence[Any], where: tuple) -> List[Expression]:
        return [self._argument(arg, (where, " argument ", index + 1)) for index, arg in enumerate(args)]

    def _argument(self, arg: Any, where: tuple) -> Expression:
        kind = type(arg)
        if kind is tuple and arg and callable(arg[0]):
            return self._anonymous_task(where, arg[0], self._arguments(arg[1:], where))
        if kind is list:
            elements = [self._argument(element, (where, " element ", index)) for index, element in enumerate(arg)]
            if all(type(element) is Constant for element in elements):
                return Constant(arg)
            return self._anonymous_task(where, gather_list, elements)
        if is_key(self.graph, arg):
            return KeyRef(arg)
        if kind is ObjectReference:
            return ObjectArg(arg)
        return Constant(arg)

    def _anonymous_task(self, where: tuple, function: Any, args: List[Expression]) -> KeyRef:
        node = Anonymous(where)
        self.tasks[node] = PlannedTask(node, function, args)
        return KeyRef(node)


def is_key(graph: Any, value: Any) -> bool:
    """Whether value is a key of graph (an unhashable value never is)."""
    try:
        return value in graph
    except TypeError:  # unhashable: a constant
        return False


def _some_keys(graph: Any, limit: int = 10) -> str:
    keys = [repr(key) for key in list(graph)[:limit]]
    return ", ".join(keys) + (", ..." if len(graph) > limit else "")
