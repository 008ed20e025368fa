"""Internal: scheduler settings: one read-only slot per setting declared for the scheduler in scaler.config."""

from __future__ import annotations

from typing import Any, Optional

from scaler.config import SETTINGS, default_monitor_address
from scaler.io.curve_keys import CurveServerKeys, load_server_keys
from scaler.settings_fields import SchedulerFields
from scaler.settings_spec import SCHEDULER, DeclaredSettings


class SchedulerSettings(DeclaredSettings, SchedulerFields):
    """SchedulerSettings(address, **settings): every keyword is a scheduler setting of scaler.config, checked here.

    The monitor address defaults to one derived from `address`; `curve_keys` holds the CurveZMQ keys, loaded now so
    that a missing or wrong key file is an error at start, not at the first connection (read by scaler/io/curve_keys.py,
    without zmq: the core holds these settings, and cores import no zmq)."""

    COMPONENT = SCHEDULER
    REGISTRY = SETTINGS
    __slots__ = ("address", *SETTINGS.names(SCHEDULER), "curve_keys")
    monitor_address: str  # None is given, and __init__ puts the derived address in its place
    curve_keys: Optional[CurveServerKeys]

    def __init__(self, address: str, **settings: Any) -> None:
        super().__init__(address, **settings)
        if self.monitor_address is None:
            object.__setattr__(self, "monitor_address", default_monitor_address(address))
        curve_keys = load_server_keys(self.curve_secret_key_file, self.curve_authorized_keys_dir)
        object.__setattr__(self, "curve_keys", curve_keys)
