"""Dask-style graphs: validated at the call, then planned as tasks whose arguments name other tasks.

A graph is a dict from keys to nodes. A node is a task `(callable, *args)`, a list, another key (an alias), an
ObjectReference, or any other value (a constant). An argument of a task is a key (the value of that node), a nested
task tuple, a list (evaluated element by element, so a list of keys is the list of their values), an ObjectReference,
or a constant. A tuple whose first element is not callable is a constant when it is an argument, and malformed when it
is a node.

Constants never become tasks: they are inlined into the tasks that use them. Everything else becomes a task, including
the small helper tasks `gather_list` (a list holding keys, nested tasks or references) and `identity` (an alias, or a
requested reference). The helpers need no change to the protocol or to workers: they are ordinary functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, List, Sequence, Set, Union

from scaler.client.objects import ObjectReference


def gather_list(*values: Any) -> list:
    """Graph helper task: a list argument whose elements were computed by other tasks."""
    return list(values)


def identity(value: Any) -> Any:
    """Graph helper task: an alias of another key, or a requested ObjectReference."""
    return value


@dataclass(frozen=True)
class KeyRef:
    node: Hashable  # a graph key, or an _Anonymous node


@dataclass(frozen=True)
class Constant:
    value: Any


@dataclass(frozen=True)
class ObjectArg:
    reference: ObjectReference


Expression = Union[KeyRef, Constant, ObjectArg]


class _Anonymous:
    """The node of a nested task or list: hashable by identity, never equal to a user's key."""

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return self.label


@dataclass
class PlannedTask:
    node: Hashable
    function: Any
    args: List[Expression]
    requested: bool = False


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
    for key in keys:
        if not _is_key(graph, key):
            raise ValueError(f"key {key!r} is not in the graph (graph keys: {_some_keys(graph)})")

    parser = _Parser(graph)
    for key, value in graph.items():
        parser.parse_node(key, value)
    parser.inline_values()

    plan = GraphPlan()
    requested: Set[Hashable] = set()
    for key in keys:
        node = parser.values.get(key)
        if node is None:
            requested.add(key)
            plan.task_of_key[key] = key
        elif isinstance(node, Constant):
            plan.constant_of_key[key] = node.value
        else:  # a requested ObjectReference: a task fetches it
            anonymous = _Anonymous(f"{key!r} (object reference)")
            parser.tasks[anonymous] = PlannedTask(anonymous, identity, [node])
            requested.add(anonymous)
            plan.task_of_key[key] = anonymous

    order = parser.topological_order()
    needed = parser.reachable(requested)
    for node in order:
        if node in needed:
            task = parser.tasks[node]
            task.requested = node in requested
            plan.tasks.append(task)
    return plan


class _Parser:
    def __init__(self, graph: Dict[Hashable, Any]) -> None:
        self.graph = graph
        self.tasks: Dict[Hashable, PlannedTask] = {}
        self.values: Dict[Hashable, Expression] = {}  # nodes that are constants or object references

    def parse_node(self, key: Hashable, value: Any) -> None:
        where = f"graph[{key!r}]"
        if type(value) is tuple and value and callable(value[0]):
            self.tasks[key] = PlannedTask(key, value[0], self._arguments(value[1:], where))
        elif _is_key(self.graph, value):
            self.tasks[key] = PlannedTask(key, identity, [KeyRef(value)])
        elif type(value) is tuple:
            if not value:
                raise ValueError(f"{where} is an empty tuple: a task is (callable, *args)")
            raise TypeError(
                f"{where} is a tuple whose first element {value[0]!r} is not callable: a task is (callable, *args); "
                "put a constant tuple in a list or return it from a function"
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

    def _arguments(self, args: Sequence[Any], where: str) -> List[Expression]:
        return [self._argument(arg, f"{where} argument {index + 1}") for index, arg in enumerate(args)]

    def _argument(self, arg: Any, where: str) -> Expression:
        kind = type(arg)
        if kind is tuple and arg and callable(arg[0]):
            return self._anonymous_task(where, arg[0], self._arguments(arg[1:], where))
        if kind is list:
            elements = [self._argument(element, f"{where} element {index}") for index, element in enumerate(arg)]
            if all(type(element) is Constant for element in elements):
                return Constant(arg)
            return self._anonymous_task(where, gather_list, elements)
        if _is_key(self.graph, arg):
            return KeyRef(arg)
        if kind is ObjectReference:
            return ObjectArg(arg)
        return Constant(arg)

    def _anonymous_task(self, where: str, function: Any, args: List[Expression]) -> KeyRef:
        node = _Anonymous(where)
        self.tasks[node] = PlannedTask(node, function, args)
        return KeyRef(node)

    def inline_values(self) -> None:
        """A reference to a constant or object node becomes that value itself: such nodes never run as tasks."""
        values = self.values
        for task in self.tasks.values():
            task.args = [
                values.get(arg.node, arg) if type(arg) is KeyRef and arg.node in values else arg for arg in task.args
            ]

    def dependencies(self, node: Hashable) -> List[Hashable]:
        return [arg.node for arg in self.tasks[node].args if type(arg) is KeyRef]

    def topological_order(self) -> List[Hashable]:
        """Every task node, dependencies first; a cycle anywhere in the graph is a ValueError showing it."""
        state: Dict[Hashable, bool] = {}  # False while on the current path, True once placed in the order
        order: List[Hashable] = []
        for root in self.tasks:
            if root in state:
                continue
            state[root] = False
            stack = [(root, iter(self.dependencies(root)))]
            while stack:
                node, pending = stack[-1]
                for dependency in pending:
                    placed = state.get(dependency)
                    if placed is None:
                        state[dependency] = False
                        stack.append((dependency, iter(self.dependencies(dependency))))
                        break
                    if not placed:
                        path = [entry[0] for entry in stack]
                        cycle = path[path.index(dependency) :] + [dependency]
                        raise ValueError("graph has a cycle: {}".format(" -> ".join(repr(n) for n in cycle)))
                else:
                    stack.pop()
                    state[node] = True
                    order.append(node)
        return order

    def reachable(self, roots: Set[Hashable]) -> Set[Hashable]:
        seen = set(roots)
        frontier = list(roots)
        while frontier:
            for dependency in self.dependencies(frontier.pop()):
                if dependency not in seen:
                    seen.add(dependency)
                    frontier.append(dependency)
        return seen


def _is_key(graph: Dict[Hashable, Any], value: Any) -> bool:
    try:
        return value in graph
    except TypeError:  # unhashable: a constant
        return False


def _some_keys(graph: Dict[Hashable, Any], limit: int = 10) -> str:
    keys = [repr(key) for key in list(graph)[:limit]]
    return ", ".join(keys) + (", ..." if len(graph) > limit else "")
