"""Internal: the attributes of SchedulerSettings and WorkerSettings, for mypy and IDEs.

Generated from the declarations in scaler/config.py by `python scripts/settings_fields.py`; do not edit.
tests/test_settings.py fails when this file differs from what that script writes.
"""

from __future__ import annotations

from typing import Optional, Tuple


class SchedulerFields:
    __slots__ = ()  # annotations only

    monitor_address: Optional[str]
    protected: bool
    event_loop: str
    heartbeat_interval_seconds: float
    worker_timeout_seconds: float
    client_timeout_seconds: float
    heartbeats_per_second: int
    max_tasks_waiting: int
    per_worker_queue_size: Optional[int]
    task_retry_limit: int
    balance_interval_seconds: float
    status_interval_seconds: float
    jit_warmup_seconds: float
    max_frame_bytes: int
    relay: bool
    max_malformed_per_peer: int
    max_objects_per_client: int
    logging_paths: Tuple[str, ...]
    logging_level: str
    tcp_keepalive: bool
    tcp_keepalive_idle_seconds: int
    tcp_keepalive_interval_seconds: int
    tcp_keepalive_count: int
    curve_secret_key_file: Optional[str]
    curve_authorized_keys_dir: Optional[str]


class WorkerFields:
    __slots__ = ()  # annotations only

    heartbeat_interval_seconds: float
    per_worker_queue_size: int
    death_timeout_seconds: float
    object_retention_seconds: float
    garbage_collect_interval_seconds: float
    task_output_limit_bytes: int
    retire_timeout_seconds: float
    agent_stall_timeout_seconds: float
    resources: Optional[str]
    actor_slots: int
    native_threads: int
    preload: Optional[str]
    memory_limit: Optional[str]
    memory_enforcement: str
    memory_spill_fraction: float
    memory_pause_fraction: float
    memory_stop_fraction: float
    logging_paths: Tuple[str, ...]
    logging_level: str
    tcp_keepalive: bool
    tcp_keepalive_idle_seconds: int
    tcp_keepalive_interval_seconds: int
    tcp_keepalive_count: int
    curve_secret_key_file: Optional[str]
    curve_server_key_file: Optional[str]
