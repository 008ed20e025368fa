"""Internal: CPython's cyclic garbage collector, made cheap for our own long-running loops (the worker agent, a
scheduler on CPython); never called in a user's process (the client, processors running tasks keep the defaults).

Per message such a loop allocates short-lived objects that reference counting frees, but enough of them live a few
turns (queued tasks, tasks held until their result) to drive the collector, and each full collection walks every
object of startup (modules, classes, functions: about 25,000) again. Timed with gc.callbacks in a 100,000-task map,
each of two agents spent about 0.09 s of its 0.6 s in collections, half of it in two full ones of 10-36 ms. Frozen,
the startup objects are never walked again; with a higher young threshold, collections come about thirty times less
often. PyPy's collector is another kind (no freeze, no thresholds): nothing to do there.
"""

from __future__ import annotations

import gc

YOUNG_COLLECTION_THRESHOLD = 20_000  # allocations between young collections (CPython's default: 700)


def tune_for_a_loop() -> None:
    """Call once startup is done (modules imported, objects of the loop built)."""
    if not hasattr(gc, "freeze"):  # PyPy
        return
    gc.freeze()
    _, middle_threshold, old_threshold = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, middle_threshold, old_threshold)
