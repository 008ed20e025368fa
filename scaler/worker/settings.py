"""Worker settings, every default taken from scaler.config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

from scaler import config
from scaler.io.curve import CurvePeerKeys, load_peer_keys


@dataclass(frozen=True)
class WorkerSettings:
    address: str
    heartbeat_interval_seconds: float = config.DEFAULT_HEARTBEAT_INTERVAL_SECONDS
    death_timeout_seconds: float = config.DEFAULT_DEATH_TIMEOUT_SECONDS
    queue_size: int = config.DEFAULT_WORKER_QUEUE_SIZE
    object_retention_seconds: float = config.DEFAULT_OBJECT_RETENTION_SECONDS
    garbage_collect_interval_seconds: float = config.DEFAULT_GARBAGE_COLLECT_INTERVAL_SECONDS
    logging_level: str = config.DEFAULT_LOGGING_LEVEL
    logging_paths: Tuple[str, ...] = config.DEFAULT_LOGGING_PATHS
    curve_secret_key_file: Optional[str] = None  # this worker's NAME.key_secret, to speak CurveZMQ
    curve_server_key_file: Optional[str] = None  # the scheduler's NAME.key
    curve_keys: Optional[CurvePeerKeys] = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # loaded now, so a missing or wrong key file is an error at start, in the caller
        object.__setattr__(self, "curve_keys", load_peer_keys(self.curve_secret_key_file, self.curve_server_key_file))
        for name in (
            "heartbeat_interval_seconds",
            "death_timeout_seconds",
            "object_retention_seconds",
            "garbage_collect_interval_seconds",
        ):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if not (isinstance(self.queue_size, int) and self.queue_size >= 1):
            raise ValueError(f"queue_size must be an int >= 1, got {self.queue_size!r}")
        if self.logging_level not in config.LOGGING_LEVELS:
            raise ValueError(f"logging_level must be one of {config.LOGGING_LEVELS}, got {self.logging_level!r}")
        object.__setattr__(self, "logging_paths", tuple(self.logging_paths))
