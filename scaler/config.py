"""Internal: every setting and every default of Scaler, each declared once.

A declaration below is the only description of a setting: scaler.settings_spec derives from it the options of
scaler_scheduler, scaler_cluster, scaler_top and scaler_ui (flags, help, default, checks), the keywords of `Cluster` and
`SchedulerClusterCombo`, the attributes of SchedulerSettings and WorkerSettings, the arguments handed to the processes
they start, and the option tables of README.md (tests/test_settings.py checks README against them). Adding a setting
is one `SETTINGS.declare(...)`; the component that uses it then reads it from its settings object.

The constants after the declarations are defaults that are not user settings. This module must import on PyPy 3.9
with nothing but the standard library, since the scheduler imports it.
"""

import re
from typing import Dict, Optional, Tuple

from scaler.settings_spec import CLUSTER, MONITOR, SCHEDULER, WORKER, Registry, at_least, fields_module, positive

EVENT_LOOPS = ("builtin", "uvloop")
LOGGING_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_COMBO_LOGGING_LEVEL = "WARNING"  # SchedulerClusterCombo runs inside user programs: warnings and errors only
# PyPy's young generation for the scheduler (PYPY_GC_NURSERY; PyPy's own default is about the L2 cache, 1 MB here): a
# map's tasks arrive by the ten thousand, and with 1 MB most of them are copied out of the nursery and later walked by
# major collections. 100,000-task map: scheduler 10.5 -> 6.6 us of CPU per task (docs/performance.md). Read by PyPy at
# start only, so the scheduler's CLI starts itself again with it, unless PYPY_GC_NURSERY is set already.
DEFAULT_PYPY_GC_NURSERY = "32MB"


def parse_resources(text: Optional[str]) -> Dict[str, float]:
    """`--resources gpu=1,mem=64e9` -> {"gpu": 1.0, "mem": 64e9}; ValueError saying what is wrong."""
    offer: Dict[str, float] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, equals, amount_text = item.partition("=")
        name = name.strip()
        if not equals or not name:
            raise ValueError(f"{item!r} is not NAME=AMOUNT")
        if name in offer:
            raise ValueError(f"{name!r} is given twice")
        try:
            amount = float(amount_text)
        except ValueError:
            raise ValueError(f"{name}: {amount_text.strip()!r} is not a number") from None
        if not (0.0 <= amount < float("inf")):
            raise ValueError(f"{name}: the amount must be a finite number >= 0, got {amount_text.strip()}")
        offer[name] = amount
    return offer


_SIZE_UNITS = {
    "": 1, "B": 1,
    "KB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4,
    "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3, "TIB": 1024**4,
}  # fmt: skip
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*")


def parse_size(text: str) -> int:
    """`--memory-limit 400MB` -> 400,000,000: bytes, or a number with a unit: KB, MB, GB, TB are powers of 10 and
    KiB, MiB, GiB, TiB powers of 2 (any case); ValueError saying what is wrong."""
    match = _SIZE.fullmatch(text)
    if match is None or match.group(2).upper() not in _SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size: a number of bytes, or one with KB, MB, GB, KiB, MiB or GiB")
    size = int(float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()])
    if size <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return size


def size_text(size: int) -> str:
    """A byte count as the memory limit's messages show it: 400,000,000 -> "400 MB", 2**30 -> "1 GiB"."""
    for unit, scale in (("GiB", 1024**3), ("GB", 1000**3), ("MiB", 1024**2), ("MB", 1000**2)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    if size >= 1000**2:
        return f"{size / 1000**2:.1f} MB"
    return f"{size} bytes"


def size_complaint(text: str) -> Optional[str]:
    try:
        parse_size(text)
    except ValueError as error:
        return str(error)
    return None


def fraction(value: float) -> Optional[str]:
    return None if 0 < value <= 1 else "must be a fraction of the limit, > 0 and <= 1"


# `--preload package.module:function`: dotted identifiers on both sides (a function may be a class's attribute)
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_PRELOAD = re.compile(rf"({_DOTTED}):({_DOTTED})")


def parse_preload(text: str) -> Tuple[str, str]:
    """`--preload pricing.setup:load_curves` -> ("pricing.setup", "load_curves"); ValueError saying what is wrong."""
    match = _PRELOAD.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not MODULE:FUNCTION, e.g. mypackage.setup:load_model")
    return match.group(1), match.group(2)


def preload_complaint(text: str) -> Optional[str]:
    return None if _PRELOAD.fullmatch(text.strip()) else "must be MODULE:FUNCTION, e.g. mypackage.setup:load_model"


def resources_complaint(text: str) -> Optional[str]:
    try:
        parse_resources(text)
    except ValueError as error:
        return f"must be NAME=AMOUNT,... ({error})"
    return None


SETTINGS = Registry()

# --- the scheduler ----------------------------------------------------------------------------------------------------
MONITOR_ADDRESS = SETTINGS.declare(
    "monitor_address", str, None, "address to publish status on, for scaler_top and scaler_ui",
    flags=("--monitor-address", "-ma"), metavar="ADDRESS", used_by=(SCHEDULER,),
    none_means="ipc:///tmp/{host}_{port}_monitor, beside the address",
)  # fmt: skip
PROTECTED = SETTINGS.declare(
    "protected", bool, True, "refuse client.shutdown(); --no-protected lets a client stop the cluster",
    flags=("--protected",), used_by=(SCHEDULER,),
)  # fmt: skip
EVENT_LOOP = SETTINGS.declare(
    "event_loop", str, "builtin", "asyncio's builtin loop, or uvloop (CPython only)",
    flags=("--event-loop", "-e"), choices=EVENT_LOOPS, used_by=(SCHEDULER,),
)  # fmt: skip
HEARTBEAT_INTERVAL = SETTINGS.declare(
    "heartbeat_interval_seconds", float, 1.0,
    "seconds between the heartbeats of clients and workers (a worker uses its own until the scheduler names one)",
    flags=("--heartbeat-interval", "-hi"), check=positive, used_by=(SCHEDULER, WORKER),
)  # fmt: skip
WORKER_TIMEOUT = SETTINGS.declare(
    "worker_timeout_seconds", float, 5.0, "a worker silent this long is dead; its tasks run elsewhere",
    flags=("--worker-timeout", "-wt"), check=positive, used_by=(SCHEDULER,),
)  # fmt: skip
CLIENT_TIMEOUT = SETTINGS.declare(
    "client_timeout_seconds", float, 30.0, "a client silent this long is gone; its tasks are canceled, objects freed",
    flags=("--client-timeout", "-ct"), check=positive, used_by=(SCHEDULER,),
)  # fmt: skip
HEARTBEATS_PER_SECOND = SETTINGS.declare(
    "heartbeats_per_second", int, 256,
    "heartbeats a second the scheduler takes from all peers together: beyond it the interval and the timeouts double"
    " until they fit (docs/protocol.md, Heartbeat cadence)",
    flags=("--heartbeats-per-second", "-hb"), check=at_least(1), used_by=(SCHEDULER,),
)  # fmt: skip
MAX_TASKS_WAITING = SETTINGS.declare(
    "max_tasks_waiting", int, 10_000_000, "tasks the scheduler holds at once; beyond it new tasks are refused",
    flags=("--max-tasks-waiting", "-mt"), check=at_least(1), used_by=(SCHEDULER,),
)  # fmt: skip
PER_WORKER_QUEUE_SIZE = SETTINGS.declare(
    "per_worker_queue_size", int, 1000,
    "most tasks one worker holds at once, queued plus running: each worker announces its own, and a scheduler given"
    " one caps every worker at it",
    flags=("--per-worker-queue-size", "-qs"), old_flags=("--queue-size",), old_keywords=("queue_size",),
    check=at_least(1), used_by=(SCHEDULER, WORKER),
    default_for={SCHEDULER: None}, none_means="what each worker announces",
)  # fmt: skip
TASK_RETRY_LIMIT = SETTINGS.declare(
    "task_retry_limit", int, 3, "a task whose workers died this many times fails instead of running again",
    flags=("--task-retry-limit", "-rl"), check=at_least(1), used_by=(SCHEDULER,),
)  # fmt: skip
BALANCE_INTERVAL = SETTINGS.declare(
    "balance_interval_seconds", float, 0.5, "seconds between looks for idle workers to move queued tasks to",
    flags=("--balance-interval", "-bi"), check=positive, used_by=(SCHEDULER,),
)  # fmt: skip
STATUS_INTERVAL = SETTINGS.declare(
    "status_interval_seconds", float, 1.0, "seconds between status messages on the monitor address",
    flags=("--status-interval", "-si"), check=positive, used_by=(SCHEDULER,),
)  # fmt: skip
JIT_WARMUP = SETTINGS.declare(
    "jit_warmup_seconds", float, 1.0,
    "under PyPy, seconds spent before serving on synthetic tasks through a private core, so that the first real"
    " tasks find the hot paths compiled (0: skip; nothing to warm on CPython)",
    flags=("--jit-warmup",), check=at_least(0), used_by=(SCHEDULER,),
)  # fmt: skip

# --- untrusted input (the scheduler) ----------------------------------------------------------------------------------
MIN_FRAME_BYTES = 1024 * 1024  # the smallest --max-frame-bytes: room for a task's inline arguments and an object chunk
FRAME_HEADROOM_BYTES = 64 * 1024  # in a frame, beside an object chunk: the message's other fields, and its neighbours


def frame_limit_complaint(value: int) -> Optional[str]:
    if value >= MIN_FRAME_BYTES:
        return None
    return (
        f"must be >= {MIN_FRAME_BYTES} (1 MiB): a frame carries tasks with inline arguments of up to 64 KiB each,"
        " and objects travel in chunks that fit under it"
    )


MAX_FRAME_BYTES = SETTINGS.declare(
    "max_frame_bytes", int, 512 * 1024 * 1024,
    "a peer that sends a larger frame is disconnected by ZeroMQ before the frame is read into memory; the scheduler"
    " announces it, and its clients and workers split objects under it and refuse larger messages themselves",
    flags=("--max-frame-bytes", "-mf"), check=frame_limit_complaint, used_by=(SCHEDULER,),
)  # fmt: skip
RELAY = SETTINGS.declare(
    "relay", bool, True,
    "start a data relay beside the scheduler, on its host: peers that cannot reach a worker or client holding data"
    " fetch it through the relay, not through the scheduler; with CurveZMQ, it uses the scheduler's keys",
    flags=("--relay",), used_by=(SCHEDULER,),
)  # fmt: skip
MAX_MALFORMED_PER_PEER = SETTINGS.declare(
    "max_malformed_per_peer", int, 100, "a client or worker that sends this many frames that do not decode is dropped",
    flags=("--max-malformed-per-peer", "-mm"), check=at_least(1), used_by=(SCHEDULER,),
)  # fmt: skip
MAX_OBJECTS_PER_CLIENT = SETTINGS.declare(
    "max_objects_per_client", int, 1_000_000, "objects one client may hold; beyond it new ones are dropped, logged",
    flags=("--max-objects-per-client", "-mo"), check=at_least(1), used_by=(SCHEDULER,),
)  # fmt: skip

# --- workers ----------------------------------------------------------------------------------------------------------
N_WORKERS = SETTINGS.declare(
    "n_workers", int, 4, "worker processes to start, each running one task at a time",
    flags=("--num-workers", "-n"), check=at_least(1), used_by=(CLUSTER,),
)  # fmt: skip
DEATH_TIMEOUT = SETTINGS.declare(
    "death_timeout_seconds", float, 300.0,
    "a worker that hears nothing from a scheduler this long exits; until then it keeps trying to register again, so"
    " a scheduler restarted meanwhile (a crash, an upgrade) finds it",
    flags=("--death-timeout", "-dt"), check=positive, used_by=(WORKER,),
)  # fmt: skip
OBJECT_RETENTION = SETTINGS.declare(
    "object_retention_seconds", float, 3600.0, "a worker forgets functions and objects no task used this long",
    flags=("--object-retention", "-or"), check=positive, used_by=(WORKER,),
)  # fmt: skip
GARBAGE_COLLECT_INTERVAL = SETTINGS.declare(
    "garbage_collect_interval_seconds", float, 30.0, "seconds between a worker's looks for objects past retention",
    flags=("--garbage-collect-interval", "-gc"), check=positive, used_by=(WORKER,),
)  # fmt: skip
TASK_OUTPUT_LIMIT = SETTINGS.declare(
    "task_output_limit_bytes", int, 1024 * 1024,
    "most bytes of a task's stdout and stderr sent to a Client(stream_output=True); the rest is dropped, counted",
    flags=("--task-output-limit", "-ol"), check=at_least(0), used_by=(WORKER,),
)  # fmt: skip
RETIRE_TIMEOUT = SETTINGS.declare(
    "retire_timeout_seconds", float, 45.0,
    "on SIGTERM each worker retires: it gets no new task, its queued ones go to other workers and its running one has"
    " this long to finish, after which it runs elsewhere; a second SIGTERM (or SIGINT) stops the workers at once",
    flags=("--retire-timeout", "-rt"), check=positive, used_by=(WORKER,),
)  # fmt: skip
AGENT_STALL_TIMEOUT = SETTINGS.declare(
    "agent_stall_timeout_seconds", float, 10.0,
    "a worker whose agent (the process that talks to the scheduler) has not turned its loop for this long is wedged:"
    " scaler_cluster logs its stacks, kills it and starts another in its place; its tasks run elsewhere",
    flags=("--agent-stall-timeout", "-st"), check=positive, used_by=(WORKER,),
)  # fmt: skip

RESOURCES = SETTINGS.declare(
    "resources", str, None,
    "what each worker offers, as NAME=AMOUNT,...: a task with options(resources=...) runs only on workers offering"
    " at least that much of each, e.g. gpu=1,mem=64e9",
    flags=("--resources", "-r"), metavar="NAME=AMOUNT,...", check=resources_complaint,
    used_by=(WORKER,), none_means="none",
)  # fmt: skip

ACTOR_SLOTS = SETTINGS.declare(
    "actor_slots", int, 4,
    "actors each worker hosts at most (client.actor), each in a process of its own beside the one running its tasks;"
    " an actor created while every worker is full waits for a slot. 0: the worker hosts none",
    flags=("--actor-slots",), metavar="N", check=at_least(0), used_by=(WORKER,),
)  # fmt: skip

NATIVE_THREADS = SETTINGS.declare(
    "native_threads", int, 1,
    "threads the native libraries of each task process start (BLAS, OpenMP, MKL, numexpr), set through"
    " OMP_NUM_THREADS and its kin unless the worker's environment sets one of them: a worker runs one task at a time,"
    " so one per worker keeps workers from fighting over cores. 0: leave the libraries their own default (all cores)",
    flags=("--native-threads",), metavar="N", check=at_least(0), used_by=(WORKER,),
)  # fmt: skip

PRELOAD = SETTINGS.declare(
    "preload", str, None,
    "a function each task process runs once, before its first task: MODULE:FUNCTION, imported and called with no"
    " arguments (docs/guide/worker-state.md); what it sets up is there for every task of that process. A preload that"
    " fails at start stops the cluster with its traceback",
    flags=("--preload",), metavar="MODULE:FUNCTION", check=preload_complaint, used_by=(WORKER,), none_means="none",
)  # fmt: skip

# --- memory (docs/guide/memory.md: the one place the thresholds are described) --------------------------------------
MEMORY_LIMIT = SETTINGS.declare(
    "memory_limit", str, None,
    "each worker's memory: its task processes (PSS) and the results it holds; a task past it fails with"
    " MemoryLimitError and its process is replaced. Bytes, or with KB, MB, GB (powers of 10), KiB, MiB, GiB (of 2)",
    flags=("--memory-limit", "-ml"), metavar="SIZE", check=size_complaint, used_by=(WORKER,), none_means="no limit",
)  # fmt: skip
MEMORY_ENFORCEMENT = SETTINGS.declare(
    "memory_enforcement", str, "auto",
    "how the limit is enforced: cgroup (a memory cgroup per task process: the kernel stops it at the limit), watchdog"
    " (the worker samples its task processes' memory), or auto: cgroup where the host allows it, else watchdog",
    flags=("--memory-enforcement",), choices=("auto", "cgroup", "watchdog"), used_by=(WORKER,),
)  # fmt: skip
MEMORY_SPILL_FRACTION = SETTINGS.declare(
    "memory_spill_fraction", float, 0.6,
    "above this fraction of --memory-limit a worker moves the results it holds to disk, least recently used first,"
    " until it is below again; they are read back when needed",
    flags=("--memory-spill-fraction",), check=fraction, used_by=(WORKER,),
)  # fmt: skip
MEMORY_PAUSE_FRACTION = SETTINGS.declare(
    "memory_pause_fraction", float, 0.8,
    "above this fraction of --memory-limit a worker starts no new task, and hands its queued ones back, until its"
    " memory falls below it again",
    flags=("--memory-pause-fraction",), check=fraction, used_by=(WORKER,),
)  # fmt: skip
MEMORY_STOP_FRACTION = SETTINGS.declare(
    "memory_stop_fraction", float, 0.95,
    "above this fraction of --memory-limit the worker stops the task using the most memory (MemoryLimitError) and"
    " replaces its process",
    flags=("--memory-stop-fraction",), check=fraction, used_by=(WORKER,),
)  # fmt: skip

# --- every process ----------------------------------------------------------------------------------------------------
LOGGING_PATHS = SETTINGS.declare(
    "logging_paths", str, ("/dev/stdout",), "where to log: files, /dev/stdout or /dev/stderr",
    flags=("--logging-paths", "-lp"), many=True, metavar="PATH", used_by=(SCHEDULER, WORKER),
)  # fmt: skip
LOGGING_LEVEL = SETTINGS.declare(
    "logging_level", str, "INFO", "the least severe level logged",
    flags=("--logging-level", "-ll"), choices=LOGGING_LEVELS, used_by=(SCHEDULER, WORKER),
)  # fmt: skip

# --- TCP keepalive, on every ZeroMQ TCP socket (see README, Failures and recovery) ------------------------------------
TCP_KEEPALIVE = SETTINGS.declare(
    "tcp_keepalive", bool, True,
    "probe idle TCP connections, so that firewalls and NAT do not drop them",
    flags=("--tcp-keepalive",), used_by=(SCHEDULER, WORKER, MONITOR),
)  # fmt: skip
TCP_KEEPALIVE_IDLE = SETTINGS.declare(
    "tcp_keepalive_idle_seconds", int, 60, "seconds a connection is idle before the first keepalive probe",
    flags=("--tcp-keepalive-idle",), check=at_least(1), used_by=(SCHEDULER, WORKER, MONITOR),
)  # fmt: skip
TCP_KEEPALIVE_INTERVAL = SETTINGS.declare(
    "tcp_keepalive_interval_seconds", int, 10, "seconds between unanswered keepalive probes",
    flags=("--tcp-keepalive-interval",), check=at_least(1), used_by=(SCHEDULER, WORKER, MONITOR),
)  # fmt: skip
TCP_KEEPALIVE_COUNT = SETTINGS.declare(
    "tcp_keepalive_count", int, 6, "unanswered keepalive probes after which the connection is closed",
    flags=("--tcp-keepalive-count",), check=at_least(1), used_by=(SCHEDULER, WORKER, MONITOR),
)  # fmt: skip

# --- monitors ---------------------------------------------------------------------------------------------------------
STATUS_TIMEOUT = SETTINGS.declare(
    "status_timeout_seconds", float, 5.0,
    "seconds without a status after which the monitor says the scheduler is not answering",
    flags=("--timeout", "-t"), check=positive, used_by=(MONITOR,),
)  # fmt: skip

# --- CurveZMQ (see README, Security) ----------------------------------------------------------------------------------
CURVE_SECRET_KEY_FILE = SETTINGS.declare(
    "curve_secret_key_file", str, None, "turn CurveZMQ on with this key pair: its NAME.key_secret, from scaler_keygen",
    flags=("--curve-secret-key",), metavar="FILE", used_by=(SCHEDULER, WORKER, MONITOR), none_means="CurveZMQ off",
)  # fmt: skip
CURVE_AUTHORIZED_KEYS_DIR = SETTINGS.declare(
    "curve_authorized_keys_dir", str, None,
    "with CurveZMQ: the directory of the public keys (*.key) of the clients, workers and monitors to accept",
    flags=("--curve-authorized-keys",), metavar="DIRECTORY", used_by=(SCHEDULER,), none_means="CurveZMQ off",
)  # fmt: skip
CURVE_SERVER_KEY_FILE = SETTINGS.declare(
    "curve_server_key_file", str, None, "with CurveZMQ: the scheduler's public key file (NAME.key)",
    flags=("--curve-server-key",), metavar="FILE", used_by=(WORKER, MONITOR), none_means="CurveZMQ off",
)  # fmt: skip

# --- the names modules have imported since before the declarations ----------------------------------------------------
DEFAULT_EVENT_LOOP = EVENT_LOOP.default
DEFAULT_PROTECTED = PROTECTED.default
DEFAULT_HEARTBEAT_INTERVAL_SECONDS = HEARTBEAT_INTERVAL.default
DEFAULT_WORKER_TIMEOUT_SECONDS = WORKER_TIMEOUT.default
DEFAULT_CLIENT_TIMEOUT_SECONDS = CLIENT_TIMEOUT.default
DEFAULT_MAX_TASKS_WAITING = MAX_TASKS_WAITING.default
DEFAULT_PER_WORKER_QUEUE_SIZE = PER_WORKER_QUEUE_SIZE.default_in(SCHEDULER)
DEFAULT_WORKER_QUEUE_SIZE = PER_WORKER_QUEUE_SIZE.default_in(WORKER)
DEFAULT_BALANCE_INTERVAL_SECONDS = BALANCE_INTERVAL.default
DEFAULT_TASK_RETRY_LIMIT = TASK_RETRY_LIMIT.default
DEFAULT_STATUS_INTERVAL_SECONDS = STATUS_INTERVAL.default
DEFAULT_LOGGING_LEVEL = LOGGING_LEVEL.default
DEFAULT_LOGGING_PATHS = LOGGING_PATHS.default
DEFAULT_MAX_FRAME_BYTES = MAX_FRAME_BYTES.default
DEFAULT_MAX_MALFORMED_PER_PEER = MAX_MALFORMED_PER_PEER.default
DEFAULT_MAX_OBJECTS_PER_CLIENT = MAX_OBJECTS_PER_CLIENT.default
DEFAULT_NUMBER_OF_WORKERS = N_WORKERS.default
DEFAULT_DEATH_TIMEOUT_SECONDS = DEATH_TIMEOUT.default
DEFAULT_OBJECT_RETENTION_SECONDS = OBJECT_RETENTION.default
DEFAULT_GARBAGE_COLLECT_INTERVAL_SECONDS = GARBAGE_COLLECT_INTERVAL.default
DEFAULT_RETIRE_TIMEOUT_SECONDS = RETIRE_TIMEOUT.default

# --- defaults that are not user settings ------------------------------------------------------------------------------
# warnings that peers cause (malformed frames, refused peers, dying processors): see scaler.rate_limit
DEFAULT_PEER_WARNINGS_PER_PEER = 5  # logged per peer (or kind of event) and interval; the rest are counted...
DEFAULT_PEER_WARNINGS_PER_INTERVAL = 50  # ...as are those beyond this many in all...
DEFAULT_PEER_WARNINGS_INTERVAL_SECONDS = 10.0  # ...and summed up in one line per interval
DEFAULT_PEER_EVENTS_PER_INTERVAL = 1000  # lines on peers connecting and leaving, in all (per peer as warnings)

# worker
DEFAULT_RETIRE_GRACE_SECONDS = 2.0  # a retiring worker's own deadline is the scheduler's plus this (core.py)
DEFAULT_CLUSTER_SHUTDOWN_TIMEOUT_SECONDS = 5.0  # told to stop at once, workers get this long to leave, then SIGKILL
DEFAULT_ORPHAN_CHECK_INTERVAL_SECONDS = 1.0  # fallback to PR_SET_PDEATHSIG: how often a child checks its parent
DEFAULT_MEMORY_SAMPLE_SECONDS = 0.02  # with a memory limit: how often a worker reads its processors' memory
DEFAULT_PROFILING_SAMPLE_INTERVAL_SECONDS = 0.01  # peak-memory sampling, only where Linux can't reset VmHWM
DEFAULT_PREFETCH_SECONDS = 0.01  # a processor is handed tasks ahead while their expected run time is under this...
DEFAULT_PREFETCH_TASKS = 256  # ...and at most this many: short tasks flow without a round trip, long ones stay movable
# (a processor reports half-way through its pipe, so this sets how many short tasks an agent-processor exchange carries:
# with 64, ten workers on two cores woke a process about every 20 no-op tasks, each wake a preemption on a crowded run
# queue; with 256, a third of the context switches and about a fifth less CPU per task in agents and processors)

# client
DEFAULT_CLIENT_CONNECT_TIMEOUT_SECONDS = 60.0  # Client(timeout_seconds=...): waiting for the scheduler's HelloReply
DEFAULT_INLINE_LIMIT_BYTES = 64 * 1024  # larger arguments and results travel as objects, fetched once per worker
DEFAULT_OBJECT_CHUNK_BYTES = 64 * 1024 * 1024  # objects larger than this travel in several ObjectPut chunks
DEFAULT_TASKS_PER_FRAME = 256  # the client batches this many tasks into one ZeroMQ frame
DEFAULT_CLIENT_DISCONNECT_TIMEOUT_SECONDS = 5.0  # disconnect()/shutdown() wait this long for the scheduler's answer
DEFAULT_CLIENT_FUNCTION_CACHE_SIZE = 4096  # functions a client remembers by identity, to serialize each once


def object_chunk_bytes(max_frame_bytes: int) -> int:
    """The size of the chunks objects travel in to a scheduler reading frames of up to `max_frame_bytes`."""
    return min(DEFAULT_OBJECT_CHUNK_BYTES, max_frame_bytes - FRAME_HEADROOM_BYTES)


def default_monitor_address(address: str) -> str:
    """The monitor address the scheduler publishes on when none is given: ipc, beside the scheduler, as in the docs."""
    if address.startswith("tcp://"):
        host, _, port = address[len("tcp://") :].rpartition(":")
        return "ipc:///tmp/{}_{}_monitor".format(host.strip("[]"), port)
    if address.startswith("ipc://"):
        return address + "_monitor"
    raise ValueError(f"address must start with tcp:// or ipc://, got {address!r}")


# --- the attributes of the settings objects, for mypy and IDEs --------------------------------------------------------
FIELDS_PATH = "scaler/settings_fields.py"  # from the repository's root


def settings_fields_source() -> str:
    """scaler/settings_fields.py as scripts/settings_fields.py writes it from the declarations above."""
    header = (
        "Internal: the attributes of SchedulerSettings and WorkerSettings, for mypy and IDEs.\n\n"
        "Generated from the declarations in scaler/config.py by `python scripts/settings_fields.py`; do not edit.\n"
        "tests/test_settings.py fails when this file differs from what that script writes.\n"
    )
    return fields_module(SETTINGS, {"SchedulerFields": SCHEDULER, "WorkerFields": WORKER}, header)
