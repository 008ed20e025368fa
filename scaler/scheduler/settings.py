"""Scheduler settings, every default taken from scaler.config."""

from __future__ import annotations

from typing import Optional, Tuple

from scaler import config
from scaler.io.curve import load_server_keys


class SchedulerSettings:
    __slots__ = (
        "address",
        "monitor_address",
        "protected",
        "event_loop",
        "heartbeat_interval_seconds",
        "worker_timeout_seconds",
        "client_timeout_seconds",
        "max_tasks_waiting",
        "per_worker_queue_size",
        "balance_interval_seconds",
        "task_retry_limit",
        "status_interval_seconds",
        "max_malformed_per_peer",
        "max_frame_bytes",
        "max_objects_per_client",
        "logging_paths",
        "logging_level",
        "curve_secret_key_file",
        "curve_authorized_keys_dir",
        "curve_keys",
    )

    def __init__(
        self,
        address: str,
        monitor_address: Optional[str] = None,
        protected: bool = config.DEFAULT_PROTECTED,
        event_loop: str = config.DEFAULT_EVENT_LOOP,
        heartbeat_interval_seconds: float = config.DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
        worker_timeout_seconds: float = config.DEFAULT_WORKER_TIMEOUT_SECONDS,
        client_timeout_seconds: float = config.DEFAULT_CLIENT_TIMEOUT_SECONDS,
        max_tasks_waiting: int = config.DEFAULT_MAX_TASKS_WAITING,
        per_worker_queue_size: Optional[int] = config.DEFAULT_PER_WORKER_QUEUE_SIZE,
        balance_interval_seconds: float = config.DEFAULT_BALANCE_INTERVAL_SECONDS,
        task_retry_limit: int = config.DEFAULT_TASK_RETRY_LIMIT,
        status_interval_seconds: float = config.DEFAULT_STATUS_INTERVAL_SECONDS,
        max_malformed_per_peer: int = config.DEFAULT_MAX_MALFORMED_PER_PEER,
        max_frame_bytes: int = config.DEFAULT_MAX_FRAME_BYTES,
        max_objects_per_client: int = config.DEFAULT_MAX_OBJECTS_PER_CLIENT,
        logging_paths: Tuple[str, ...] = config.DEFAULT_LOGGING_PATHS,
        logging_level: str = config.DEFAULT_LOGGING_LEVEL,
        curve_secret_key_file: Optional[str] = None,
        curve_authorized_keys_dir: Optional[str] = None,
    ) -> None:
        if event_loop not in config.EVENT_LOOPS:
            raise ValueError(f"event_loop must be one of {config.EVENT_LOOPS}, got {event_loop!r}")
        for name, value in (
            ("heartbeat_interval_seconds", heartbeat_interval_seconds),
            ("worker_timeout_seconds", worker_timeout_seconds),
            ("client_timeout_seconds", client_timeout_seconds),
            ("balance_interval_seconds", balance_interval_seconds),
            ("status_interval_seconds", status_interval_seconds),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
        for name, value in (
            ("max_tasks_waiting", max_tasks_waiting),
            ("max_malformed_per_peer", max_malformed_per_peer),
            ("max_frame_bytes", max_frame_bytes),
            ("max_objects_per_client", max_objects_per_client),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if per_worker_queue_size is not None and per_worker_queue_size < 1:
            raise ValueError(f"per_worker_queue_size must be >= 1 or None, got {per_worker_queue_size!r}")
        if task_retry_limit < 1:
            raise ValueError(f"task_retry_limit must be >= 1, got {task_retry_limit!r}")
        self.address = address
        self.monitor_address = monitor_address or config.default_monitor_address(address)
        self.protected = protected
        self.event_loop = event_loop
        self.heartbeat_interval_seconds = heartbeat_interval_seconds
        self.worker_timeout_seconds = worker_timeout_seconds
        self.client_timeout_seconds = client_timeout_seconds
        self.max_tasks_waiting = max_tasks_waiting
        self.per_worker_queue_size = per_worker_queue_size
        self.balance_interval_seconds = balance_interval_seconds
        self.task_retry_limit = task_retry_limit
        self.status_interval_seconds = status_interval_seconds
        self.max_malformed_per_peer = max_malformed_per_peer
        self.max_frame_bytes = max_frame_bytes
        self.max_objects_per_client = max_objects_per_client
        self.logging_paths = tuple(logging_paths)
        self.logging_level = logging_level
        self.curve_secret_key_file = curve_secret_key_file
        self.curve_authorized_keys_dir = curve_authorized_keys_dir
        # loaded now, so a missing or wrong key file is an error at start, not at the first connection
        self.curve_keys = load_server_keys(curve_secret_key_file, curve_authorized_keys_dir)
