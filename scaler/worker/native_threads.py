"""Internal: how many threads the native libraries of task processes start (--native-threads).

BLAS, OpenMP and their kin start one thread per core when first loaded. A worker runs one task at a time, and a host
runs several workers: each task process starting a thread per core makes them fight over the cores, which costs more
than the threads gain (the dask.array product of bench/data/transfer.py, 2 workers on 2 cores: 1.74 s so, 1.18 s with
one thread each). Dask's nanny starts them with one thread as well, Ray's workers with a task's num_cpus (1 by
default). The libraries read these variables once, when loaded, so they are set in the fork server, before any task
process imports them; a user who set one of them in the worker's environment chose already, and is followed (an empty
value is no choice: the libraries read it as unset).
"""

from __future__ import annotations

from typing import Dict, Mapping

# OpenMP (and so numexpr's and many libraries' pools), OpenBLAS, MKL, Apple's Accelerate, BLIS, numexpr
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def native_thread_variables(threads: int, environment: Mapping[str, str]) -> Dict[str, str]:
    """What to add to the environment of task processes: every variable of THREAD_VARIABLES as `threads`; nothing if
    `threads` is 0 or `environment` sets one of them already (to something: an empty value is read as unset)."""
    if threads <= 0 or any(environment.get(name) for name in THREAD_VARIABLES):
        return {}
    return {name: str(threads) for name in THREAD_VARIABLES}


def describe_native_threads(threads: int, variables: Mapping[str, str], environment: Mapping[str, str]) -> str:
    """The worker's log line on it."""
    if variables:
        return f"task processes' native libraries start {threads} thread(s) (OMP_NUM_THREADS and its kin)"
    if threads <= 0:
        return "task processes' native libraries start as many threads as they choose (--native-threads 0)"
    chosen = ", ".join(f"{name}={environment[name]}" for name in THREAD_VARIABLES if environment.get(name))
    return f"task processes' native libraries start threads as the environment says: {chosen}"
