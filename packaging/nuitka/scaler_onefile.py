"""Entry point of the Nuitka onefile binary: one compile serves every name it is copied to.

The program runs the CLI named by the file it was started as (argv[0]), the way busybox does, so `dist/scaler_scheduler`
and `dist/scaler_top` are the same bytes and cost one compile. The CLIs are imported explicitly (not via
importlib) so that Nuitka sees and compiles them.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Dict


def _scheduler_main() -> None:
    from scaler.scheduler.cli import main

    main()


def _top_main() -> None:
    from scaler.monitor.top import main

    main()


PROGRAMS: Dict[str, Callable[[], None]] = {"scaler_scheduler": _scheduler_main, "scaler_top": _top_main}


def program_name(argv0: str) -> str:
    """`/opt/bin/scaler_top` and `scaler_top.bin` both name scaler_top: the basename without an extension."""
    return os.path.splitext(os.path.basename(argv0))[0]


def run() -> None:
    name = program_name(sys.argv[0])
    program = PROGRAMS.get(name)
    if program is None:
        sys.exit(f"{name}: unknown program name; copy or link this binary as one of: {', '.join(sorted(PROGRAMS))}")
    program()


if __name__ == "__main__":
    run()
