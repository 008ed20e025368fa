"""Internal: `SchedulerClusterCombo`, a scheduler and its workers on this machine, started and stopped from Python.

The class is public, as `from scaler import SchedulerClusterCombo`.
"""

from __future__ import annotations

import atexit
import inspect
import os
import select
import signal
import socket
import subprocess
import sys
import weakref
from typing import Any, Callable, Optional

from scaler import config
from scaler.cluster.cluster import Cluster
from scaler.io.curve import prepare_local_keys
from scaler.io.sockets import validate_address
from scaler.scheduler.settings import SchedulerSettings
from scaler.settings_spec import SCHEDULER, WORKER

_SCHEDULER_START_TIMEOUT_SECONDS = 30.0
# made from curve_keys_dir, so not keywords of their own
_CURVE_FILES = {"curve_secret_key_file", "curve_server_key_file", "curve_authorized_keys_dir"}


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

    Every other keyword is a setting of the scheduler, of the workers, or of both (the docs' Settings page lists them;
    `inspect.signature(SchedulerClusterCombo)` too): each goes to the processes that use it, and each is checked
    here, before any process starts. `per_worker_queue_size` thus sets what each worker announces and caps it at
    the scheduler: one number, the most tasks a worker holds at once.

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
        n_workers: int = config.N_WORKERS.default,
        *,
        curve_keys_dir: Optional[str] = None,
        **settings: Any,
    ) -> None:
        settings = config.SETTINGS.rename_old_keywords(settings, "SchedulerClusterCombo")
        settings.setdefault("logging_level", config.DEFAULT_COMBO_LOGGING_LEVEL)
        scheduler_names, worker_names = set(config.SETTINGS.names(SCHEDULER)), set(config.SETTINGS.names(WORKER))
        unknown = set(settings) - ((scheduler_names | worker_names) - _CURVE_FILES)
        if unknown:
            raise TypeError(f"SchedulerClusterCombo() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        if settings.get("event_loop") == "uvloop":
            _require_uvloop()
        self._address = _free_local_address() if address is None else validate_address(address)
        scheduler_secret = scheduler_public = worker_secret = authorized = None
        if curve_keys_dir is not None:
            scheduler_secret, scheduler_public, worker_secret, authorized = prepare_local_keys(curve_keys_dir)
        self.curve_server_key_file = scheduler_public
        # Both constructors validate every value now, in the caller, before any process starts.
        self._scheduler_settings = SchedulerSettings(
            self._address,
            **{name: value for name, value in settings.items() if name in scheduler_names},
            curve_secret_key_file=scheduler_secret,
            curve_authorized_keys_dir=authorized,
        )
        self._cluster = Cluster(
            self._address,
            n_workers,
            **{name: value for name, value in settings.items() if name in worker_names},
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
        self._exit_hook: Optional[Callable[[], None]] = _shutdown_at_exit(weakref.ref(self))
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
        sys.executable, "-m", "scaler.scheduler",
        *config.SETTINGS.to_argv(settings.as_keywords(), SCHEDULER),
        "--exit-with-parent",
        "--ready-fd", str(write_end),
        "--", settings.address,
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


SchedulerClusterCombo.__signature__ = config.SETTINGS.signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter("address", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
        inspect.Parameter("n_workers", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=config.N_WORKERS.default),
        inspect.Parameter("curve_keys_dir", inspect.Parameter.KEYWORD_ONLY, default=None),
    ],
    [SCHEDULER, WORKER],
    exclude=_CURVE_FILES,
)
_signature = SchedulerClusterCombo.__signature__  # type: ignore[attr-defined]
SchedulerClusterCombo.__signature__ = _signature.replace(  # type: ignore[attr-defined]
    parameters=[  # the combo logs less than the CLIs by default (see the class's docstring)
        p.replace(default=config.DEFAULT_COMBO_LOGGING_LEVEL) if p.name == "logging_level" else p
        for p in _signature.parameters.values()
    ]
)
