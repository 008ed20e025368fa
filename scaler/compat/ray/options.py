"""Internal: Ray's task and actor options (`@ray.remote(...)`, `.options(...)`) as Scaler task policies.

Scaler's workers each run one task at a time in a process of their own, so a CPU is what every worker offers: one CPU
(Ray's default) or none asks for nothing, while more than one becomes a resource `cpu` that only workers started with
`--resources cpu=N` offer. GPUs and custom resources are resources by the same names ("gpu" for num_gpus).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

from scaler.client.options import UINT32_MAX

# Accepted for Ray's sake, with no effect here (documented in the docs' options table).
IGNORED = frozenset(
    {
        "name",
        "namespace",
        "scheduling_strategy",
        "lifetime",
        "max_calls",
        "max_concurrency",
        "max_restarts",
        "max_task_retries",
        "concurrency_groups",
        "get_if_exists",
        "label_selector",
        "enable_task_events",
        "_metadata",
    }
)
# Ray features Scaler has no counterpart for: refused rather than silently ignored.
UNSUPPORTED = {
    "runtime_env": "runtime environments are not supported: install what tasks need on the workers",
    "placement_group": "placement groups are not supported",
    "placement_group_bundle_index": "placement groups are not supported",
    "placement_group_capture_child_tasks": "placement groups are not supported",
    "accelerator_type": "accelerator types are not supported: use resources={'name': amount}",
    "object_store_memory": "object_store_memory is not supported",
    "_generator_backpressure_num_objects": "generators are not supported",
}
MAPPED = frozenset({"num_cpus", "num_gpus", "resources", "memory", "max_retries", "retry_exceptions", "num_returns"})


def check_options(options: Mapping[str, Any]) -> Dict[str, Any]:
    """The Ray options given, checked: TypeError for a name Ray does not have, NotImplementedError for one Scaler
    cannot honour."""
    for name, value in options.items():
        if name in UNSUPPORTED and value is not None:
            raise NotImplementedError(f"{name}: {UNSUPPORTED[name]} (scaler.compat.ray)")
        if name not in MAPPED and name not in IGNORED and name not in UNSUPPORTED:
            raise TypeError(f"unknown option {name!r} for a remote function or actor")
    num_returns = options.get("num_returns", 1)
    if num_returns != 1:
        raise NotImplementedError(f"num_returns={num_returns!r}: only one return value per task is supported")
    retry_exceptions = options.get("retry_exceptions", False)
    if not isinstance(retry_exceptions, bool):
        raise NotImplementedError("retry_exceptions: only True or False is supported, not a list of exception types")
    return dict(options)


def scaler_policies(options: Mapping[str, Any]) -> Dict[str, Any]:
    """client.options(...) keywords for these Ray options; {} when they ask for nothing (the client's defaults)."""
    resources: Dict[str, float] = {}
    num_cpus = options.get("num_cpus")
    if num_cpus is not None and num_cpus > 1:
        resources["cpu"] = num_cpus
    num_gpus = options.get("num_gpus")
    if num_gpus:
        resources["gpu"] = num_gpus
    memory = options.get("memory")
    if memory:
        resources["memory"] = memory
    resources.update(options.get("resources") or {})
    policies: Dict[str, Any] = {}
    if resources:
        policies["resources"] = resources
    # Ray's max_retries counts worker deaths, which Scaler retries on its own (--task-retry-limit); exceptions are
    # retried only with retry_exceptions=True, which is what Scaler's retries do.
    if options.get("retry_exceptions"):
        max_retries = options.get("max_retries", 3)
        policies["retries"] = UINT32_MAX if max_retries == -1 else max_retries
    return policies
