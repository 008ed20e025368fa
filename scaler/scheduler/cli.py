"""Internal: `scaler_scheduler ADDRESS`, also `python -m scaler.scheduler ADDRESS` and `pypy3 -m scaler.scheduler
ADDRESS`."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import Callable, Dict, List, Optional, Tuple

from scaler import config
from scaler.config import SETTINGS
from scaler.gc_tuning import tune_for_a_loop
from scaler.io.sockets import validate_address
from scaler.logs import setup_logging
from scaler.scheduler.settings import SchedulerSettings
from scaler.settings_spec import SCHEDULER, HelpFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_scheduler",
        description="Run a Scaler scheduler: clients and workers connect to ADDRESS, monitors to the monitor address.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("address", help="address to bind, e.g. tcp://0.0.0.0:2345 or ipc:///tmp/scaler")
    SETTINGS.add_arguments(parser, SCHEDULER)
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
        settings = SchedulerSettings(validate_address(args.address), **SETTINGS.from_arguments(args, SCHEDULER))
    except (TypeError, ValueError) as error:
        parser.error(str(error))
        raise  # unreachable: parser.error exits
    return settings, args


def main(argv: Optional[List[str]] = None) -> None:
    settings, args = parse_arguments(argv)
    if argv is None:  # a process of its own, not a call from a program (the tests, bench/traced_scheduler.py)
        restart_with_gc_settings(args.ready_fd)
    parent_pid = os.getppid() if args.exit_with_parent else None
    setup_logging(settings.logging_paths, settings.logging_level)
    if "PYPY_GC_NURSERY" in os.environ and sys.implementation.name == "pypy":
        logging.getLogger(__name__).info("Scheduler: PyPy's GC nursery is %s", os.environ["PYPY_GC_NURSERY"])
    # imported late so `-h` answers fast, without zmq
    import zmq

    from scaler.scheduler.shell import run_scheduler

    if argv is None:  # our own process: CPython's collector need not walk the modules just imported again and again
        tune_for_a_loop()
    try:
        run_scheduler(settings, on_listening=_ready_signal(args.ready_fd), parent_pid=parent_pid)
    except (ValueError, zmq.ZMQError) as error:  # a missing uvloop, an address in use or of an unknown interface
        sys.exit(f"scaler_scheduler: cannot serve {settings.address}: {error}")


def gc_environment(environ: Dict[str, str], implementation: str) -> Optional[Dict[str, str]]:
    """The environment to start again with for config.DEFAULT_PYPY_GC_NURSERY; None if this one will do (CPython,
    or PYPY_GC_NURSERY set already: by the user, or by our own restart)."""
    if implementation != "pypy" or "PYPY_GC_NURSERY" in environ:
        return None
    return {**environ, "PYPY_GC_NURSERY": config.DEFAULT_PYPY_GC_NURSERY}


def restart_with_gc_settings(ready_fd: Optional[int]) -> None:
    """Under PyPy, replace this process (same pid, command line and open pipes) by itself started again with the GC
    settings in its environment; PyPy reads them at start only. The command line is read back from /proc, so that
    however the scheduler was started (`pypy3 -m scaler.scheduler`, the `scaler_scheduler` script, `pypy3
    scaler_scheduler.pex`) it starts the same way; where /proc is missing it keeps PyPy's own nursery."""
    environ = gc_environment(dict(os.environ), sys.implementation.name)
    if environ is None:
        return
    try:
        with open("/proc/self/cmdline", "rb") as cmdline:
            command = [os.fsdecode(part) for part in cmdline.read().split(b"\0")[:-1]]
    except OSError:
        return
    if ready_fd is not None:
        os.set_inheritable(ready_fd, True)  # SchedulerClusterCombo waits on it
    sys.stdout.flush()
    sys.stderr.flush()
    # A profiler started around us (`pypy3 -m vmprof ... -m scaler.scheduler`) armed an interval timer. Timers survive
    # execve, and their first SIGPROF would kill the new image before the replayed command line starts the profiler
    # again (the scheduler exited with -27 under vmprof): stop them; the profiler arms its own anew.
    for timer in (signal.ITIMER_PROF, signal.ITIMER_VIRTUAL):
        signal.setitimer(timer, 0)
    os.execve(sys.executable, command, environ)


def _ready_signal(fd: Optional[int]) -> Callable[[], None]:
    """Tells whoever started us, through a pipe, that the sockets are bound; a closed pipe without it means failure."""

    def signal_ready() -> None:
        if fd is not None:
            os.write(fd, b"listening\n")
            os.close(fd)

    return signal_ready
