"""Internal: keeping process trees from outliving their parents: launcher -> worker agent -> fork server -> processor.

Each child asks Linux for SIGKILL when its parent dies (PR_SET_PDEATHSIG), so even a SIGKILLed launcher takes its
whole tree down at once. The death signal fires when the *thread* that forked the child exits, so every fork in this
package happens on a main thread. As a fallback (other kernels, or a parent that died before prctl ran), each level
also compares os.getppid() with the pid it was started by, now and periodically.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(expected_parent_pid: int) -> bool:
    """Make the calling process get SIGKILL when its parent dies; exit at once if the parent is already gone.

    Returns whether the kernel will deliver that signal; if not, only the getppid() fallback protects us."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
            if not armed:
                logging.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
        except (OSError, AttributeError) as error:
            logging.warning("prctl(PR_SET_PDEATHSIG) unavailable: %s", error)
    # The parent may have died between fork() and prctl(): then the death signal will never come.
    if not parent_alive(expected_parent_pid):
        os._exit(1)
    return armed


def parent_alive(expected_parent_pid: int) -> bool:
    """False once we were re-parented, i.e. the process that started us has died."""
    return os.getppid() == expected_parent_pid
