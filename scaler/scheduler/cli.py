"""`scaler_scheduler ADDRESS`, also `python -m scaler.scheduler ADDRESS` and `pypy3 -m scaler.scheduler ADDRESS`."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, List, Optional, Tuple

from scaler import config
from scaler.io.sockets import validate_address
from scaler.logs import setup_logging
from scaler.scheduler.settings import SchedulerSettings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_scheduler",
        description="Run a Scaler scheduler: clients and workers connect to ADDRESS, monitors to the monitor address.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("address", help="address to bind, e.g. tcp://0.0.0.0:2345 or ipc:///tmp/scaler")
    parser.add_argument(
        "--monitor-address",
        "-ma",
        default=None,
        help="address to publish status on (default: ipc:///tmp/{host}_{port}_monitor)",
    )
    parser.add_argument(
        "--protected",
        action=argparse.BooleanOptionalAction,
        default=config.DEFAULT_PROTECTED,
        help="refuse client.shutdown(); --no-protected lets a client stop the cluster",
    )
    parser.add_argument(
        "--event-loop",
        "-e",
        choices=config.EVENT_LOOPS,
        default=config.DEFAULT_EVENT_LOOP,
        help="asyncio's builtin loop, or uvloop (CPython only)",
    )
    parser.add_argument(
        "--heartbeat-interval",
        type=float,
        default=config.DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
        help="seconds between the heartbeats clients and workers are asked to send",
    )
    parser.add_argument(
        "--worker-timeout",
        type=float,
        default=config.DEFAULT_WORKER_TIMEOUT_SECONDS,
        help="seconds of silence after which a worker is dead and its tasks run elsewhere",
    )
    parser.add_argument(
        "--client-timeout",
        type=float,
        default=config.DEFAULT_CLIENT_TIMEOUT_SECONDS,
        help="seconds of silence after which a client is gone and its tasks are canceled",
    )
    parser.add_argument(
        "--max-tasks-waiting",
        type=int,
        default=config.DEFAULT_MAX_TASKS_WAITING,
        help="tasks held at once; beyond it new tasks are refused",
    )
    parser.add_argument(
        "--max-frame-bytes",
        type=int,
        default=config.DEFAULT_MAX_FRAME_BYTES,
        help="ZeroMQ closes the connection of a peer that sends a larger frame, before reading it into memory",
    )
    parser.add_argument(
        "--max-malformed-per-peer",
        type=int,
        default=config.DEFAULT_MAX_MALFORMED_PER_PEER,
        help="a client or worker that sends this many frames that do not decode is dropped",
    )
    parser.add_argument(
        "--max-objects-per-client",
        type=int,
        default=config.DEFAULT_MAX_OBJECTS_PER_CLIENT,
        help="objects one client may hold at the scheduler; beyond it new ones are dropped, with a warning",
    )
    parser.add_argument(
        "--per-worker-queue-size",
        type=int,
        default=config.DEFAULT_PER_WORKER_QUEUE_SIZE,
        help="most tasks sent to one worker at once (default: the queue size each worker announces)",
    )
    parser.add_argument(
        "--task-retry-limit",
        type=int,
        default=config.DEFAULT_TASK_RETRY_LIMIT,
        help="a task whose workers died this many times fails instead of running again",
    )
    parser.add_argument(
        "--balance-interval",
        type=float,
        default=config.DEFAULT_BALANCE_INTERVAL_SECONDS,
        help="seconds between looks for idle workers to move queued tasks to",
    )
    parser.add_argument(
        "--status-interval",
        type=float,
        default=config.DEFAULT_STATUS_INTERVAL_SECONDS,
        help="seconds between status messages on the monitor address",
    )
    parser.add_argument(
        "--logging-paths",
        "-lp",
        nargs="+",
        default=list(config.DEFAULT_LOGGING_PATHS),
        help="where to log: files, /dev/stdout or /dev/stderr",
    )
    parser.add_argument("--logging-level", "-ll", choices=config.LOGGING_LEVELS, default=config.DEFAULT_LOGGING_LEVEL)
    parser.add_argument(
        "--curve-secret-key",
        default=None,
        metavar="FILE",
        help="turn CurveZMQ on: the scheduler's NAME.key_secret file, from scaler_keygen",
    )
    parser.add_argument(
        "--curve-authorized-keys",
        default=None,
        metavar="DIRECTORY",
        help="with CurveZMQ: the directory of public keys (*.key) of the clients, workers and monitors to accept",
    )
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="exit when the process that started this one exits (used by SchedulerClusterCombo)",
    )
    parser.add_argument("--ready-fd", type=int, default=None, help=argparse.SUPPRESS)  # SchedulerClusterCombo's pipe
    return parser


def parse_arguments(argv: Optional[List[str]] = None) -> Tuple[SchedulerSettings, argparse.Namespace]:
    """The settings, and the parsed arguments that are not settings (process lifetime); exit status 2 on errors."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = SchedulerSettings(
            address=validate_address(args.address),
            monitor_address=args.monitor_address,
            protected=args.protected,
            event_loop=args.event_loop,
            heartbeat_interval_seconds=args.heartbeat_interval,
            worker_timeout_seconds=args.worker_timeout,
            client_timeout_seconds=args.client_timeout,
            max_tasks_waiting=args.max_tasks_waiting,
            per_worker_queue_size=args.per_worker_queue_size,
            max_frame_bytes=args.max_frame_bytes,
            max_malformed_per_peer=args.max_malformed_per_peer,
            max_objects_per_client=args.max_objects_per_client,
            task_retry_limit=args.task_retry_limit,
            balance_interval_seconds=args.balance_interval,
            status_interval_seconds=args.status_interval,
            logging_paths=tuple(args.logging_paths),
            logging_level=args.logging_level,
            curve_secret_key_file=args.curve_secret_key,
            curve_authorized_keys_dir=args.curve_authorized_keys,
        )
    except (TypeError, ValueError) as error:
        parser.error(str(error))
        raise  # unreachable: parser.error exits
    return settings, args


def main(argv: Optional[List[str]] = None) -> None:
    settings, args = parse_arguments(argv)
    parent_pid = os.getppid() if args.exit_with_parent else None
    setup_logging(settings.logging_paths, settings.logging_level)
    # imported late so `-h` answers fast, without zmq
    import zmq

    from scaler.scheduler.shell import run_scheduler

    try:
        run_scheduler(settings, on_listening=_ready_signal(args.ready_fd), parent_pid=parent_pid)
    except (ValueError, zmq.ZMQError) as error:  # a missing uvloop, an address in use or of an unknown interface
        sys.exit(f"scaler_scheduler: cannot serve {settings.address}: {error}")


def _ready_signal(fd: Optional[int]) -> Callable[[], None]:
    """Tells whoever started us, through a pipe, that the sockets are bound; a closed pipe without it means failure."""

    def signal_ready() -> None:
        if fd is not None:
            os.write(fd, b"listening\n")
            os.close(fd)

    return signal_ready
