"""Every default of Scaler, in one place.

CLIs, the client, the combo and the scheduler read their defaults from here, so a default is changed once. This module
must import on PyPy 3.9 with nothing but the standard library, since the scheduler imports it.
"""

# --- event loop -------------------------------------------------------------------------------------------------------
EVENT_LOOPS = ("builtin", "uvloop")
DEFAULT_EVENT_LOOP = "builtin"

# --- scheduler --------------------------------------------------------------------------------------------------------
DEFAULT_PROTECTED = True  # client.shutdown() may not stop the cluster unless the scheduler is started unprotected
DEFAULT_HEARTBEAT_INTERVAL_SECONDS = 1.0  # clients and workers send a heartbeat this often
DEFAULT_WORKER_TIMEOUT_SECONDS = 5.0  # a worker silent this long is dead; its tasks run elsewhere
DEFAULT_CLIENT_TIMEOUT_SECONDS = 30.0  # a client silent this long is gone; its tasks are canceled, objects freed
DEFAULT_MAX_TASKS_WAITING = 10_000_000  # tasks the scheduler holds before refusing new ones
DEFAULT_PER_WORKER_QUEUE_SIZE = None  # a cap on the tasks sent to one worker at once; None: what the worker announces
DEFAULT_BALANCE_INTERVAL_SECONDS = 0.5  # how often the scheduler looks for idle workers to rebalance onto
DEFAULT_TASK_RETRY_LIMIT = 3  # a task whose worker died this many times fails with TaskStatus.worker_died
DEFAULT_STATUS_INTERVAL_SECONDS = 1.0  # how often the scheduler publishes SchedulerStatus on the monitor socket
DEFAULT_LOGGING_LEVEL = "INFO"
DEFAULT_COMBO_LOGGING_LEVEL = "WARNING"  # SchedulerClusterCombo runs inside user programs: warnings and errors only
DEFAULT_LOGGING_PATHS = ("/dev/stdout",)
LOGGING_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# --- untrusted input --------------------------------------------------------------------------------------------------
DEFAULT_MAX_FRAME_BYTES = 512 * 1024 * 1024  # larger frames are dropped by ZeroMQ itself (ZMQ_MAXMSGSIZE)
DEFAULT_MAX_MALFORMED_PER_PEER = 100  # a peer that sends this many undecodable frames is dropped
DEFAULT_MAX_OBJECTS_PER_CLIENT = 1_000_000

# --- worker -----------------------------------------------------------------------------------------------------------
DEFAULT_NUMBER_OF_WORKERS = 4
DEFAULT_WORKER_QUEUE_SIZE = 1000  # tasks a worker accepts at once: the "free" column of scaler_top
DEFAULT_DEATH_TIMEOUT_SECONDS = 30.0  # a worker that hears nothing from its scheduler this long exits
DEFAULT_OBJECT_RETENTION_SECONDS = 3600.0  # a worker forgets objects and functions unused this long
DEFAULT_GARBAGE_COLLECT_INTERVAL_SECONDS = 30.0
DEFAULT_CLUSTER_SHUTDOWN_TIMEOUT_SECONDS = 5.0  # after SIGTERM, workers get this long to disconnect, then SIGKILL
DEFAULT_ORPHAN_CHECK_INTERVAL_SECONDS = 1.0  # fallback to PR_SET_PDEATHSIG: how often a child checks its parent
DEFAULT_PROFILING_SAMPLE_INTERVAL_SECONDS = 0.01  # peak-memory sampling, only where Linux can't reset VmHWM
DEFAULT_PREFETCH_SECONDS = 0.01  # a processor is handed tasks ahead while their expected run time is under this...
DEFAULT_PREFETCH_TASKS = 64  # ...and at most this many: short tasks flow without a round trip, long ones stay movable

# --- client -----------------------------------------------------------------------------------------------------------
DEFAULT_CLIENT_CONNECT_TIMEOUT_SECONDS = 60.0  # Client(timeout_seconds=...): waiting for the scheduler's HelloReply
DEFAULT_INLINE_LIMIT_BYTES = 64 * 1024  # larger arguments and results travel as objects, fetched once per worker
DEFAULT_OBJECT_CHUNK_BYTES = 64 * 1024 * 1024  # objects larger than this travel in several ObjectPut chunks
DEFAULT_TASKS_PER_FRAME = 256  # the client batches this many tasks into one ZeroMQ frame
DEFAULT_CLIENT_DISCONNECT_TIMEOUT_SECONDS = 5.0  # disconnect()/shutdown() wait this long for the scheduler's answer
DEFAULT_CLIENT_FUNCTION_CACHE_SIZE = 4096  # functions a client remembers by identity, to serialize each once


def default_monitor_address(address: str) -> str:
    """The monitor address the scheduler publishes on when none is given: ipc, beside the scheduler, as in the docs."""
    if address.startswith("tcp://"):
        host, _, port = address[len("tcp://") :].rpartition(":")
        return "ipc:///tmp/{}_{}_monitor".format(host.strip("[]"), port)
    if address.startswith("ipc://"):
        return address + "_monitor"
    raise ValueError(f"address must start with tcp:// or ipc://, got {address!r}")
