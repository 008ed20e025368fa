"""The exporter of scaler_ui's /metrics seen as Prometheus sees it: parsed samples, for the metrics tests."""

from __future__ import annotations

from typing import Dict, FrozenSet, Optional, Tuple

from prometheus_client.parser import text_string_to_metric_families

from scaler.monitor.ui.metrics import SPECS, MetricsExporter, Snapshot
from scaler.protocol import SchedulerStatus
from tests.monitor.statuses import status, worker

Samples = Dict[Tuple[str, FrozenSet[Tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """{(sample name, labels): value} of a text exposition; also checks each family's declared type."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            spec = SPECS[sample.name]
            assert family.type == spec.kind, sample.name
            assert set(sample.labels) == set(spec.labels), sample.name
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def exported(
    message: Optional[object],
    silence: float = 0.4,
    timeout: float = 5.0,
    tasks_per_second: Optional[float] = 25.0,
    ui_malformed: int = 0,
    max_workers: int = 100,
) -> Samples:
    """What the exporter shows at a scrape of this status, parsed."""
    snapshot = Snapshot(message, silence, timeout, tasks_per_second, ui_malformed)  # type: ignore[arg-type]
    return parse(MetricsExporter(lambda: snapshot, max_workers).render()[0].decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def names(samples: Samples) -> set:
    return {name for name, _ in samples}


def worker_labels(samples: Samples, name: str = "scaler_worker_free_slots") -> set:
    return {dict(labels)["worker"] for sample_name, labels in samples if sample_name == name}


def full_status() -> SchedulerStatus:
    """A status that makes the exporter show every metric it has: with a worker, and the demand fields."""
    return status([worker("W|a")], tasks_waiting=1, tasks_ready=1, tasks_running=1, worker_slots=1, free_slots=1)
