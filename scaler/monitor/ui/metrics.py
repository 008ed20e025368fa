"""Internal: prometheus metrics of a scheduler's status, served by `scaler_ui --metrics` at /metrics.

Needs the `metrics` extra (prometheus-client): `pip install "scaler[metrics]"`. Every number comes from the newest
SchedulerStatus that scaler_ui already reads from the monitor address; nothing here talks to the scheduler.

The collector builds its metric families at each scrape, as exporters of another program's state do: the scheduler's
own totals (tasks completed, messages) are exposed as counters as they are, so Prometheus computes rates and sees a
scheduler restart as a counter reset; a worker that leaves is simply absent from the next scrape. While no status is
fresh (none newer than scaler_ui's --timeout), only `scaler_up 0` and the ages are exposed, so no stale value is
scraped as if it were current.

Label cardinality is bounded: `state`, `status` and `type` take values fixed by the protocol; `worker` takes at most
`max_workers` values per scrape (the first workers by name; the aggregates always count every worker). Function names
are user data of unbounded variety and are not exported.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from scaler.monitor.model import memory_paused, publishes_demand
from scaler.protocol import MESSAGE_TYPES, SchedulerStatus, TaskStatus

# the task_states counters named after a TaskStatus count finished tasks; the others count tasks held now
_FINISHED_STATUSES = frozenset(status.name for status in TaskStatus)
# The scheduler leaves out message types it never counted; they are exposed as 0, so that a series exists before its
# first increment and rate() over a scrape window sees that increment instead of starting from it.
_MESSAGE_TYPE_NAMES = tuple(message_type.__name__ for message_type in MESSAGE_TYPES)


class MetricSpec(NamedTuple):
    name: str  # as queries name it: a counter's ends with _total, as its samples do
    kind: str  # "gauge" or "counter"
    labels: Tuple[str, ...]
    help: str


def _gauge(name: str, help: str, *labels: str) -> MetricSpec:
    return MetricSpec(name, "gauge", labels, help)


def _counter(name: str, help: str, *labels: str) -> MetricSpec:
    return MetricSpec(name, "counter", labels, help)


# Every metric the exporter can expose, declared once: docs/metrics.md and the Grafana dashboard's test read this.
METRICS: Tuple[MetricSpec, ...] = (
    _gauge("scaler_up", "1 while scaler_ui has a status newer than its --timeout, else 0"),
    _gauge("scaler_status_age_seconds", "seconds since scaler_ui received the last status (or connected, before one)"),
    _counter("scaler_ui_malformed_frames_total", "frames on the monitor address that scaler_ui could not decode"),
    _gauge("scaler_scheduler_cpu_ratio", "scheduler process CPU use over the last status interval (1 = one core)"),
    _gauge("scaler_scheduler_resident_memory_bytes", "scheduler process resident memory"),
    _gauge("scaler_clients_connected", "clients connected to the scheduler"),
    _gauge(
        "scaler_tasks", "tasks the scheduler holds, by state (waiting on dependencies, ready, assigned...)", "state"
    ),
    _counter("scaler_tasks_completed_total", "tasks finished since the scheduler started, by final status", "status"),
    _gauge("scaler_tasks_completed_per_second", "tasks finished per second over the last status interval"),
    _counter("scaler_messages_sent_total", "messages the scheduler sent, by message type", "type"),
    _counter("scaler_messages_received_total", "messages the scheduler received, by message type", "type"),
    _counter("scaler_malformed_frames_total", "frames the scheduler dropped because they did not decode"),
    _gauge("scaler_workers", "workers connected to the scheduler"),
    _counter("scaler_workers_lost_total", "workers the scheduler removed because they went silent (no heartbeat)"),
    _counter("scaler_workers_replaced_total", "workers a cluster started in place of lost ones (a wedged agent)"),
    _counter("scaler_relayed_fetches_total", "fetches of held data the relay passed on (holders out of reach)"),
    _counter("scaler_relayed_bytes_total", "bytes of held data the relay passed on"),
    _gauge("scaler_free_slots", "task slots free on all workers together"),
    _gauge("scaler_metrics_workers_omitted", "workers left out of the per-worker series by --metrics-max-workers"),
    _gauge("scaler_worker_free_slots", "task slots free on the worker", "worker"),
    _gauge("scaler_worker_tasks_assigned", "tasks the scheduler sent the worker that are not finished", "worker"),
    _gauge("scaler_worker_tasks_queued", "tasks waiting in the worker's own queue", "worker"),
    _counter("scaler_worker_tasks_processed_total", "tasks the worker finished", "worker"),
    _gauge("scaler_worker_cpu_ratio", "CPU use of the worker's task process (1 = one core)", "worker"),
    _gauge("scaler_worker_resident_memory_bytes", "resident memory of the worker's task process", "worker"),
    _gauge("scaler_worker_agent_cpu_ratio", "CPU use of the worker's agent process (1 = one core)", "worker"),
    _gauge("scaler_worker_agent_resident_memory_bytes", "resident memory of the worker's agent process", "worker"),
    _gauge("scaler_worker_lag_seconds", "round trip of a heartbeat between the scheduler and the worker", "worker"),
    _gauge("scaler_worker_memory_limit_bytes", "the worker's --memory-limit (0: none)", "worker"),
    _gauge("scaler_worker_spilled_bytes", "held results the worker moved to disk to stay under its limit", "worker"),
    _gauge("scaler_worker_memory_paused", "1 while the worker is paused (memory): above its pause threshold", "worker"),
    _gauge("scaler_workers_memory_paused", "workers paused (memory): above their pause threshold, taking no task"),
    _gauge("scaler_spilled_bytes", "held results all workers moved to disk to stay under their memory limits"),
    _gauge("scaler_demand_tasks_waiting", "tasks ready to run and held on no worker, waiting for a free slot"),
    _gauge("scaler_demand_tasks_running", "tasks running on workers, as their last heartbeats said"),
    _gauge(
        "scaler_demand_oldest_waiting_seconds",
        "how long the ready task first in line has waited for a worker (0 when none waits)",
    ),
)
SPECS: Dict[str, MetricSpec] = {spec.name: spec for spec in METRICS}

# The demand a scheduler keeps and publishes in SchedulerStatus (docs/protocol.md, Monitoring): each metric with its
# field and the factor to its unit. A scheduler from before those fields leaves them 0 (scaler.monitor.model
# .publishes_demand tells): then the demand series are absent and scaler_free_slots is the sum of the workers' rows.
_DEMAND_FIELDS: Tuple[Tuple[str, str, float], ...] = (
    ("scaler_demand_tasks_waiting", "tasks_ready", 1.0),
    ("scaler_demand_tasks_running", "tasks_running", 1.0),
    ("scaler_demand_oldest_waiting_seconds", "oldest_ready_wait_us", 1e-6),
)


class Snapshot(NamedTuple):
    """What the collector needs at a scrape, read from scaler_ui's subscriber and history."""

    status: Optional[SchedulerStatus]
    silence_seconds: float  # since the last status, or since connecting
    timeout_seconds: float
    tasks_per_second: Optional[float]
    ui_malformed: int


class _Families:
    """The metric families of one scrape, created from METRICS as they are first used."""

    def __init__(self) -> None:
        self._families: Dict[str, Union[CounterMetricFamily, GaugeMetricFamily]] = {}

    def add(self, name: str, value: float, labels: Sequence[str] = ()) -> None:
        family = self._families.get(name)
        if family is None:
            spec = SPECS[name]
            kind = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
            family = self._families[name] = kind(name, spec.help, labels=spec.labels)
        family.add_metric(list(labels), value)

    def all(self) -> List[Metric]:
        return [*self._families.values()]


def status_metrics(snapshot: Snapshot, max_workers: int) -> List[Metric]:
    """The metric families for one scrape of `snapshot`, with per-worker series for at most `max_workers`."""
    out = _Families()
    status = snapshot.status
    live = status is not None and snapshot.silence_seconds <= snapshot.timeout_seconds
    out.add("scaler_up", 1 if live else 0)
    out.add("scaler_status_age_seconds", snapshot.silence_seconds)
    out.add("scaler_ui_malformed_frames_total", snapshot.ui_malformed)
    if not live or status is None:
        return out.all()

    out.add("scaler_scheduler_cpu_ratio", status.cpu / 100)
    out.add("scaler_scheduler_resident_memory_bytes", status.rss)
    out.add("scaler_clients_connected", status.clients)
    for counter in status.task_states:
        if counter.name in _FINISHED_STATUSES:
            out.add("scaler_tasks_completed_total", counter.value, (counter.name,))
        else:
            out.add("scaler_tasks", counter.value, (counter.name,))
    if snapshot.tasks_per_second is not None:
        out.add("scaler_tasks_completed_per_second", snapshot.tasks_per_second)
    for name, counters in (
        ("scaler_messages_sent_total", status.sent),
        ("scaler_messages_received_total", status.received),
    ):
        counts = {counter.name: counter.value for counter in counters}
        for message_type in _MESSAGE_TYPE_NAMES:
            out.add(name, counts.pop(message_type, 0), (message_type,))
        for message_type, count in counts.items():  # a type newer than this scaler_ui knows
            out.add(name, count, (message_type,))
    out.add("scaler_malformed_frames_total", status.malformed)

    workers = status.workers
    demand = publishes_demand(status)
    out.add("scaler_workers", len(workers))
    out.add("scaler_workers_lost_total", status.workers_lost)
    out.add("scaler_workers_replaced_total", status.workers_replaced)
    out.add("scaler_relayed_fetches_total", status.relayed_fetches)
    out.add("scaler_relayed_bytes_total", status.relayed_bytes)
    out.add("scaler_workers_memory_paused", sum(1 for worker in workers if memory_paused(worker)))
    out.add("scaler_spilled_bytes", sum(worker.spilled_bytes for worker in workers))
    out.add("scaler_free_slots", status.free_slots if demand else sum(worker.free for worker in workers))
    shown = sorted(workers, key=lambda worker: worker.name)[:max_workers] if max_workers > 0 else []
    out.add("scaler_metrics_workers_omitted", len(workers) - len(shown))
    for worker in shown:
        label = (worker.name,)
        out.add("scaler_worker_free_slots", worker.free, label)
        out.add("scaler_worker_tasks_assigned", worker.sent, label)
        out.add("scaler_worker_tasks_queued", worker.queued, label)
        out.add("scaler_worker_tasks_processed_total", worker.processed, label)
        out.add("scaler_worker_cpu_ratio", worker.cpu / 100, label)
        out.add("scaler_worker_resident_memory_bytes", worker.rss, label)
        out.add("scaler_worker_agent_cpu_ratio", worker.agent_cpu / 100, label)
        out.add("scaler_worker_agent_resident_memory_bytes", worker.agent_rss, label)
        out.add("scaler_worker_lag_seconds", worker.lag_us / 1_000_000, label)
        out.add("scaler_worker_memory_limit_bytes", worker.memory_limit, label)
        out.add("scaler_worker_spilled_bytes", worker.spilled_bytes, label)
        out.add("scaler_worker_memory_paused", 1 if memory_paused(worker) else 0, label)

    if demand:
        for name, field, factor in _DEMAND_FIELDS:
            out.add(name, getattr(status, field) * factor)
    return out.all()


class StatusCollector(Collector):
    """A prometheus-client collector that turns the snapshot of the moment into metric families at each scrape."""

    def __init__(self, snapshot: Callable[[], Snapshot], max_workers: int) -> None:
        self._snapshot = snapshot
        self._max_workers = check_max_workers(max_workers)

    def collect(self) -> Iterator[Metric]:
        return iter(status_metrics(self._snapshot(), self._max_workers))


def check_max_workers(max_workers: object) -> int:
    if isinstance(max_workers, bool) or not isinstance(max_workers, int):
        raise TypeError(f"max_workers must be an int, got {type(max_workers).__name__}")
    if max_workers < 0:
        raise ValueError(f"max_workers must be 0 (no per-worker series) or more, got {max_workers}")
    return max_workers


class MetricsExporter:
    """The /metrics page: a registry of its own (not prometheus-client's global one) holding the status collector."""

    def __init__(self, snapshot: Callable[[], Snapshot], max_workers: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StatusCollector(snapshot, max_workers))

    def render(self, accept_header: Optional[str] = None) -> Tuple[bytes, str]:
        """The page and its content type: Prometheus' text format, or OpenMetrics if the scraper prefers it."""
        encoder, content_type = choose_encoder(accept_header or "")
        return encoder(self.registry), content_type
