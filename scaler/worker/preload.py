"""Internal: the preload (`--preload MODULE:FUNCTION`): a user's function that each task process runs once, before its
first task.

It runs in the processor, once the fork server forked it and it joined its memory cgroup, and never in the fork server
itself: what it sets up (module globals, a model, a connection pool, threads) belongs to that one process, where every
task it runs finds it, and its memory is that process's, counted against the worker's limit like a task's. Every
processor runs it: the first, those forked later in place of one (a crash, a timeout, a memory stop), to take over
from a parked parent, or as spares.

The processor tells its agent how it went with its first message on the channel (channel.py), before any result: an
empty ProcessorReport once the function returned; if it raised, or its module could not be imported, a report whose
one result has no task id and carries the traceback as its error text, after which the processor exits. The worker
core reads a preloading processor's first report that way (core.py): it registers with the scheduler only once its
first processor has preloaded, so a preload that fails stops the worker at start, with the traceback, instead of
failing every task.
"""

from __future__ import annotations

import importlib
import os
import signal
import socket
import sys
import traceback
from typing import Any, Callable, Optional

from scaler.config import parse_preload
from scaler.logs import flush_logs
from scaler.worker.channel import encode_shared, send_encoded
from scaler.worker.processor_messages import ProcessorReport, ProcessorResult

# The processor's exit code after a preload that failed (it has reported the traceback by then).
PRELOAD_FAILED_EXIT_CODE = 3


def run_preload(spec: str) -> None:
    """Import MODULE and call FUNCTION() as `spec` ("MODULE:FUNCTION") names them; raises what they raise.

    The current directory is searched first, as `python -m` does: `scaler_cluster` starts from a console script,
    whose directory is not where the user's modules are."""
    module_name, function_name = parse_preload(spec)
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    function = importlib.import_module(module_name)
    for name in function_name.split("."):
        function = getattr(function, name)
    if not callable(function):
        raise TypeError(f"{spec} is not callable: it is {type(function).__name__}")
    function()


def preload_hook(spec: Optional[str]) -> Optional[Callable[[socket.socket], None]]:
    """What the fork server calls in each processor before it serves its agent on `channel` (zygote.py); None
    without a preload."""
    if spec is None:
        return None

    def preload(channel: socket.socket) -> None:
        # Like a task, it must outlive a job manager's SIGTERM to the whole job, but not with the fork server's SIG_IGN,
        # which the programs it starts would inherit: a handler is reset by exec. The processor then sets its own.
        signal.signal(signal.SIGTERM, _ignore)
        try:
            run_preload(spec)
        except BaseException as error:  # noqa: B036 - SystemExit, KeyboardInterrupt: the preload failed all the same
            frames = error.__traceback__
            while frames is not None and _ours(frames.tb_frame.f_code.co_filename):
                frames = frames.tb_next  # from the user's first frame
            text = "".join(traceback.format_exception(type(error), error, frames))
            _report(channel, ProcessorReport([ProcessorResult(b"", False, b"", text, 0, 0, 0)], []))
            flush_logs()  # os._exit skips the flush at exit
            os._exit(PRELOAD_FAILED_EXIT_CODE)
        _report(channel, ProcessorReport([], []))

    return preload


def _ignore(signum: int, frame: Any) -> None:
    pass


def _ours(filename: str) -> bool:
    """A frame of this module or of the import machinery, above the user's code in a preload's traceback."""
    return filename in (__file__, importlib.__file__) or filename.startswith("<frozen importlib")


def _report(channel: socket.socket, report: ProcessorReport) -> None:
    try:
        send_encoded(channel, *encode_shared(report))
    except OSError:
        pass  # the agent is gone: so will this process be
