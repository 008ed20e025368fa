"""Log set-up shared by every CLI: `[INFO]2023-03-19 12:16:10-0400: message`, as in the docs."""

from __future__ import annotations

import logging
import logging.handlers
import sys
from typing import Sequence

_FORMAT = "[%(levelname)s]%(asctime)s: %(message)s"
_DATE_FORMAT = "%Y-%m-%d %H:%M:%S%z"


def setup_logging(paths: Sequence[str], level: str) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    formatter = logging.Formatter(_FORMAT, _DATE_FORMAT)
    for path in paths:
        if path in ("/dev/stdout", "-"):
            handler: logging.Handler = logging.StreamHandler(sys.stdout)
        elif path == "/dev/stderr":
            handler = logging.StreamHandler()
        else:
            handler = logging.handlers.WatchedFileHandler(path)
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level)
    logging.info("logging to %s", tuple(paths))
