"""A planned graph (graph.py) as Task messages: taskRef arguments and dependencies, in one frame.

The scheduler links a node to its dependencies when the node arrives, and keeps a dependency's result only for the
consumers it knows of by the time the dependency finishes: so every node of a graph travels in one frame, dependencies
first. Objects (functions, large constants) go before, as ordinary messages.
"""

from __future__ import annotations

from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

from scaler.client.connection import Connection
from scaler.client.future import FailureLatch, ScalerFuture
from scaler.client.graph import Constant, GraphPlan, KeyRef, ObjectArg
from scaler.client.ledger import ObjectNeed
from scaler.client.tasks import OBJECT_REF, TaskFactory
from scaler.config import DEFAULT_MAX_FRAME_BYTES
from scaler.protocol import Argument, ArgumentKind, Task, encode_many

_TASK_REF = int(ArgumentKind.task_ref)


def submit_plan(
    factory: TaskFactory,
    connection: Connection,
    plan: GraphPlan,
    keys: Sequence[Hashable],
    profiling: bool,
    parent: bytes,
    latch: Optional[FailureLatch] = None,
) -> List[ScalerFuture]:
    """Send the plan's tasks; the futures of `keys`, in order (a constant key gets a future that is already done)."""
    task_ids = {planned.node: connection.new_task_id() for planned in plan.tasks}
    needs: List[ObjectNeed] = []
    functions: List[Tuple[Any, ObjectNeed]] = []
    graph_objects: List[bytes] = []
    constants: Dict[int, Tuple[Any, Argument]] = {}  # id of a constant -> (the constant, its argument)
    tasks: List[Task] = []
    futures: Dict[Hashable, ScalerFuture] = {}
    unreported: List[bytes] = []
    for planned in plan.tasks:
        function_need = factory.function_need(connection, planned.function)
        functions.append((planned.function, function_need))
        arguments: List[Argument] = []
        dependencies: List[bytes] = []
        for expression in planned.args:
            if type(expression) is KeyRef:
                dependency = task_ids[expression.node]
                arguments.append(Argument(kind=_TASK_REF, data=dependency))
                if dependency not in dependencies:
                    dependencies.append(dependency)
            elif type(expression) is ObjectArg:
                arguments.append(Argument(kind=OBJECT_REF, data=expression.reference.object_id))
            else:
                arguments.append(_constant(factory, connection, expression, constants, needs, graph_objects))
        task_id = task_ids[planned.node]
        tasks.append(
            Task(
                task_id=task_id,
                function_id=function_need[0],
                args=arguments,
                dependencies=dependencies,
                profiling=profiling,
                report_result=planned.requested,
                parent_task_id=parent,
                serializer_id=factory.serializer_id,
            )
        )
        if planned.requested:
            futures[planned.node] = ScalerFuture(task_id, connection, profiling, factory.deserialize)
        else:
            unreported.append(task_id)
    frame = encode_many(tasks) if tasks else b""
    if len(frame) > DEFAULT_MAX_FRAME_BYTES:
        raise ValueError(
            f"graph encodes to {len(frame)} bytes, over the {DEFAULT_MAX_FRAME_BYTES}-byte frame limit: "
            "send large constants with send_object or split the graph"
        )
    for future in futures.values():
        future._held_objects = graph_objects or None  # every requested key holds the graph's objects
        future._graph_task_ids = unreported or None
        future._latch = latch
    factory.send(connection, functions, needs, [frame] if frame else [], list(futures.values()))
    return [
        futures[plan.task_of_key[key]] if key in plan.task_of_key else _done(plan.constant_of_key[key]) for key in keys
    ]


def _constant(
    factory: TaskFactory,
    connection: Connection,
    constant: Constant,
    constants: Dict[int, Tuple[Any, Argument]],
    needs: List[ObjectNeed],
    graph_objects: List[bytes],
) -> Argument:
    """A constant's argument, serialized once per graph however many nodes use it."""
    cached = constants.get(id(constant.value))
    if cached is not None and cached[0] is constant.value:
        return cached[1]
    held: List[bytes] = []
    argument = factory.argument(connection, constant.value, "", needs, held)
    graph_objects.extend(object_id for object_id in held if object_id not in graph_objects)
    constants[id(constant.value)] = (constant.value, argument)
    return argument


def _done(value: Any) -> ScalerFuture:
    """A requested key that is a plain constant: known without asking anyone."""
    future = ScalerFuture(b"")
    future.set_result(value)
    return future
