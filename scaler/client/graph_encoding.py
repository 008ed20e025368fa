"""Internal: a planned graph (graph.py) as Task messages: taskRef arguments and dependencies, in one frame.

The scheduler links a node to its dependencies when the node arrives, and keeps a dependency's result only for the
consumers it knows of by the time the dependency finishes: so every node of a graph travels in one frame, dependencies
first. Objects (functions, large constants) go before, as ordinary messages.

A constant is serialized once per graph however many nodes use it. One that several nodes use and that is not tiny
(dask's fused subgraphs: the same few kilobytes in each of thousands of chunk tasks) travels as an object: sent once,
fetched once per worker and deserialized once per processor, instead of copied into every task.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

from scaler.client.connection import Connection
from scaler.client.future import FailureLatch, ScalerFuture
from scaler.client.graph import Constant, Expression, GraphPlan, KeyRef, ObjectArg
from scaler.client.ledger import ObjectNeed
from scaler.client.options import TaskOptions
from scaler.client.resubmission import GraphRecord
from scaler.client.task_message import shaped_like, task_message
from scaler.client.tasks import OBJECT_REF, TaskFactory, check_reference
from scaler.config import DEFAULT_INLINE_LIMIT_BYTES
from scaler.errors import FrameTooLargeError
from scaler.protocol import Argument, ArgumentKind, Builder, Task, Template, encode, make_template, worth_a_template

_TASK_REF = int(ArgumentKind.task_ref)
_INLINE = int(ArgumentKind.inline)
_SHARED_CONSTANT_MIN_BYTES = 1024  # a constant used by several nodes travels as an object from this size on
# Equal values of these types serialize to equal bytes, so they (and short tuples of them) are serialized once per
# graph even when each node holds its own copy, like the chunk shapes and keys of dask's nodes.
_PLAIN_SCALARS = frozenset({str, bytes, int, bool, type(None)})
_PLAIN_TUPLE_MAX = 16
_NOT_MADE: Any = object()


def submit_plan(
    factory: TaskFactory,
    connection: Connection,
    plan: GraphPlan,
    keys: Sequence[Hashable],
    profiling: bool,
    parent: bytes,
    options: TaskOptions,
    latch: Optional[FailureLatch] = None,
) -> List[ScalerFuture]:
    """Send the plan's tasks, every node with the options of the call; the futures of `keys`, in order (a constant key
    gets a future that is already done)."""
    task_ids = {planned.node: connection.new_task_id() for planned in plan.tasks}
    constants = _Constants(factory, connection, plan)
    functions: Dict[int, Tuple[Any, ObjectNeed]] = {}  # by id(): each of the graph's functions once
    tasks: List[Task] = []
    futures: Dict[Hashable, ScalerFuture] = {}
    unreported: List[bytes] = []
    for planned in plan.tasks:
        function = planned.function
        known = functions.get(id(function))
        if known is None:
            known = functions[id(function)] = (function, factory.function_need(connection, function))
        function_need = known[1]
        arguments: List[Argument] = []
        dependencies: Dict[bytes, None] = {}  # in order, once each
        for expression in planned.args:
            arguments.append(_argument(connection, expression, "", task_ids, constants, dependencies))
        if planned.kwargs:
            for name, expression in planned.kwargs.items():
                arguments.append(_argument(connection, expression, name, task_ids, constants, dependencies))
        task_id = task_ids[planned.node]
        task = task_message(
            task_id, function_need[0], arguments, options, profiling, parent, factory.serializer_id, list(dependencies),
            planned.requested,
        )  # fmt: skip
        if factory.stream_output:
            factory.stream(connection, task)
        tasks.append(task)
        if planned.requested:
            futures[planned.node] = ScalerFuture(task_id, connection, profiling, factory.deserialize)
        else:
            unreported.append(task_id)
    frame = _NodeEncoder().encode(tasks)
    if len(frame) > connection.max_frame_bytes:
        raise FrameTooLargeError(
            f"graph encodes to {len(frame)} bytes, over the scheduler's frame limit of {connection.max_frame_bytes}"
            " bytes (scaler_scheduler --max-frame-bytes): send large constants with send_object or split the graph"
        )
    record = GraphRecord(tasks, {future.task_id: future for future in futures.values()}, unreported)
    for future in futures.values():
        future._latch = latch
    if latch is not None:
        latch.graph_nodes = unreported
    # every requested key holds the graph's objects, and its record while unanswered
    factory.send_graph(
        connection, list(functions.values()), constants.needs, frame, record, options.retries, constants.objects or None
    )
    return [
        futures[plan.task_of_key[key]] if key in plan.task_of_key else _done(plan.constant_of_key[key]) for key in keys
    ]


def _argument(
    connection: Connection,
    expression: Expression,
    name: str,
    task_ids: Dict[Hashable, bytes],
    constants: _Constants,
    dependencies: Dict[bytes, None],
) -> Argument:
    if type(expression) is KeyRef:
        dependency = task_ids[expression.node]
        dependencies[dependency] = None
        return Argument(kind=_TASK_REF, name=name, data=dependency)
    if type(expression) is ObjectArg:
        check_reference(connection, expression.reference)
        return Argument(kind=OBJECT_REF, name=name, data=expression.reference.object_id)
    assert type(expression) is Constant
    kind, data = constants.argument(expression.value)
    return Argument(kind=kind, name=name, data=data)


class _Constants:
    """The graph's constants, each serialized once, and the objects that carry the large or shared ones."""

    def __init__(self, factory: TaskFactory, connection: Connection, plan: GraphPlan) -> None:
        self._factory = factory
        self._connection = connection
        self._uses = Counter(
            id(expression.value)
            for planned in plan.tasks
            for expression in planned.expressions()
            if type(expression) is Constant
        )
        self._cache: Dict[int, Tuple[Any, int, bytes]] = {}  # id of a constant -> (the constant, its kind, its data)
        self._plain: Dict[Any, Tuple[int, bytes]] = {}  # _plain_key of a constant -> (its kind, its data)
        self.needs: List[ObjectNeed] = []
        self._objects: Dict[bytes, None] = {}  # ids of the objects, held until every requested key is answered

    def argument(self, value: Any) -> Tuple[int, bytes]:
        """(kind, data) of the argument that carries `value`."""
        cached = self._cache.get(id(value))
        if cached is not None and cached[0] is value:
            return cached[1], cached[2]
        plain_key = _plain_key(value)
        if plain_key is not None:
            plain = self._plain.get(plain_key)
            if plain is None:
                plain = self._plain[plain_key] = self._serialize(value)
            return plain
        kind, data = self._serialize(value)
        self._cache[id(value)] = (value, kind, data)  # keeps value alive, so its id() is not reused meanwhile
        return kind, data

    def _serialize(self, value: Any) -> Tuple[int, bytes]:
        data = self._factory.serialize(value)
        size = len(data)
        if size > DEFAULT_INLINE_LIMIT_BYTES or (size >= _SHARED_CONSTANT_MIN_BYTES and self._uses[id(value)] > 1):
            held: List[bytes] = []
            argument = self._factory.object_argument(self._connection, data, "", self.needs, held)
            self._objects.update(dict.fromkeys(held))
            kind, data = argument.kind, argument.data
        else:
            kind = _INLINE
        return kind, data

    @property
    def objects(self) -> List[bytes]:
        return list(self._objects)


class _NodeEncoder:
    """A graph's Tasks as one frame, each encoded by template (scaler/fastpath/templates.py): the nodes of one
    function and shape (their arguments' kinds, names and lengths, their dependencies' lengths, whether they report;
    profiling, parent, serializer, streaming and policies are the graph's) differ only in their ids and their
    arguments' bytes, so each node after the first of its shape is one join."""

    def __init__(self) -> None:
        self._templates: Dict[tuple, Optional[Template]] = {}
        self._seen: Dict[tuple, int] = {}  # shapes met too few times to be worth a template yet

    def encode(self, tasks: List[Task]) -> bytes:
        templates = self._templates
        parts = []
        for task in tasks:
            args = task.args
            dependencies = task.dependencies
            key = (
                task.function_id,
                task.report_result,
                tuple([(argument.kind, argument.name, len(argument.data)) for argument in args]),
                tuple([len(dependency) for dependency in dependencies]),
            )
            template = templates.get(key, _NOT_MADE)
            if template is _NOT_MADE:
                template = self._template(key, task)
            if template is None:
                parts.append(encode(task))
            else:
                parts.append(template.encode([task.task_id, *[argument.data for argument in args], *dependencies]))
        return b"".join(parts)

    def _template(self, key: tuple, task: Task) -> Optional[Template]:
        """The shape's template once it is worth making (None until then, and if none can be trusted)."""
        lengths = _lengths(task)
        if not worth_a_template(self._seen, key, len(lengths)):
            return None
        template = self._templates[key] = make_template(_node_builder(task), lengths)
        return template


def _lengths(task: Task) -> List[int]:
    return [len(task.task_id), *[len(argument.data) for argument in task.args], *map(len, task.dependencies)]


def _node_builder(task: Task) -> Builder:
    """The Tasks shaped like `task`, from (task id, each argument's data, each dependency)."""
    arguments = [(argument.kind, argument.name) for argument in task.args]
    count = len(arguments)

    def build(values: Sequence[bytes]) -> Task:
        args = [Argument(kind=kind, name=name, data=data) for (kind, name), data in zip(arguments, values[1:])]
        return shaped_like(task, values[0], args, list(values[1 + count :]))

    return build


def _done(value: Any) -> ScalerFuture:
    """A requested key that is a plain constant: known without asking anyone."""
    future = ScalerFuture(b"")
    future.set_result(value)
    return future


def _plain_key(value: Any) -> Any:
    """A key equal for equal values that serialize to equal bytes (the type is part of it: 1 and True differ), or
    None for values that may not."""
    kind = type(value)
    if kind in _PLAIN_SCALARS:
        return (kind, value)
    if kind is tuple and len(value) <= _PLAIN_TUPLE_MAX:
        parts = []
        for element in value:
            element_kind = type(element)
            if element_kind not in _PLAIN_SCALARS:
                return None
            parts.append((element_kind, element))
        return (tuple, tuple(parts))
    return None
