"""Internal: what a monitor shows of a SchedulerStatus, formatted once for both scaler_top and scaler_ui.

Pure functions and small classes over the protocol's SchedulerStatus: no sockets, no terminal, no web server.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, TypeVar

from scaler.protocol import Counter, SchedulerStatus, WorkerStatus, heartbeat_flags

_Key = TypeVar("_Key")
_FLAG_BITS = heartbeat_flags.ALL  # processor Initialized, has a Task, task Lock: the ITL column


def format_count(value: int) -> str:
    return f"{value:,}"


def format_percent(value: float) -> str:
    return f"{value:.1f}%"


def format_bytes(value: int) -> str:
    """Memory as top prints it, one decimal and a unit letter: 512b, 31.5k, 130.1m, 2.0g."""
    amount = float(value)
    for unit in ("b", "k", "m", "g"):
        if amount < 1024 or unit == "g":
            return f"{int(amount)}{unit}" if unit == "b" else f"{amount:.1f}{unit}"
        amount /= 1024
    raise AssertionError("unreachable")


def format_lag(microseconds: int) -> str:
    """Round-trip lag between scheduler and worker: 0.7ms, 12ms, 1.5s."""
    milliseconds = microseconds / 1000
    if milliseconds < 10:
        text = f"{milliseconds:.1f}"
        return (text[:-2] if text.endswith(".0") else text) + "ms"
    if milliseconds < 1000:
        return f"{milliseconds:.0f}ms"
    return f"{milliseconds / 1000:.1f}s"


REGISTERED_AGAIN_MARK = "~"  # before the name of a worker that registered again after a lost scheduler
RETIRING_MARK = "<"  # before the name of a worker that is retiring: it gets no new task and leaves once done
MEMORY_PAUSED_MARK = "!"  # before the name of a worker paused (memory): it gets no new task until its memory falls


def memory_paused(worker: WorkerStatus) -> bool:
    """The worker is above its memory pause threshold (docs/guide/memory.md): "paused (memory)"."""
    return bool(worker.flags & heartbeat_flags.MEMORY_PAUSED)


def worker_state(worker: WorkerStatus) -> str:
    """What keeps a worker from taking tasks, in words ("retiring", "paused (memory)"), or ""."""
    return ", ".join(
        state for state, is_so in (("retiring", worker.retiring), ("paused (memory)", memory_paused(worker))) if is_so
    )


def worker_label(worker: WorkerStatus) -> str:
    """The worker's name, marked if it is retiring, paused (memory), or if it survived a lost scheduler (a restart)
    and registered again; followed by the resources it offers, if any (`w1{gpu=1,mem=6.4e+10}`)."""
    name = REGISTERED_AGAIN_MARK + worker.name if worker.previous_registrations else worker.name
    if worker.resources:
        name += "{" + format_resources(worker) + "}"
    if memory_paused(worker):
        name = MEMORY_PAUSED_MARK + name
    return RETIRING_MARK + name if worker.retiring else name


def format_resources(worker: WorkerStatus) -> str:
    """What a worker offers (scaler_cluster --resources), as `gpu=1,mem=6.4e+10`; empty for nothing."""
    return ",".join(f"{resource.name}={resource.amount:g}" for resource in worker.resources)


def resource_classes(workers: Sequence[WorkerStatus]) -> List[Tuple[str, int]]:
    """Each distinct offer among the workers that offer something, with how many workers offer it."""
    counts: Dict[str, int] = {}
    for worker in workers:
        if worker.resources:
            offer = format_resources(worker)
            counts[offer] = counts.get(offer, 0) + 1
    return sorted(counts.items())


def format_flags(flags: int) -> str:
    """The ITL column: 1 where the bit is set, e.g. 110 for an initialized processor with a queued task."""
    return "".join("1" if flags & bit else "0" for bit in _FLAG_BITS)


def format_rate(per_second: Optional[float]) -> str:
    return "-" if per_second is None else format_count(round(per_second))


def no_status_message(address: str, silence_seconds: float, timeout_seconds: float, had_status: bool) -> str:
    what = "no new status" if had_status else "no status"
    return (
        f"{what} from {address} for {silence_seconds:.0f}s (timeout {timeout_seconds:g}s): "
        "is the scheduler running, and is this its monitor address?"
    )


class Section(NamedTuple):
    title: str
    rows: List[Tuple[str, str]]  # (label, formatted value)


def _counter_rows(counters: Sequence[Counter]) -> List[Tuple[str, str]]:
    return [(counter.name, format_count(counter.value)) for counter in counters]


def status_sections(status: SchedulerStatus, tasks_per_second: Optional[float]) -> List[Section]:
    """The blocks above the worker table, in the order scaler_top lays them out."""
    scheduler = [
        ("cpu", format_percent(status.cpu)),
        ("rss", format_bytes(status.rss)),
        ("clients", format_count(status.clients)),
        ("tasks/s", format_rate(tasks_per_second)),
    ]
    if status.malformed:
        scheduler.append(("malformed", format_count(status.malformed)))
    if status.registered_again:  # peers that survived a lost scheduler (a restart) and registered with this one
        scheduler.append(("re-registered", format_count(status.registered_again)))
    if status.tasks_needing_resources:  # ready tasks no connected worker offers the resources for
        scheduler.append(("need resources", format_count(status.tasks_needing_resources)))
    if status.retried_tasks:  # attempts started again after the function raised or timed out
        scheduler.append(("retried", format_count(status.retried_tasks)))
    if status.workers_lost:  # workers that went silent: dead, or wedged until their cluster replaced them
        scheduler.append(("workers lost", format_count(status.workers_lost)))
    if status.workers_replaced:
        scheduler.append(("replaced", format_count(status.workers_replaced)))
    if status.relayed_fetches:  # data fetched through the relay: peers that cannot reach its holder directly
        scheduler.append(("relayed", f"{format_count(status.relayed_fetches)} / {format_bytes(status.relayed_bytes)}"))
    return [
        Section("scheduler", scheduler),
        Section("task_manager", _counter_rows(status.task_states)),
        Section("scheduler_sent", _counter_rows(status.sent)),
        Section("scheduler_received", _counter_rows(status.received)),
        Section("function_tasks", _counter_rows(status.function_tasks)),
    ]


class WorkerColumn(NamedTuple):
    key: str  # the single-key sort shortcut; also the column's id in scaler_ui
    header: str
    width: int  # of the widest value scaler_top expects; the worker name column takes what is left
    value: Callable[[WorkerStatus], Any]  # what the column sorts by
    text: Callable[[WorkerStatus], str]


WORKER_COLUMNS: Tuple[WorkerColumn, ...] = (
    WorkerColumn("n", "worker", 0, lambda w: w.name, worker_label),
    WorkerColumn("C", "agt_cpu", 7, lambda w: w.agent_cpu, lambda w: format_percent(w.agent_cpu)),
    WorkerColumn("M", "agt_rss", 7, lambda w: w.agent_rss, lambda w: format_bytes(w.agent_rss)),
    WorkerColumn("c", "cpu", 6, lambda w: w.cpu, lambda w: format_percent(w.cpu)),
    WorkerColumn("m", "rss", 7, lambda w: w.rss, lambda w: format_bytes(w.rss)),
    WorkerColumn("f", "free", 5, lambda w: w.free, lambda w: format_count(w.free)),
    WorkerColumn("w", "sent", 5, lambda w: w.sent, lambda w: format_count(w.sent)),
    WorkerColumn("d", "queued", 6, lambda w: w.queued, lambda w: format_count(w.queued)),
    WorkerColumn("l", "lag", 5, lambda w: w.lag_us, lambda w: format_lag(w.lag_us)),
    WorkerColumn("s", "spilled", 7, lambda w: w.spilled_bytes, lambda w: format_bytes(w.spilled_bytes)),
    WorkerColumn("a", "actors", 6, lambda w: w.actors, lambda w: format_count(w.actors)),
)
# Columns scaler_top leaves out while every worker's value is 0 and it does not sort by them: most clusters never
# spill, and many host no actor
OPTIONAL_COLUMNS = frozenset("sa")
ITL_HEADER = "ITL"
SORT_KEYS: Dict[str, WorkerColumn] = {column.key: column for column in WORKER_COLUMNS}
DEFAULT_SORT_KEY = "c"


def check_sort_key(sort_key: str) -> str:
    if not isinstance(sort_key, str):
        raise TypeError(f"sort key must be a str, got {type(sort_key).__name__}")
    if sort_key not in SORT_KEYS:
        raise ValueError(f"sort key must be one of {''.join(SORT_KEYS)}, got {sort_key!r}")
    return sort_key


def shortcuts_text() -> str:
    return "Shortcuts: " + " ".join(f"{column.header}[{column.key}]" for column in WORKER_COLUMNS) + " quit[q]"


def sorted_workers(workers: Sequence[WorkerStatus], sort_key: str) -> List[WorkerStatus]:
    """Names ascending; every number descending, as top does, so the busiest worker comes first. Ties by name."""
    column = SORT_KEYS[check_sort_key(sort_key)]
    by_name = sorted(workers, key=lambda worker: worker.name)
    if column.key == "n":
        return by_name
    return sorted(by_name, key=column.value, reverse=True)  # stable: equal values stay in name order


class RateMeter:
    """Tasks finished per second, overall and per worker, and calls answered per second by each actor, from two
    consecutive statuses and the scheduler's clock.

    Counters that go down mean the scheduler (or a worker of the same name) restarted: that interval has no rate.
    """

    def __init__(self) -> None:
        self._previous: Optional[SchedulerStatus] = None
        self.tasks_per_second: Optional[float] = None
        self.worker_tasks_per_second: Dict[str, float] = {}
        self.actor_calls_per_second: Dict[bytes, float] = {}  # by actor id

    def update(self, status: SchedulerStatus) -> None:
        previous, self._previous = self._previous, status
        if previous is None or status.time_us <= previous.time_us:
            return
        seconds = (status.time_us - previous.time_us) / 1_000_000
        finished = status.completed_tasks - previous.completed_tasks
        self.tasks_per_second = finished / seconds if finished >= 0 else None
        self.worker_tasks_per_second = _per_second(
            {worker.name: worker.processed for worker in previous.workers},
            {worker.name: worker.processed for worker in status.workers},
            seconds,
        )
        self.actor_calls_per_second = _per_second(
            {actor.actor_id: actor.calls for actor in previous.actors},
            {actor.actor_id: actor.calls for actor in status.actors},
            seconds,
        )


def _per_second(before: Mapping[_Key, int], now: Mapping[_Key, int], seconds: float) -> Dict[_Key, float]:
    """How fast each counter of `now` rose since `before`; none for a counter new or gone down (restarted)."""
    return {
        key: (value - before[key]) / seconds for key, value in now.items() if key in before and value >= before[key]
    }


def publishes_demand(status: SchedulerStatus) -> bool:
    """Whether `status` carries the demand fields (tasksWaiting... oldestReadyWaitUs, protocol version 1).

    A scheduler from before them leaves them 0 on the wire. One that has them counts its workers' slots (every worker
    has at least one) and its held tasks, so all zeros with workers or held tasks connected means an older scheduler;
    with neither, both readings agree (no demand).
    """
    return status.worker_slots > 0 or status.tasks_waiting > 0 or status.tasks_assigned > 0
