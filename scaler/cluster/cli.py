"""Internal: `scaler_cluster -n N ADDRESS` (alias `scaler_worker`), also `python -m scaler.cluster ADDRESS`."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import List, Optional, Tuple

from scaler.config import SETTINGS
from scaler.io.limits import raise_open_files_limit
from scaler.io.sockets import check_resolvable, validate_address
from scaler.logs import setup_logging
from scaler.settings_spec import CLUSTER, WORKER, HelpFormatter
from scaler.worker.settings import WorkerSettings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_cluster",
        description="Run N Scaler workers connected to the scheduler at ADDRESS. SIGTERM retires them (running tasks"
        " finish, queued ones go to other workers); a second SIGTERM, or SIGINT, stops them at once.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("address", help="scheduler address, e.g. tcp://127.0.0.1:2345 or ipc:///tmp/scaler")
    SETTINGS.add_arguments(parser, CLUSTER)
    SETTINGS.add_arguments(parser, WORKER)
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop the workers and exit when the process that started this one exits",
    )
    parser.add_argument("--ready-fd", type=int, default=None, help=argparse.SUPPRESS)  # Cluster's pipe (launcher.py)
    return parser


def parse_arguments(argv: Optional[List[str]] = None) -> Tuple[WorkerSettings, int, bool]:
    """(WorkerSettings, number of workers, exit_with_parent), or an argparse error and exit status 2."""
    settings, n_workers, exit_with_parent, _ = _parse(argv)
    return settings, n_workers, exit_with_parent


def _parse(argv: Optional[List[str]]) -> Tuple[WorkerSettings, int, bool, Optional[int]]:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        address = check_resolvable(validate_address(args.address))  # no waiting --death-timeout for a typo
        settings = WorkerSettings(address, **SETTINGS.from_arguments(args, WORKER))
    except (TypeError, ValueError) as error:
        parser.error(str(error))
        raise  # unreachable: parser.error exits
    return settings, args.n_workers, args.exit_with_parent, args.ready_fd


def main(argv: Optional[List[str]] = None) -> None:
    settings, n_workers, exit_with_parent, ready_fd = _parse(argv)
    setup_logging(settings.logging_paths, settings.logging_level)
    # inherited by every worker and the tasks it runs: one process per worker is cheap, many files per task need not be
    open_files = raise_open_files_limit()
    logging.info("scaler_cluster: %d workers, each with an %s", n_workers, open_files.describe())
    # Imported after parsing so `-h` answers fast, and before forking so every worker starts with it loaded.
    from scaler.cluster.launcher import ClusterProcess

    sys.exit(ClusterProcess(settings, n_workers, exit_with_parent=exit_with_parent, ready_fd=ready_fd).run())
