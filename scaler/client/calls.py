"""Internal: the hot path of submit and map: a call whose positional arguments all travel inline, encoded by template.

The Tasks of one function's calls (from one client view, with one parent task and one profiling setting) differ only in
their task id and their arguments' bytes, so each shape of call (its arguments' lengths) is encoded once by the
protocol's encoder and every later call of that shape is one join of constant pieces and its own bytes (see
scaler/fastpath/templates.py): no Argument or Task objects, no per-field encoding. Calls with keywords, object
references or large arguments go through TaskFactory.task as before.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from scaler.client.objects import ObjectReference
from scaler.client.options import TaskOptions
from scaler.client.task_message import task_message
from scaler.config import DEFAULT_INLINE_LIMIT_BYTES
from scaler.protocol import Argument, Task, Template, make_template, worth_a_template
from scaler.tracebacks import note_unserializable_argument

_SHAPES_PER_ENCODER = 256  # argument lengths remembered per encoder; past that it starts over
_NOT_MADE: Any = object()


class CallEncoder:
    __slots__ = (
        "function_id",
        "parent",
        "serializer_id",
        "profiling",
        "_serialize",
        "_templates",
        "_seen",
        "options",
        "retries",
    )

    def __init__(
        self,
        function_id: bytes,
        parent: bytes,
        serializer_id: bytes,
        profiling: bool,
        serialize: Callable[[Any], bytes],
        options: TaskOptions,
    ) -> None:
        self.function_id = function_id
        self.options = options  # the task policies of every call (client.options())
        self.retries = options.retries
        self.parent = parent
        self.serializer_id = serializer_id
        self.profiling = profiling
        self._serialize = serialize
        self._templates: Dict[Any, Optional[Template]] = {}  # length of the one argument, or tuple of lengths
        self._seen: Dict[Any, int] = {}  # shapes met too few times to be worth a template yet

    def serialize_args(self, args: Sequence[Any]) -> Tuple[List[bytes], bool]:
        """The bytes of the arguments before the first object reference, and whether the call can be encoded here:
        not if an argument is a reference or too large to travel inline, or if all together would make a frame of
        their own. The bytes are reused by TaskFactory.task then, so no argument is serialized twice."""
        serialize = self._serialize
        datas: List[bytes] = []
        total = 0
        try:
            for arg in args:
                if type(arg) is ObjectReference:
                    return datas, False
                data = serialize(arg)
                total += len(data)
                datas.append(data)
        except Exception as error:
            note_unserializable_argument(error, len(datas))  # the one after those serialized
            raise
        return datas, total <= DEFAULT_INLINE_LIMIT_BYTES

    def encode(self, task_id: bytes, datas: List[bytes]) -> Optional[bytes]:
        """The Task of this call, encoded; None if its shape has no template (then encode a Task message)."""
        key = len(datas[0]) if len(datas) == 1 else tuple([len(data) for data in datas])
        template = self._templates.get(key, _NOT_MADE)
        if template is _NOT_MADE:
            template = self._make(key, task_id, datas)
        if template is None:
            return None
        return template.encode([task_id, *datas])

    def _make(self, key: Any, task_id: bytes, datas: List[bytes]) -> Optional[Template]:
        if len(self._seen) >= _SHAPES_PER_ENCODER:
            self._seen = {}
        if not worth_a_template(self._seen, key, 1 + len(datas)):
            return None
        if len(self._templates) >= _SHAPES_PER_ENCODER:
            self._templates = {}
        function_id, parent, profiling = self.function_id, self.parent, self.profiling
        serializer_id = self.serializer_id
        options = self.options

        def build(values: Sequence[bytes]) -> Task:
            arguments = [Argument(data=data) for data in values[1:]]
            return task_message(values[0], function_id, arguments, options, profiling, parent, serializer_id)

        template = self._templates[key] = make_template(build, [len(task_id), *map(len, datas)])
        return template
