"""Internal: the process's connection for `scaler.compat.ray`: `init`, `shutdown`, `is_initialized`.

One Client per process, as Ray has one driver connection; `init()` without an address starts a local scheduler and
workers (a SchedulerClusterCombo) and `shutdown()` stops them.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Optional

from scaler import task_context
from scaler.client import Client
from scaler.client.connection import Connection

_LOCAL = (None, "local")
# Ray's init() keywords that mean nothing here, accepted so that Ray programs start unchanged.
_IGNORED_INIT = frozenset(
    {
        "namespace",
        "logging_level",
        "logging_format",
        "log_to_driver",
        "include_dashboard",
        "dashboard_host",
        "dashboard_port",
        "configure_logging",
        "local_mode",
        "_temp_dir",
        "_system_config",
        "object_store_memory",
        "_memory",
        "resources",
        "labels",
        "num_gpus",
    }
)


@dataclass(frozen=True)
class RayContext:
    """What `init` returns: the scheduler's address, and whether init started it."""

    address: str
    started_local_cluster: bool

    @property
    def address_info(self) -> dict:
        return {"address": self.address}


class _Session:
    def __init__(self, client: Client, cluster: Any, generation: int) -> None:
        self.client = client
        self.cluster = cluster  # the SchedulerClusterCombo init() started, or None
        self.generation = generation  # RemoteFunctions keep client views per generation


_lock = threading.Lock()
_session: Optional[_Session] = None
_generations = 0


def init(
    address: Optional[str] = None,
    *,
    num_cpus: Optional[int] = None,
    ignore_reinit_error: bool = False,
    runtime_env: Optional[dict] = None,
    **kwargs: Any,
) -> RayContext:
    """Connect to the Scaler scheduler at `address`, or, without one (or "local"), start a scheduler and `num_cpus`
    workers (default: one per CPU) on this machine, stopped by `shutdown()` or at exit.

    Keywords of a Client (serializer, timeout_seconds, curve files...) are passed on to it; Ray's dashboard, logging
    and namespace keywords are accepted and ignored; `runtime_env` raises NotImplementedError."""
    global _session, _generations
    if runtime_env:
        raise NotImplementedError("runtime_env is not supported: install what tasks need on the workers")
    if task_context.current_task_id is not None and address in _LOCAL:
        raise RuntimeError("ray.init() inside a task would start a cluster per task: call it in the driver")
    if address == "auto":
        raise ValueError('address="auto" has no meaning here: give the scheduler\'s address, like "tcp://host:2345"')
    client_keywords = {name: value for name, value in kwargs.items() if name not in _IGNORED_INIT}
    with _lock:
        if _session is not None:
            if ignore_reinit_error:
                return _context(_session)
            raise RuntimeError("ray.init() was called twice: call ray.shutdown() first, or pass ignore_reinit_error")
        cluster = None
        if address in _LOCAL:
            from scaler.cluster.combo import SchedulerClusterCombo

            workers = num_cpus if num_cpus is not None else (os.cpu_count() or 1)
            cluster = SchedulerClusterCombo(n_workers=max(1, workers))
            address = cluster.get_address()
        try:
            client = Client(address=address, **client_keywords)
        except BaseException:
            if cluster is not None:
                cluster.shutdown()
            raise
        _generations += 1
        _session = _Session(client, cluster, _generations)
        return _context(_session)


def _context(session: _Session) -> RayContext:
    return RayContext(session.client._address, session.cluster is not None)


def shutdown() -> None:
    """Disconnect (which cancels unfinished tasks and frees what was put), and stop the cluster init() started."""
    global _session
    with _lock:
        session, _session = _session, None
    if session is None:
        return
    try:
        session.client.disconnect()
    finally:
        if session.cluster is not None:
            session.cluster.shutdown()


def is_initialized() -> bool:
    return _session is not None


def current() -> _Session:
    """The session; as in Ray, the first remote call or put of a program that did not call init() starts a local
    cluster (never inside a task, where that would start a cluster per task)."""
    session = _session
    if session is None:
        if task_context.current_task_id is not None:
            raise RuntimeError("remote calls from inside a task are not supported by scaler.compat.ray")
        init(ignore_reinit_error=True)
        session = _session
        assert session is not None
    return session


def connection_of(session: _Session) -> Connection:
    """The session client's open connection (DisconnectedError once it is closed)."""
    return session.client._open_connection()
