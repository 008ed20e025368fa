"""`SchedulerClusterCombo`: a scheduler and its workers on this machine, started and stopped from Python."""

from __future__ import annotations

import atexit
import os
import select
import signal
import socket
import subprocess
import sys
import weakref
from typing import Callable, List, Optional, Sequence

from scaler import config
from scaler.cluster.cluster import Cluster
from scaler.io.curve import prepare_local_keys
from scaler.io.sockets import validate_address
from scaler.scheduler.settings import SchedulerSettings

_SCHEDULER_START_TIMEOUT_SECONDS = 30.0


class SchedulerClusterCombo:
    """A scheduler process and `n_workers` worker processes, for local work and tests.

        cluster = SchedulerClusterCombo(address="tcp://127.0.0.1:2345", n_workers=4)
        with Client(cluster.get_address()) as client: ...
        cluster.shutdown()

    With `address=None` the scheduler binds a free port on 127.0.0.1. The constructor returns once the scheduler is
    listening (workers then connect on their own), and raises RuntimeError if it could not start, for example because
    the address is in use. The scheduler is protected by default, so client.shutdown() is refused; pass
    protected=False to let a client stop everything. Every process started here exits with this one, even if it is
    SIGKILLed, and shutdown() (also called at interpreter exit) leaves none behind.

    Its processes log warnings and errors only, to stdout, so that a program's own output is not buried under the
    cluster's start-up lines (as Dask's LocalCluster does); pass logging_level="INFO" to see them all, and
    logging_paths to send them to files.

    With `curve_keys_dir`, every connection uses CurveZMQ: the scheduler's and the workers' keys are made there if
    missing, and the scheduler accepts the public keys in `curve_keys_dir/authorized/` (the workers', and those of
    the clients you copy there). Clients then pass `curve_server_key_file=combo.curve_server_key_file`.
    """

    def __init__(
        self,
        address: Optional[str] = None,
        n_workers: int = config.DEFAULT_NUMBER_OF_WORKERS,
        event_loop: str = config.DEFAULT_EVENT_LOOP,
        protected: bool = config.DEFAULT_PROTECTED,
        monitor_address: Optional[str] = None,
        per_worker_queue_size: int = config.DEFAULT_WORKER_QUEUE_SIZE,
        heartbeat_interval_seconds: float = config.DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
        worker_timeout_seconds: float = config.DEFAULT_WORKER_TIMEOUT_SECONDS,
        client_timeout_seconds: float = config.DEFAULT_CLIENT_TIMEOUT_SECONDS,
        death_timeout_seconds: float = config.DEFAULT_DEATH_TIMEOUT_SECONDS,
        object_retention_seconds: float = config.DEFAULT_OBJECT_RETENTION_SECONDS,
        max_tasks_waiting: int = config.DEFAULT_MAX_TASKS_WAITING,
        task_retry_limit: int = config.DEFAULT_TASK_RETRY_LIMIT,
        balance_interval_seconds: float = config.DEFAULT_BALANCE_INTERVAL_SECONDS,
        logging_level: str = config.DEFAULT_COMBO_LOGGING_LEVEL,
        logging_paths: Sequence[str] = config.DEFAULT_LOGGING_PATHS,
        curve_keys_dir: Optional[str] = None,
    ) -> None:
        if not isinstance(protected, bool):
            raise TypeError(f"protected must be a bool, got {protected!r}")
        if event_loop not in config.EVENT_LOOPS:
            raise ValueError(f"event_loop must be one of {config.EVENT_LOOPS}, got {event_loop!r}")
        if event_loop == "uvloop":
            _require_uvloop()
        if isinstance(logging_paths, str):
            raise TypeError(f"logging_paths must be a sequence of paths, got the string {logging_paths!r}")
        self._address = _free_local_address() if address is None else validate_address(address)
        scheduler_secret = scheduler_public = worker_secret = authorized = None
        if curve_keys_dir is not None:
            scheduler_secret, scheduler_public, worker_secret, authorized = prepare_local_keys(curve_keys_dir)
        self.curve_server_key_file = scheduler_public
        # Both constructors validate every value now, in the caller, before any process starts.
        self._scheduler_settings = SchedulerSettings(
            address=self._address,
            monitor_address=monitor_address,
            protected=protected,
            event_loop=event_loop,
            heartbeat_interval_seconds=heartbeat_interval_seconds,
            worker_timeout_seconds=worker_timeout_seconds,
            client_timeout_seconds=client_timeout_seconds,
            max_tasks_waiting=max_tasks_waiting,
            task_retry_limit=task_retry_limit,
            balance_interval_seconds=balance_interval_seconds,
            logging_level=logging_level,
            logging_paths=tuple(logging_paths),
            curve_secret_key_file=scheduler_secret,
            curve_authorized_keys_dir=authorized,
        )
        self._cluster = Cluster(
            self._address,
            n_workers=n_workers,
            heartbeat_interval_seconds=heartbeat_interval_seconds,
            death_timeout_seconds=death_timeout_seconds,
            queue_size=per_worker_queue_size,
            object_retention_seconds=object_retention_seconds,
            logging_level=logging_level,
            logging_paths=logging_paths,
            curve_secret_key_file=worker_secret,
            curve_server_key_file=scheduler_public,
        )
        self._scheduler: Optional[subprocess.Popen] = None
        self._scheduler = _start_scheduler(self._scheduler_settings)
        try:
            self._cluster.start()
        except BaseException:
            self.shutdown()
            raise
        # at exit, without keeping this object alive until then
        self._exit_hook = _shutdown_at_exit(weakref.ref(self))
        atexit.register(self._exit_hook)

    def get_address(self) -> str:
        """The address clients connect to."""
        return self._address

    def get_monitor_address(self) -> str:
        """The address scaler_top and scaler_ui connect to."""
        return self._scheduler_settings.monitor_address

    def shutdown(self) -> None:
        """Stop the workers, then the scheduler, and wait until every process is gone. Idempotent."""
        self._cluster.shutdown()
        scheduler = self._scheduler
        if scheduler is not None and scheduler.poll() is None:
            scheduler.send_signal(signal.SIGTERM)
            try:
                scheduler.wait(config.DEFAULT_CLUSTER_SHUTDOWN_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                scheduler.kill()
                scheduler.wait()
        hook = getattr(self, "_exit_hook", None)
        if hook is not None:
            atexit.unregister(hook)
            self._exit_hook = None

    def __enter__(self) -> SchedulerClusterCombo:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        running = self._scheduler is not None and self._scheduler.poll() is None
        return f"<SchedulerClusterCombo {self._address} {'running' if running else 'stopped'}>"


def _start_scheduler(settings: SchedulerSettings) -> subprocess.Popen:
    """`python -m scaler.scheduler` in a fresh interpreter; returns once it is listening, RuntimeError otherwise."""
    read_end, write_end = os.pipe()
    command = [
        sys.executable, "-m", "scaler.scheduler", settings.address,
        "--monitor-address", settings.monitor_address,
        "--protected" if settings.protected else "--no-protected",
        "--event-loop", settings.event_loop,
        "--heartbeat-interval", repr(settings.heartbeat_interval_seconds),
        "--worker-timeout", repr(settings.worker_timeout_seconds),
        "--client-timeout", repr(settings.client_timeout_seconds),
        "--max-tasks-waiting", str(settings.max_tasks_waiting),
        "--task-retry-limit", str(settings.task_retry_limit),
        "--balance-interval", repr(settings.balance_interval_seconds),
        "--logging-level", settings.logging_level,
        "--logging-paths", *settings.logging_paths,
        *_curve_arguments(settings),
        "--exit-with-parent",
        "--ready-fd", str(write_end),
    ]  # fmt: skip
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, pass_fds=(write_end,))
    finally:
        os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], _SCHEDULER_START_TIMEOUT_SECONDS)
        answer = os.read(read_end, 64) if ready else b""
    finally:
        os.close(read_end)
    if answer.startswith(b"listening"):
        return process
    if process.poll() is None:
        process.kill()
    code = process.wait()
    raise RuntimeError(
        f"the scheduler did not start on {settings.address} (exit code {code}); its log above says why,"
        " for example the address is in use"
    )


def _curve_arguments(settings: SchedulerSettings) -> List[str]:
    if settings.curve_secret_key_file is None:
        return []
    return [
        "--curve-secret-key", settings.curve_secret_key_file,
        "--curve-authorized-keys", str(settings.curve_authorized_keys_dir),
    ]  # fmt: skip


def _free_local_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


def _require_uvloop() -> None:
    try:
        import uvloop  # noqa: F401
    except ImportError as error:
        raise ValueError('event_loop="uvloop" needs uvloop (CPython only): pip install "scaler[uvloop]"') from error


def _shutdown_at_exit(combo_ref: weakref.ref) -> Callable[[], None]:
    def shutdown() -> None:
        combo = combo_ref()
        if combo is not None:
            combo.shutdown()

    return shutdown


__all__ = ["SchedulerClusterCombo"]
