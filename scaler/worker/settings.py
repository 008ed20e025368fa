"""Internal: worker settings: one read-only slot per setting declared for workers in scaler.config."""

from __future__ import annotations

from typing import Any, Optional

from scaler.config import SETTINGS
from scaler.io.curve_keys import CurvePeerKeys, load_peer_keys
from scaler.settings_fields import WorkerFields
from scaler.settings_spec import WORKER, DeclaredSettings


class WorkerSettings(DeclaredSettings, WorkerFields):
    """WorkerSettings(address, **settings): every keyword is a worker setting of scaler.config, checked here.

    `curve_keys` holds the CurveZMQ keys, loaded now so that a missing or wrong key file is an error at start, in the
    caller (read by scaler/io/curve_keys.py, without zmq: the core holds these settings, and cores import no zmq)."""

    COMPONENT = WORKER
    REGISTRY = SETTINGS
    __slots__ = ("address", *SETTINGS.names(WORKER), "curve_keys")
    curve_keys: Optional[CurvePeerKeys]

    def __init__(self, address: str, **settings: Any) -> None:
        super().__init__(address, **settings)
        curve_keys = load_peer_keys(self.curve_secret_key_file, self.curve_server_key_file)
        object.__setattr__(self, "curve_keys", curve_keys)

    @property
    def queue_size(self) -> int:
        """The worker's own name for per_worker_queue_size: the capacity it announces to the scheduler."""
        return self.per_worker_queue_size
