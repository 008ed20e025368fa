"""`scaler_cluster -n N ADDRESS` (alias `scaler_worker`), also `python -m scaler.cluster ADDRESS`."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import List, Optional, Tuple

from scaler import config
from scaler.io.curve_options import add_peer_key_arguments
from scaler.io.limits import raise_open_files_limit
from scaler.io.sockets import validate_address
from scaler.logs import setup_logging
from scaler.worker.settings import WorkerSettings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_cluster",
        description="Run N Scaler workers connected to the scheduler at ADDRESS; stop them all with SIGTERM/SIGINT.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("address", help="scheduler address, e.g. tcp://127.0.0.1:2345 or ipc:///tmp/scaler")
    parser.add_argument(
        "--num-workers",
        "-n",
        type=int,
        default=config.DEFAULT_NUMBER_OF_WORKERS,
        help="number of workers, each running one task at a time",
    )
    parser.add_argument(
        "--heartbeat-interval",
        "-hi",
        type=float,
        default=config.DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
        help="seconds between heartbeats until the scheduler names its own interval",
    )
    parser.add_argument(
        "--death-timeout",
        "-dt",
        type=float,
        default=config.DEFAULT_DEATH_TIMEOUT_SECONDS,
        help="a worker that hears nothing from the scheduler for this many seconds exits",
    )
    parser.add_argument(
        "--queue-size",
        "-qs",
        type=int,
        default=config.DEFAULT_WORKER_QUEUE_SIZE,
        help="tasks a worker accepts at once, queued plus running",
    )
    parser.add_argument(
        "--object-retention",
        "-or",
        type=float,
        default=config.DEFAULT_OBJECT_RETENTION_SECONDS,
        help="seconds a worker keeps a function or object that no task used",
    )
    parser.add_argument(
        "--garbage-collect-interval",
        "-gc",
        type=float,
        default=config.DEFAULT_GARBAGE_COLLECT_INTERVAL_SECONDS,
        help="seconds between looks for objects past their retention",
    )
    add_peer_key_arguments(parser, "the workers'")
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop the workers and exit when the process that started this one exits",
    )
    parser.add_argument(
        "--logging-paths",
        "-lp",
        nargs="+",
        default=list(config.DEFAULT_LOGGING_PATHS),
        help="where to log: files, /dev/stdout or /dev/stderr",
    )
    parser.add_argument(
        "--logging-level",
        "-ll",
        choices=config.LOGGING_LEVELS,
        default=config.DEFAULT_LOGGING_LEVEL,
        help="least severe level logged",
    )
    return parser


def parse_arguments(argv: Optional[List[str]] = None) -> Tuple[WorkerSettings, int, bool]:
    """(WorkerSettings, number of workers, exit_with_parent), or an argparse error and exit status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.num_workers < 1:
        parser.error(f"argument --num-workers/-n: must be >= 1, got {args.num_workers}")
    try:
        settings = WorkerSettings(
            address=validate_address(args.address),
            heartbeat_interval_seconds=args.heartbeat_interval,
            death_timeout_seconds=args.death_timeout,
            queue_size=args.queue_size,
            object_retention_seconds=args.object_retention,
            garbage_collect_interval_seconds=args.garbage_collect_interval,
            logging_level=args.logging_level,
            logging_paths=tuple(args.logging_paths),
            curve_secret_key_file=args.curve_secret_key,
            curve_server_key_file=args.curve_server_key,
        )
    except (TypeError, ValueError) as error:
        parser.error(str(error))
        raise  # unreachable: parser.error exits
    return settings, args.num_workers, args.exit_with_parent


def main(argv: Optional[List[str]] = None) -> None:
    settings, n_workers, exit_with_parent = parse_arguments(argv)
    setup_logging(settings.logging_paths, settings.logging_level)
    # inherited by every worker and the tasks it runs: one process per worker is cheap, many files per task need not be
    open_files = raise_open_files_limit()
    logging.info("scaler_cluster: %d workers, each with an %s", n_workers, open_files.describe())
    # Imported after parsing so `-h` answers fast, and before forking so every worker starts with it loaded.
    from scaler.cluster.launcher import ClusterProcess

    sys.exit(ClusterProcess(settings, n_workers, exit_with_parent=exit_with_parent).run())
