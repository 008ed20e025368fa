"""Internal: The Client: submit functions, maps, graphs and objects to a Scaler scheduler."""

from __future__ import annotations

import functools
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, Dict, Hashable, Iterable, List, Optional, Sequence, Set, Tuple, Union

from scaler import task_context
from scaler.client.actors import ActorHandle, create_actor
from scaler.client.connection import Connection
from scaler.client.dask_graph import (
    dask_available,
    flatten_keys,
    has_task_spec_nodes,
    is_dask_call,
    plan_dask_graph,
    shape_like,
)
from scaler.client.future import FINISHED, FailureLatch, ScalerFuture
from scaler.client.graph import GraphPlan, plan_graph
from scaler.client.graph_encoding import submit_plan
from scaler.client.ledger import ObjectNeed
from scaler.client.objects import ObjectReference, object_puts
from scaler.client.options import DEFAULT_OPTIONS, UNSET, TaskOptions, check_profiling
from scaler.client.tasks import TaskFactory
from scaler.config import (
    DEFAULT_CLIENT_CONNECT_TIMEOUT_SECONDS,
    DEFAULT_TASKS_PER_FRAME,
    TCP_KEEPALIVE,
    TCP_KEEPALIVE_COUNT,
    TCP_KEEPALIVE_IDLE,
    TCP_KEEPALIVE_INTERVAL,
)
from scaler.errors import DisconnectedError, TaskPoliciesUnsupportedError
from scaler.io.curve_keys import CurvePeerKeys, load_peer_keys
from scaler.io.sockets import TcpKeepalive, validate_address
from scaler.protocol import ObjectKind
from scaler.serializer import DefaultSerializer, SerializerLike

if TYPE_CHECKING:
    from scaler.client.executor import ScalerExecutor
    from scaler.client.progress import ProgressBar

_KIND_OBJECT = int(ObjectKind.object)
logger = logging.getLogger(__name__)

# Clients unpickled in one process (nested tasks) share one connection per scheduler address: a connection per task
# would leave a thread and a socket behind for every task a worker runs.
_shared_connections: Dict[Tuple[int, str, Optional[CurvePeerKeys], TcpKeepalive], Connection] = {}
_shared_lock = threading.Lock()


class Client:
    """A connection to a Scaler scheduler. Use it as a context manager, or call disconnect() when done.

    `serializer` is a Serializer subclass or instance (cloudpickle by default). `profiling=True` makes workers measure
    every task (see ScalerFuture.profiling_info); submit and map take a `profiling` keyword to choose per call.
    `timeout_seconds` bounds the wait for the scheduler's handshake (TimeoutError after it). A scheduler lost later
    (killed, restarted, upgraded) is waited for `reconnect_seconds` (default: timeout_seconds) from the last message
    heard: if one answers on the address in time, the client registers again and resubmits every unfinished task
    under the same id, so results come as if nothing happened (a task may run twice, as after a worker death);
    otherwise unfinished futures fail with SchedulerGoneError, a TimeoutError. `reconnect_seconds=0` fails them as
    soon as the connection closes (or after timeout_seconds of silence). See the docs, "Failures and recovery", for
    what the client keeps to resubmit. On a scheduler with
    CurveZMQ on, pass this client's key pair file (`NAME.key_secret` from scaler_keygen) and the scheduler's public
    key file (`NAME.key`) as `curve_secret_key_file` and `curve_server_key_file`. `tcp_keepalive` and its
    `tcp_keepalive_idle_seconds`, `tcp_keepalive_interval_seconds` and `tcp_keepalive_count` set the TCP keepalive of
    the connection, as the options of the same names do for the scheduler and workers (the docs' Settings page).

    `stream_output=True` prints what its tasks write to stdout and stderr (print, logging to the standard streams,
    C code, subprocesses) on this process's stdout and stderr as they run, each line marked "[function#n]", a task's
    lines before its result() returns; the workers' task_output_limit_bytes caps each task (see the docs, Task output).

    A Client is picklable, so a task can receive one and submit nested tasks: in the worker it connects on first use,
    to the same address (which must be reachable from there), and tags what it submits as children of the running task.

    `client.options(resources=..., priority=..., retries=..., timeout_seconds=..., profiling=...)` is a view of the
    same client whose tasks carry those policies (see options()); the client itself keeps the defaults.
    """

    def __init__(
        self,
        address: str,
        serializer: SerializerLike = DefaultSerializer,
        profiling: bool = False,
        timeout_seconds: float = DEFAULT_CLIENT_CONNECT_TIMEOUT_SECONDS,
        curve_secret_key_file: Optional[str] = None,
        curve_server_key_file: Optional[str] = None,
        stream_output: bool = False,
        reconnect_seconds: Optional[float] = None,
        tcp_keepalive: bool = TCP_KEEPALIVE.default,
        tcp_keepalive_idle_seconds: int = TCP_KEEPALIVE_IDLE.default,
        tcp_keepalive_interval_seconds: int = TCP_KEEPALIVE_INTERVAL.default,
        tcp_keepalive_count: int = TCP_KEEPALIVE_COUNT.default,
    ) -> None:
        self._configure(
            address,
            serializer,
            profiling,
            timeout_seconds,
            curve_secret_key_file,
            curve_server_key_file,
            stream_output,
            reconnect_seconds,
        )
        self._keepalive = TcpKeepalive.checked(
            tcp_keepalive, tcp_keepalive_idle_seconds, tcp_keepalive_interval_seconds, tcp_keepalive_count
        )
        self._shared = False
        self._connection: Optional[Connection] = self._new_connection()
        if stream_output and not self._connection.forwards_task_output:
            logger.warning("the scheduler at %s does not forward task output (an older version): none shown", address)

    def _configure(
        self,
        address: str,
        serializer: Any,
        profiling: Any,
        timeout_seconds: Any,
        curve_secret_key_file: Optional[str],
        curve_server_key_file: Optional[str],
        stream_output: Any,
        reconnect_seconds: Any = None,
    ) -> None:
        self._address = validate_address(address)
        self._curve_files = (curve_secret_key_file, curve_server_key_file)
        self._curve = load_peer_keys(curve_secret_key_file, curve_server_key_file)
        if not isinstance(stream_output, bool):
            raise TypeError(f"stream_output must be a bool, got {stream_output!r}")
        self._factory = TaskFactory(serializer, stream_output)
        self._default_profiling = check_profiling(profiling)
        self._profiling = self._default_profiling  # a view's profiling option, if it has one, else this
        self._options = DEFAULT_OPTIONS
        if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, (int, float)) or timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be a positive number, got {timeout_seconds!r}")
        self._timeout_seconds = float(timeout_seconds)
        if reconnect_seconds is not None and (
            isinstance(reconnect_seconds, bool)
            or not isinstance(reconnect_seconds, (int, float))
            or reconnect_seconds < 0
        ):
            raise ValueError(f"reconnect_seconds must be a number >= 0 (0: do not wait), got {reconnect_seconds!r}")
        self._reconnect_seconds = None if reconnect_seconds is None else float(reconnect_seconds)
        self._detached = False
        self._unpickled = False

    # ---- pickling: nested tasks --------------------------------------------------------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        return {
            "address": self._address,
            "serializer": self._factory.serializer,
            "profiling": self._default_profiling,
            "timeout_seconds": self._timeout_seconds,
            "curve_files": self._curve_files,  # paths, never the keys: the files must exist where the task runs
            "stream_output": self._factory.stream_output,  # children's lines join the parent's output (output.py)
            "reconnect_seconds": self._reconnect_seconds,
            "keepalive": tuple(self._keepalive),
            "options": self._options.as_keywords(),  # a view's policies hold for the tasks it submits from a task
        }

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self._configure(
            state["address"],
            state["serializer"],
            state["profiling"],
            state["timeout_seconds"],
            state["curve_files"][0],
            state["curve_files"][1],
            state.get("stream_output", False),
            state.get("reconnect_seconds"),
        )
        self._keepalive = TcpKeepalive(*state["keepalive"])
        self._set_options(DEFAULT_OPTIONS.refined(**state.get("options", {})))
        self._shared = True
        self._unpickled = True  # uses its process's connection to the address, whichever is open (_connect_shared)
        self._connection = None  # connects on first use: unpickling must stay cheap and never block

    # ---- lifetime ----------------------------------------------------------------------------------------------------

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.disconnect()

    def __repr__(self) -> str:
        connection = self._connection
        state = "not connected yet" if connection is None else (connection.closed_reason or "connected")
        options = self._options.describe()
        state = "disconnected" if self._detached else state
        return f"<Client {self._address} {state}{' ' if options else ''}{options}>"

    # ---- task policies -----------------------------------------------------------------------------------------------

    def options(
        self,
        resources: Any = UNSET,
        priority: Any = UNSET,
        retries: Any = UNSET,
        timeout_seconds: Any = UNSET,
        profiling: Any = UNSET,
    ) -> Client:
        """A view of this client (same connection, nothing new opened) whose submit, map, starmap, get, submit_graph
        and executor() give every task they create these policies:

        - `resources={"gpu": 1}`: run only on a worker offering at least that much of each (`scaler_cluster
          --resources gpu=1`); a task no connected worker can take waits for one. Default None: runs anywhere.
        - `priority=0`: higher runs first, among the scheduler's ready tasks and in a worker's queue; equal priorities
          keep submission order.
        - `retries=0`: run a task whose function raises (or times out) again, on any worker, up to this often; the
          future gets the last exception, with a note of the attempts.
        - `timeout_seconds=None`: stop a task that has run (in its processor) longer than this; its future fails with
          scaler.errors.TaskTimeoutError. Each retry gets a new timeout.
        - `profiling=None`: as the call's own `profiling` keyword says, else as the client says.

        The defaults are today's behaviour; a view's options are refined by calling options() on it again
        (`client.options(priority=1).options(retries=2)` has both), only the keywords given change. Bad values raise
        here (TypeError for a wrong type, ValueError for a wrong value). The keyword arguments of the functions
        submitted are never read. A scheduler that does not implement task policies (an older version) makes
        submitting with any policy set raise TaskPoliciesUnsupportedError rather than ignore it. The view shares the
        client's connection: disconnect() on a view only detaches the view.
        """
        view = type(self).__new__(type(self))
        view.__dict__.update(self.__dict__)
        view._shared = True  # the connection is the client's: the view's disconnect() leaves it open
        view._set_options(
            self._options.refined(
                resources=resources,
                priority=priority,
                retries=retries,
                timeout_seconds=timeout_seconds,
                profiling=profiling,
            )
        )
        return view

    def _set_options(self, options: TaskOptions) -> None:
        self._options = options
        self._profiling = self._default_profiling if options.profiling is None else options.profiling

    def _task_options(self, connection: Connection) -> TaskOptions:
        """This view's options, checked against what the scheduler honours."""
        options = self._options
        if options.key is not None:
            self._check_policies(connection, options)
        return options

    def _check_policies(self, connection: Connection, options: TaskOptions) -> None:
        if not connection.task_policies:
            raise TaskPoliciesUnsupportedError(
                f"the scheduler at {self._address} does not implement task policies (an older version): "
                f"it would ignore {options.describe()}; upgrade it, or submit without options()"
            )

    def disconnect(self) -> None:
        """Leave the scheduler, which cancels this client's unfinished tasks and frees its objects. Idempotent.

        Unfinished futures are cancelled. A Client received by a task shares its process's connection with the other
        tasks there; disconnecting it only detaches it.
        """
        if self._detached:
            return
        self._detached = True
        connection = self._connection
        if connection is not None and not self._shared:
            connection.close(shutdown_cluster=False)

    def shutdown(self) -> None:
        """Stop the scheduler and its workers, then disconnect.

        ValueError if the scheduler is protected (the default), TimeoutError if it does not answer; in both cases the
        client stays connected and usable.
        """
        self._open_connection().close(shutdown_cluster=True)
        self._detached = True

    def clear(self) -> None:
        """Cancel every unfinished task of this client and delete its objects (ObjectReferences become invalid)."""
        connection = self._open_connection()
        self._factory.forget_functions()
        connection.clear()

    # ---- tasks -------------------------------------------------------------------------------------------------------

    def submit(self, fn: Any, /, *args: Any, profiling: Optional[bool] = None, **kwargs: Any) -> ScalerFuture:
        """Run fn(*args, **kwargs) on a worker.

        `profiling` is taken by submit, not passed to fn (use functools.partial to give fn a keyword of that name).
        ObjectReferences from send_object are resolved when they are top-level arguments, positional or keyword.
        Arguments that do not bind to fn's signature raise TypeError here, as fn itself would.
        """
        return self._submit(fn, args, kwargs, self._profiling if profiling is None else check_profiling(profiling))

    def actor(self, cls: type, /, *args: Any, **kwargs: Any) -> ActorHandle:
        """Create an instance of `cls` on a worker, kept there with its state: `handle.method(*args)` returns a
        ScalerFuture of that method's call on it (see State on workers in the docs).

        Returns at once; the constructor runs on the worker (`handle.created` is its future). Arguments that do not
        bind to the constructor raise TypeError here. This view's resources place the actor; actor calls have no
        retries, and a view with timeout_seconds raises ValueError (a stopped call would kill the actor's state).
        """
        return create_actor(self, cls, args, kwargs)

    def _submit_options(
        self, fn: Any, args: Sequence[Any], kwargs: Dict[str, Any], options: TaskOptions
    ) -> ScalerFuture:
        """Submit with options other than this view's (an actor's tasks): the task id taken and the task queued under
        the connection's actor-call lock, so that its actor calls are sent in the order of their ids, which workers
        read as sequence numbers (docs/protocol.md, "Actors")."""
        connection = self._open_connection()
        parent = task_context.current_task_id or b""
        with connection.actor_calls:
            return self._factory.submit(connection, fn, args, kwargs, self._profiling, parent, options)

    def _submit(self, fn: Any, args: Sequence[Any], kwargs: Dict[str, Any], profiling: bool) -> ScalerFuture:
        connection = self._open_connection()
        options = self._options
        if options.key is not None:  # spelled out: submit() is a hot path
            if not callable(fn):
                raise TypeError(f"fn must be callable, got {fn!r}")  # before the policies, as map() does
            self._check_policies(connection, options)
        parent = task_context.current_task_id or b""
        return self._factory.submit(connection, fn, args, kwargs, profiling, parent, options)

    def map(
        self,
        fn: Any,
        iterable: Iterable[Sequence[Any]],
        profiling: Optional[bool] = None,
        progress: Union[bool, str] = False,
    ) -> List[Any]:
        """[fn(*args) for args in iterable], run on workers; raises the exception of the first failing task.

        Every element of iterable is a tuple (or list) of positional arguments: client.map(f, [(1,), (2,)]).
        `progress=True` (or a label) shows a progress bar, updated as results arrive (needs tqdm: "scaler[progress]").
        """
        if progress:
            from scaler.client.progress import ProgressBar

            ProgressBar.check_available()
        futures, latch = self._map_futures(fn, iterable, profiling)
        bar = None
        if progress:
            bar = ProgressBar(len(futures), progress if isinstance(progress, str) else None)
        return _results(self._open_connection(), futures, latch, bar)

    starmap = map

    def _map_futures(
        self, fn: Any, iterable: Iterable[Sequence[Any]], profiling: Optional[bool]
    ) -> Tuple[List[ScalerFuture], FailureLatch]:
        """map's tasks, sent; their futures, in order, sharing one FailureLatch."""
        connection = self._open_connection()
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        profiling = self._profiling if profiling is None else check_profiling(profiling)
        options = self._task_options(connection)
        if isinstance(iterable, (str, bytes)):
            raise TypeError(f"iterable must hold argument tuples like [(1,), (2,)], got {iterable!r}")
        all_args = iterable if isinstance(iterable, (list, tuple)) else list(iterable)
        self._check_calls(fn, all_args)
        no_kwargs: Dict[str, Any] = {}
        factory = self._factory
        function_need = factory.function_need(connection, fn)
        encoder = factory.call_encoder(function_need[0], profiling, task_context.current_task_id or b"", options)
        futures: List[ScalerFuture] = []
        latch = FailureLatch()
        try:
            # A frame's worth at a time, so that workers start while later tasks are still being serialized.
            for start in range(0, len(all_args), DEFAULT_TASKS_PER_FRAME):
                needs: List[ObjectNeed] = []
                messages: List[Any] = []
                encoded_tasks: List[bytes] = []  # joined into one frame
                batch: List[ScalerFuture] = []
                kept: List[Any] = []  # each task's message as sent
                held: Dict[bytes, List[bytes]] = {}
                for args in all_args[start : start + DEFAULT_TASKS_PER_FRAME]:
                    message, future, encoded, objects = factory.call(connection, encoder, args, no_kwargs, needs)
                    future._latch = latch
                    if encoded:
                        encoded_tasks.append(message)
                    else:
                        if encoded_tasks:  # in order: the frame so far, then this one
                            messages.append(b"".join(encoded_tasks))
                            encoded_tasks = []
                        messages.append(message)
                    batch.append(future)
                    kept.append(message)
                    if objects:
                        held[future.task_id] = objects
                if encoded_tasks:
                    messages.append(b"".join(encoded_tasks))
                factory.send(
                    connection, ((fn, function_need),), needs, messages, batch, kept, encoder.retries, held or None
                )
                futures.extend(batch)
        except BaseException:
            _cancel(connection, futures)  # an argument failed to serialize: no half map left running
            raise
        return futures, latch

    def _check_calls(self, fn: Any, all_args: Sequence[Any]) -> None:
        """TypeError naming the first element of all_args that is not a tuple of arguments binding to fn."""
        shape = self._factory.signatures.shape(fn)
        no_kwargs: Dict[str, Any] = {}
        for index, args in enumerate(all_args):
            if type(args) is not tuple and type(args) is not list:
                raise TypeError(f"element {index} of iterable must be a tuple of arguments like (x,), got {args!r}")
            if shape is not None and not shape.fewest <= len(args) <= shape.most:
                try:
                    shape.check(args, no_kwargs)
                except TypeError as error:
                    raise TypeError(f"element {index} of iterable: {error}") from None

    def send_object(self, obj: Any, name: Optional[str] = None) -> ObjectReference:
        """Ship obj to the scheduler once; pass the reference as a top-level argument of submit, map or a graph.

        The object is serialized with the client's serializer and kept until clear() or disconnect. A reference
        nested in a list or another object reaches the task as the reference itself, not the object.
        """
        connection = self._open_connection()
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {name!r}: the signature is send_object(obj, name=None)")
        payload = self._factory.serialize(obj)
        object_id = connection.content_ids.of(payload)
        needs: List[ObjectNeed] = [(object_id, object_puts(object_id, _KIND_OBJECT, name or "", payload))]
        self._factory.send(connection, (), needs, [], (), pin=object_id)
        return ObjectReference(object_id, name or "", len(payload), connection.identity)

    # ---- graphs ------------------------------------------------------------------------------------------------------

    def get(self, graph: Any, keys: Any, block: bool = True, **dask_options: Any) -> Any:
        """Compute the keys of a graph: {key: value} in key order, or {key: future} with block=False.

        The graph is checked before anything is sent (TypeError/ValueError naming the bad node, graphlib.CycleError
        for a cycle, KeyError for a key asked twice); only the nodes the keys need are sent. If a node fails, every
        requested key depending on it raises that node's exception. See scaler/client/graph.py for what a node may be.

        It is also a dask scheduler: `dask.compute(x, scheduler=client.get)`. Given what dask hands a scheduler (a
        collection's graph, one key or nested lists of keys), results come back shaped like `keys`, as from dask's own
        schedulers, and the scheduler keywords dask passes on are accepted and ignored (see dask_graph.py).
        """
        connection = self._open_connection()
        options = self._task_options(connection)
        latch = FailureLatch()
        parent = task_context.current_task_id or b""
        if is_dask_call(graph, keys):
            wanted = flatten_keys(keys)
            plan = _plan(graph, wanted, dask_call=True)
            futures = submit_plan(self._factory, connection, plan, wanted, self._profiling, parent, options, latch)
            values = futures if not block else _results(connection, futures, latch)
            return shape_like(keys, dict(zip(wanted, values)))
        if dask_options:
            raise TypeError(f"get() got unexpected keyword arguments: {', '.join(sorted(dask_options))}")
        plan = _plan(graph, keys, dask_call=False)
        _check_no_repeated_keys(keys)
        futures = submit_plan(self._factory, connection, plan, keys, self._profiling, parent, options, latch)
        if not block:
            return dict(zip(keys, futures))
        return dict(zip(keys, _results(connection, futures, latch)))

    def submit_graph(self, graph: Any, keys: Sequence[Hashable]) -> List[ScalerFuture]:
        """Like get(graph, keys, block=False), as a list of futures in key order."""
        connection = self._open_connection()
        options = self._task_options(connection)
        if isinstance(keys, (str, bytes)) or not isinstance(keys, (list, tuple)):
            raise TypeError(f"keys must be a list of graph keys (like keys=['e']), got {keys!r}")
        plan = _plan(graph, keys, dask_call=not isinstance(graph, dict) or has_task_spec_nodes(graph))
        parent = task_context.current_task_id or b""
        return submit_plan(self._factory, connection, plan, keys, self._profiling, parent, options)

    # ---- integrations ------------------------------------------------------------------------------------------------

    def executor(self, **options: Any) -> ScalerExecutor:
        """A concurrent.futures.Executor running its calls on this client's cluster (see scaler/client/executor.py).

        Its calls carry this client's (or view's) options, refined by the keywords given, as options() takes them
        (resources, priority, retries, timeout_seconds, profiling): `client.executor(retries=2)` is
        `client.options(retries=2).executor()`. Its shutdown() does not disconnect the client."""
        from scaler.client.executor import ScalerExecutor

        return ScalerExecutor(self.options(**options) if options else self)

    # ---- connection --------------------------------------------------------------------------------------------------

    def _open_connection(self) -> Connection:
        if self._detached:
            raise DisconnectedError("the client is disconnected: create a new Client")
        connection = self._connection
        if connection is None or (self._unpickled and connection.closed_reason is not None):
            connection = self._connect_shared()  # a task's connection closes when the task ends: a new one per task
        connection.check_open()
        self._factory.prepare(connection)
        return connection

    def _connect_shared(self) -> Connection:
        key = (os.getpid(), self._address, self._curve, self._keepalive)
        with _shared_lock:
            connection = _shared_connections.get(key)
            if connection is None or connection.closed_reason is not None:
                connection = self._new_connection()
                _shared_connections[key] = connection
                if task_context.current_task_id is not None:
                    # Opened for a task (nested tasks): it says goodbye when the task ends, which cancels the children
                    # the task did not wait for. Kept open for the processor's next tasks, it would be dropped without
                    # one when the worker ends a spare processor, and the scheduler would hold it for its timeout.
                    task_context.at_task_end.append(functools.partial(_close_for_task, connection))
        self._connection = connection
        return connection

    def _new_connection(self) -> Connection:
        return Connection(self._address, self._timeout_seconds, self._curve, self._keepalive, self._reconnect_seconds)


def _close_for_task(connection: Connection) -> None:
    """The goodbye of a connection a task opened, when the task ends. Not waiting for the scheduler's answer (a round
    trip the task's result would wait for), but for the IO thread to have sent it: the worker may end the processor
    (SIGKILL) as soon as its result is in, and a goodbye still in this process would be lost with it."""
    with _shared_lock:
        for key, shared in list(_shared_connections.items()):
            if shared is connection:
                del _shared_connections[key]
    connection.close(shutdown_cluster=False, timeout_seconds=0)


def _plan(graph: Any, keys: Sequence[Hashable], dask_call: bool) -> GraphPlan:
    """Graphs of tuples are read by graph.py; dask's graphs, and graphs given the way dask gives them, by dask's own
    conversion (dask_graph.py), where dask is installed."""
    if dask_call and (not isinstance(graph, dict) or dask_available()):
        return plan_dask_graph(graph, list(keys))
    return plan_graph(graph, keys)


def _check_no_repeated_keys(keys: Sequence[Hashable]) -> None:
    """{key: value} cannot hold a key twice: KeyError, as in the seed system."""
    seen: Set[Hashable] = set()
    for key in keys:
        if key in seen:
            raise KeyError(f"key {key!r} is asked for twice in keys")
        seen.add(key)


_PROGRESS_REFRESH_SECONDS = 0.1  # while a result is awaited, the bar moves at least this often


def _results(
    connection: Connection, futures: List[ScalerFuture], latch: FailureLatch, bar: Optional[ProgressBar] = None
) -> List[Any]:
    """Every future's result in order. As soon as one fails (see FailureLatch), the rest are cancelled, with their
    graphs, and the exception of the first failed future in order is raised. A progress bar, if any, is moved to the
    count of settled futures while waiting."""
    values = []
    try:
        for future in futures:
            if future._state != FINISHED or future._exception is not None:  # else settled: no lock, no wait
                if bar is None:
                    future._wait_unless_failed(latch)
                else:
                    while not future._wait_unless_failed(latch, _PROGRESS_REFRESH_SECONDS):
                        bar.update_to(latch.settled)
                if latch.failed:
                    for failed in futures:
                        if failed.done() and not failed.cancelled() and failed.exception() is not None:
                            failed.result()  # raises its exception
            if bar is not None:
                bar.update_now_and_then(latch.settled)
            values.append(future.result())  # raises CancelledError if it was cancelled (clear(), disconnect)
        if bar is not None:
            bar.update_to(latch.settled)
        return values
    except BaseException:
        _cancel(connection, futures, latch)
        raise
    finally:
        if bar is not None:
            bar.close()


def _cancel(connection: Connection, futures: List[ScalerFuture], latch: Optional[FailureLatch] = None) -> None:
    connection.core.cancel_futures(futures, latch.graph_nodes if latch is not None else ())
