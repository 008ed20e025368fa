"""Internal: turning calls into Task messages: the serializer, the function cache and arguments, and sending them.

Serialization happens in the calling thread, so a bad argument raises at the call, as do arguments that do not bind
to the function's signature (signatures.py) and references to objects clear() deleted. Each distinct function is
serialized once per client (looked up by identity) and sent once per connection (looked up by content id); arguments
larger than DEFAULT_INLINE_LIMIT_BYTES travel as objects, sent once and deleted when no unanswered task needs them.
"""

from __future__ import annotations

import pickle
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import cloudpickle

from scaler.client import output
from scaler.client.caches import put_bounded
from scaler.client.calls import CallEncoder
from scaler.client.connection import Connection
from scaler.client.future import ScalerFuture
from scaler.client.ledger import ObjectNeed
from scaler.client.objects import ObjectReference, object_puts, qualified_name
from scaler.client.options import TaskOptions
from scaler.client.resubmission import GraphRecord
from scaler.client.signatures import CallShape, SignatureCache, anchor, identity_key
from scaler.client.task_message import task_message
from scaler.config import DEFAULT_CLIENT_FUNCTION_CACHE_SIZE, DEFAULT_INLINE_LIMIT_BYTES
from scaler.errors import MissingObjectError
from scaler.protocol import Argument, ArgumentKind, Encoded, ObjectKind, Task, encode
from scaler.serializer import DefaultSerializer, check_serializer, dump_to_shared, is_default_serializer, known_large
from scaler.tracebacks import note_unserializable_argument

OBJECT_REF = int(ArgumentKind.object_ref)
_KIND_OBJECT = int(ObjectKind.object)
_KIND_FUNCTION = int(ObjectKind.function)
_KIND_SERIALIZER = int(ObjectKind.serializer)


class TaskFactory:
    """One client's serializer and function cache; builds its tasks and hands them to a connection."""

    def __init__(self, serializer: Any, stream_output: bool = False) -> None:
        self.serializer = check_serializer(serializer)
        self.stream_output = stream_output  # tasks ask workers for their output (output.py prints it)
        self._function_names: Dict[bytes, str] = {}  # function id -> its name, to mark output lines (streaming only)
        self._custom_serializer = not is_default_serializer(self.serializer)
        # bytes; for a large value of the default serializer, SharedBytes: written once where the client serves it
        self.serialize: Callable[[Any], Any] = self.serializer.serialize if self._custom_serializer else _serialize
        self.deserialize = self.serializer.deserialize
        self.serializer_id = b""  # empty: cloudpickle, nothing to ship
        self._serializer_need: Optional[ObjectNeed] = None
        self._functions: Dict[Any, Tuple[Any, bytes]] = {}  # identity key -> (what keeps it alive, function id)
        self.signatures = SignatureCache(DEFAULT_CLIENT_FUNCTION_CACHE_SIZE)
        self._call_encoders: Dict[tuple, CallEncoder] = {}
        self._sites: Dict[Any, SubmitSite] = {}  # identity key -> what submit() looked up for that function last

    def prepare(self, connection: Connection) -> None:
        """Before the first task: a custom serializer gets its id, which every task names."""
        if self._custom_serializer and self._serializer_need is None:
            # Workers unpickle it with cloudpickle whatever it is, so it is cloudpickled, not serialized by itself.
            payload = cloudpickle.dumps(self.serializer)
            object_id = connection.content_ids.of(payload)
            self._serializer_need = (object_id, object_puts(object_id, _KIND_SERIALIZER, "", payload))
            self.serializer_id = object_id

    def forget_functions(self) -> None:
        self._functions.clear()
        self._sites.clear()

    # ---- functions ---------------------------------------------------------------------------------------------------

    def function_need(self, connection: Connection, fn: Any) -> ObjectNeed:
        """(function id, None) if this client serialized fn before, else (id, its ObjectPuts)."""
        entry = self._functions.get(identity_key(fn))
        if entry is not None:
            return entry[1], None
        return self.serialize_function(connection, fn)

    def serialize_function(self, connection: Connection, fn: Any, function_id: Optional[bytes] = None) -> ObjectNeed:
        """fn's id and ObjectPuts; `function_id` keeps the id tasks were already built with (any id names it)."""
        payload = self.serialize(fn)
        if function_id is None:
            function_id = connection.content_ids.of(payload)
        # The entry keeps fn alive, so its id() cannot be reused by another object while the entry exists; an evicted
        # one is only serialized again if used again.
        put_bounded(self._functions, identity_key(fn), (fn, function_id), DEFAULT_CLIENT_FUNCTION_CACHE_SIZE)
        if self.stream_output:
            short_name = getattr(fn, "__name__", None)
            name = short_name if isinstance(short_name, str) else qualified_name(fn)
            put_bounded(self._function_names, function_id, name, DEFAULT_CLIENT_FUNCTION_CACHE_SIZE)
        return function_id, object_puts(function_id, _KIND_FUNCTION, qualified_name(fn), payload)

    def stream(self, connection: Connection, task: Task) -> None:
        """Ask for the task's output, and name its lines after its function and number."""
        task.stream_output = True
        name = self._function_names.get(task.function_id, "task")
        output.label_task(task.task_id, f"{name}#{connection.task_number(task.task_id)}")

    # ---- tasks -------------------------------------------------------------------------------------------------------

    def submit(
        self,
        connection: Connection,
        fn: Any,
        args: Sequence[Any],
        kwargs: Dict[str, Any],
        profiling: bool,
        parent: bytes,
        options: TaskOptions,
    ) -> ScalerFuture:
        """One call of fn, checked, built and queued: Client.submit.

        A loop of submits calls one function with one setup again and again: its signature, function id and encoder
        are looked up once (a SubmitSite) and the Task queued with no ObjectPut to work out (Connection.send_task);
        any other call, or one the scheduler lacks the function of (clear()), goes the general way."""
        site = self._sites.get(identity_key(fn))
        function_need: Optional[ObjectNeed] = None
        if site is None or not site.fits(profiling, parent, options, self.serializer_id):
            site, function_need = self._new_site(connection, fn, args, kwargs, profiling, parent, options)
        elif site.shape is not None:
            site.shape.check(args, kwargs)
        encoder = site.encoder
        needs: List[ObjectNeed] = []
        message, future, encoded, held = self.call(connection, encoder, args, kwargs, needs)
        if function_need is None:
            if encoded and connection.core.send_task(site.object_ids, message, future, encoder.retries):
                return future
            function_need = (encoder.function_id, None)
        self.send(
            connection, ((fn, function_need),), needs, [Encoded(message) if encoded else message], [future],
            [message], encoder.retries, {future.task_id: held} if held else None,
        )  # fmt: skip
        return future

    def _new_site(
        self,
        connection: Connection,
        fn: Any,
        args: Sequence[Any],
        kwargs: Dict[str, Any],
        profiling: bool,
        parent: bytes,
        options: TaskOptions,
    ) -> Tuple[SubmitSite, ObjectNeed]:
        """The first call of fn with this setup (checked here): its SubmitSite, kept, and its function's ObjectNeed."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        shape = self.signatures.shape(fn)
        if shape is not None:
            shape.check(args, kwargs)
        function_need = self.function_need(connection, fn)
        site = SubmitSite(anchor(fn), shape, self.call_encoder(function_need[0], profiling, parent, options))
        put_bounded(self._sites, identity_key(fn), site, DEFAULT_CLIENT_FUNCTION_CACHE_SIZE)
        return site, function_need

    def call_encoder(self, function_id: bytes, profiling: bool, parent: bytes, options: TaskOptions) -> CallEncoder:
        """The encoder of this function's calls with this profiling setting, parent task and options, kept for later
        calls."""
        key = (function_id, profiling, parent, self.serializer_id, options.key)
        encoder = self._call_encoders.get(key)
        if encoder is None:
            if len(self._call_encoders) >= DEFAULT_CLIENT_FUNCTION_CACHE_SIZE:
                self._call_encoders = {}  # a parent task id per nested call site: start over now and then
            encoder = CallEncoder(function_id, parent, self.serializer_id, profiling, self.serialize, options)
            self._call_encoders[key] = encoder
        return encoder

    def call(
        self,
        connection: Connection,
        encoder: CallEncoder,
        args: Sequence[Any],
        kwargs: Dict[str, Any],
        needs: List[ObjectNeed],
    ) -> Tuple[Any, ScalerFuture, bool, Optional[List[bytes]]]:
        """(the call's Task, its future, whether that Task is already encoded bytes, the objects it holds): a call of
        positional arguments that travel inline is encoded by template here; any other one is a Task message built by
        task()."""
        datas: Sequence[bytes] = ()
        if not kwargs and not self.stream_output:  # a streamed task is labeled and flagged: a Task message
            datas, plain = encoder.serialize_args(args)
            if plain:
                task_id = connection.new_task_id()
                encoded = encoder.encode(task_id, datas)
                if encoded is not None:
                    future = ScalerFuture(task_id, connection, encoder.profiling, self.deserialize)
                    return encoded, future, True, None
        message, future, held = self.task(
            connection, encoder.function_id, args, kwargs, encoder.profiling, encoder.parent, encoder.options, needs,
            datas,
        )  # fmt: skip
        return message, future, False, held

    def task(
        self,
        connection: Connection,
        function_id: bytes,
        args: Sequence[Any],
        kwargs: Dict[str, Any],
        profiling: bool,
        parent: bytes,
        options: TaskOptions,
        needs: List[ObjectNeed],
        datas: Sequence[bytes] = (),
    ) -> Tuple[Any, ScalerFuture, Optional[List[bytes]]]:
        """One task: its message, its future, the objects it holds (or None); arguments too large to travel inline are
        added to `needs` as objects. `datas`: the bytes of the first arguments, already serialized
        (CallEncoder.serialize_args)."""
        serialize = self.serialize
        arguments = []
        held: List[bytes] = []
        inline_bytes = 0
        which: object = 0  # the argument being serialized, for the note on its error
        try:
            for index, arg in enumerate(args):
                if type(arg) is ObjectReference:
                    check_reference(connection, arg)
                    arguments.append(Argument(kind=OBJECT_REF, data=arg.object_id))
                    continue
                which = index
                data = datas[index] if index < len(datas) else serialize(arg)
                if len(data) <= DEFAULT_INLINE_LIMIT_BYTES:
                    inline_bytes += len(data)
                    arguments.append(Argument(data=data))
                else:
                    arguments.append(self.object_argument(connection, data, "", needs, held))
            for name, arg in kwargs.items():
                which = name
                argument = self.argument(connection, arg, name, needs, held)
                if argument.kind != OBJECT_REF:
                    inline_bytes += len(argument.data)
                arguments.append(argument)
        except MissingObjectError:
            raise
        except Exception as error:
            note_unserializable_argument(error, which)
            raise
        return self.task_of(connection, function_id, arguments, profiling, parent, options, held, inline_bytes)

    def task_of(
        self,
        connection: Connection,
        function_id: bytes,
        arguments: List[Argument],
        profiling: bool,
        parent: bytes,
        options: TaskOptions,
        held: List[bytes],
        inline_bytes: int,
        dependencies: Sequence[bytes] = (),
    ) -> Tuple[Any, ScalerFuture, Optional[List[bytes]]]:
        """The Task of these arguments (`held`: the ids of those sent as objects for it; `inline_bytes`: the size of
        the others) as the message to send (kept while unanswered, to send again to a scheduler that lost it), its
        future, and the objects it holds (or None)."""
        task_id = connection.new_task_id()
        task = task_message(
            task_id, function_id, arguments, options, profiling, parent, self.serializer_id, dependencies
        )  # fmt: skip
        if self.stream_output:
            self.stream(connection, task)
        future = ScalerFuture(task_id, connection, profiling, self.deserialize)
        # Many inline arguments could make one batched frame huge: such a task travels as a frame of its own.
        message = task if inline_bytes <= DEFAULT_INLINE_LIMIT_BYTES else encode(task)
        return message, future, held or None

    def argument(
        self, connection: Connection, arg: Any, name: str, needs: List[ObjectNeed], held: List[bytes]
    ) -> Argument:
        if type(arg) is ObjectReference:
            check_reference(connection, arg)
            return Argument(kind=OBJECT_REF, name=name, data=arg.object_id)
        data = self.serialize(arg)
        if len(data) <= DEFAULT_INLINE_LIMIT_BYTES:
            return Argument(name=name, data=data)
        return self.object_argument(connection, data, name, needs, held)

    def object_argument(
        self, connection: Connection, data: bytes, name: str, needs: List[ObjectNeed], held: List[bytes]
    ) -> Argument:
        object_id = connection.content_ids.of(data)
        needs.append((object_id, object_puts(object_id, _KIND_OBJECT, "", data)))
        held.append(object_id)
        return Argument(kind=OBJECT_REF, name=name, data=object_id)

    # ---- sending -----------------------------------------------------------------------------------------------------

    def send(
        self,
        connection: Connection,
        functions: Sequence[Tuple[Any, ObjectNeed]],
        needs: List[ObjectNeed],
        messages: List[Any],
        futures: Sequence[ScalerFuture] = (),
        kept: Sequence[Any] = (),
        retries: int = 0,
        held: Optional[Dict[bytes, List[bytes]]] = None,
        pin: Optional[bytes] = None,
    ) -> None:
        """Queue messages after the serializer, functions and objects they need that the scheduler lacks, and track
        the tasks of `futures` (ClientCore.send)."""
        core = connection.core
        first = self._with_serializer([need for _, need in functions] + needs)
        if core.send(first, messages, futures, kept, retries, held, pin):
            return
        fresh = self._with_serializer(self._fresh(connection, functions) + needs)
        core.send(fresh, messages, futures, kept, retries, held, pin)

    def send_graph(
        self,
        connection: Connection,
        functions: Sequence[Tuple[Any, ObjectNeed]],
        needs: List[ObjectNeed],
        frame: bytes,
        record: GraphRecord,
        retries: int,
        objects: Optional[List[bytes]],
    ) -> None:
        """send() of a graph's frame, each of its keys holding `objects` and the graph's record."""
        core = connection.core
        if core.send_graph(
            self._with_serializer([need for _, need in functions] + needs), frame, record, retries, objects
        ):
            return
        core.send_graph(
            self._with_serializer(self._fresh(connection, functions) + needs), frame, record, retries, objects
        )

    def _fresh(self, connection: Connection, functions: Sequence[Tuple[Any, ObjectNeed]]) -> List[ObjectNeed]:
        """A function's id was cached but clear() deleted it since: the functions serialized again, under the ids the
        messages already carry."""
        return [self.serialize_function(connection, function, need[0]) for function, need in functions]

    def _with_serializer(self, needs: List[ObjectNeed]) -> List[ObjectNeed]:
        if self._serializer_need is not None:
            needs.insert(0, self._serializer_need)
        return needs


class SubmitSite:
    """What submit() looked up for one function: its signature (None: unchecked), and the encoder of its calls with
    one profiling setting, parent task and options; `function` keeps fn alive, so that its identity key names it."""

    __slots__ = ("function", "shape", "encoder", "object_ids")

    def __init__(self, function: Any, shape: Optional[CallShape], encoder: CallEncoder) -> None:
        self.function = function
        self.shape = shape
        self.encoder = encoder
        # what the scheduler must hold for these calls: their function, and the client's serializer if not cloudpickle
        serializer_id = encoder.serializer_id
        self.object_ids = (serializer_id, encoder.function_id) if serializer_id else (encoder.function_id,)

    def fits(self, profiling: bool, parent: bytes, options: TaskOptions, serializer_id: bytes) -> bool:
        encoder = self.encoder
        return (
            encoder.profiling is profiling
            and encoder.options is options
            and encoder.parent == parent
            and encoder.serializer_id == serializer_id
        )


def check_reference(connection: Connection, reference: ObjectReference) -> None:
    """MissingObjectError if this connection sent the object and clear() has deleted it since.

    A reference made by another client (or another connection of this process) is left to the scheduler.
    """
    if reference.owner == connection.identity and not connection.holds_object(reference.object_id):
        raise MissingObjectError(
            f"{reference!r} was deleted by clear() (or never sent by this client): send_object it again"
        )


_PLAIN = frozenset({int, float, bool, type(None), complex, str})  # most arguments: pickled as the default does


def _serialize(value: Any) -> Any:
    """The default serializer's bytes; a value sure to be large (bytes, arrays) is pickled straight into shared memory
    instead, with its arrays out of band: the client serves it from there (or sends it from there to an older
    scheduler), and a worker on this host maps it, its arrays without a copy."""
    if type(value) in _PLAIN:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    if known_large(value, DEFAULT_INLINE_LIMIT_BYTES):
        return dump_to_shared(value)
    return DefaultSerializer.serialize(value)
