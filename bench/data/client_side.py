"""The client of one bench/data/transfer.py trial: one workload on one engine's running cluster, in its own process.

    python -m bench.data.client_side --engine scaler --address tcp://... --workload results --params '{...}' --out F
    .venv-seed/bin/python bench/data/client_side.py --engine seed ...       # the seeds' engine: run by path

transfer.py starts this; it is not meant to be run by hand. It connects, warms up (a no-op task per worker slot, and
for `matmul` a small dask.array, so that imports and shipping functions are not timed), builds the inputs, then times
from the first submit to the last result checked, and writes what it saw to --out as JSON: seconds, results checked
and expected, bytes moved, or the error. Every result is checked against what it must be.

The seeds' engine is also a package named `scaler`, so its side runs this file by path in its own environment: the
directory on sys.path is then bench/data, and `import scaler` finds that environment's package, not this checkout.
So this file imports nothing from bench/ and nothing beyond the standard library at the top. Run either way, it is
`__main__`, so its task functions travel by value (cloudpickle) and no worker needs to import this file.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ENGINES = ("scaler", "seed", "dask", "dask-direct")
WORKLOADS = ("results", "chains", "args", "results-numpy", "args-numpy", "matmul", "heavy", "fanin")
FANIN_LEAF_BYTES = 70 * 1024  # above the inline limit (64 KiB): each leaf is held where it was made
TAG_BYTES = 8  # a payload ends with its index: payloads differ, and a misplaced one is caught


# ---- payloads: made on the workers and in the client alike ----------------------------------------------------------


def _process_cache() -> Dict[Any, Any]:
    """This process's payload bodies. Kept in sys.modules, not in a global: the task functions travel by value,
    with the globals they name, and a global cache would carry the client's bodies to the workers."""
    import types

    module = sys.modules.get("_bench_data_cache")
    if module is None:
        module = sys.modules["_bench_data_cache"] = types.ModuleType("_bench_data_cache")
    blocks: Dict[Any, Any] = vars(module).setdefault("blocks", {})
    return blocks


def _bytes_body(size: int) -> bytes:
    """`size` random bytes, the same in every process (random, so that no transport compresses them)."""
    cache = _process_cache()
    body = cache.get(("bytes", size))
    if body is None:
        body = cache[("bytes", size)] = random.Random(size).randbytes(size)
    return bytes(body)


def _array_base(length: int) -> Any:
    import numpy

    cache = _process_cache()
    base = cache.get(("array", length))
    if base is None:
        base = cache[("array", length)] = numpy.random.default_rng(length).random(length)
    return base


def make_bytes(index: int, size: int) -> bytes:
    """Payload `index`: the shared random body, its last TAG_BYTES replaced by the index."""
    return _bytes_body(size)[: size - TAG_BYTES] + index.to_bytes(TAG_BYTES, "little")


def bytes_intact(payload: Any, index: int, size: int) -> bool:
    if isinstance(payload, memoryview):
        payload = payload.tobytes()
    if not isinstance(payload, (bytes, bytearray)) or len(payload) != size:
        return False
    # startswith/endswith compare in place: no copy of the 16 MiB
    return payload.endswith(index.to_bytes(TAG_BYTES, "little")) and payload.startswith(
        memoryview(_bytes_body(size))[: size - TAG_BYTES]
    )


def make_array(index: int, length: int) -> Any:
    """Array payload `index`: float64, the shared random base with its last element set to the index."""
    array = _array_base(length).copy()
    array[-1] = float(index)
    return array


def array_intact(array: Any, index: int, length: int) -> bool:
    import numpy

    return bool(
        isinstance(array, numpy.ndarray)
        and array.dtype == numpy.float64
        and array.shape == (length,)
        and array[-1] == float(index)
        and numpy.array_equal(array[:-1], _array_base(length)[:-1])
    )


# ---- task functions -------------------------------------------------------------------------------------------------


def noop(value: int) -> int:
    return value


def check_bytes(payload: Any, index: int, size: int) -> Tuple[int, int, bool]:
    """What a task given payload `index` answers: its size, its index, and whether it arrived intact."""
    return len(payload), index, bytes_intact(payload, index, size)


def check_array(array: Any, index: int, length: int) -> Tuple[int, int, bool]:
    return int(array.nbytes), index, array_intact(array, index, length)


def chain_make(index: int, size: int) -> bytes:
    return make_bytes(index, size)


def chain_step(payload: Any) -> bytes:
    """A new payload of the same size: the tag moved to the front."""
    payload = bytes(payload) if isinstance(payload, memoryview) else payload
    return payload[-TAG_BYTES:] + payload[:-TAG_BYTES]


def chain_size(payload: Any, size: int) -> Tuple[int, int, bool]:
    """The step's output's length and index, and whether both intermediates arrived intact."""
    payload = bytes(payload) if isinstance(payload, memoryview) else payload
    intact = len(payload) == size and payload.endswith(memoryview(_bytes_body(size))[: size - TAG_BYTES])
    return len(payload), int.from_bytes(payload[:TAG_BYTES], "little"), intact


def fanin_check(size: int, *leaves: Any) -> Tuple[int, int]:
    """How many leaves one node read, and how many of them arrived intact, each in its place."""
    return len(leaves), sum(bytes_intact(leaf, index, size) for index, leaf in enumerate(leaves))


def heavy_function(sec: int, payload: bytes) -> int:
    """The seeds' test_heavy_function task, as written there."""
    return len(payload) * sec


# ---- engines: the same calls on each client --------------------------------------------------------------------------


class ScalerApi:
    """This checkout's client, or the seeds' engine's (same API: map, get with a graph dict, dask's scheduler=)."""

    def __init__(self, address: str, serializer: Any = None) -> None:
        from scaler import Client

        self.client = Client(address) if serializer is None else Client(address, serializer=serializer)

    def map(self, function: Callable[..., Any], calls: Sequence[Tuple[Any, ...]]) -> List[Any]:
        return list(self.client.map(function, list(calls)))

    def get(self, graph: Dict[str, Any], keys: List[str]) -> List[Any]:
        values = self.client.get(graph, keys=keys)
        return [values[key] for key in keys]

    def compute(self, collection: Any) -> Any:
        import dask

        return dask.compute(collection, scheduler=self.client.get)[0]

    def close(self) -> None:
        self.client.disconnect()


class DaskApi:
    def __init__(self, address: str, direct: bool) -> None:
        import distributed

        # direct: results fetched from the workers that hold them; by default a client outside the cluster gets
        # them through the scheduler
        self.client = distributed.Client(address, direct_to_workers=True if direct else None)

    def map(self, function: Callable[..., Any], calls: Sequence[Tuple[Any, ...]]) -> List[Any]:
        columns = list(zip(*calls))
        return list(self.client.gather(self.client.map(function, *columns, pure=False)))

    def get(self, graph: Dict[str, Any], keys: List[str]) -> List[Any]:
        return list(self.client.get(graph, keys))

    def compute(self, collection: Any) -> Any:
        import dask

        return dask.compute(collection)[0]  # the distributed client is the default scheduler once made

    def close(self) -> None:
        self.client.close()


def heavy_serializer_class() -> Any:
    """The custom serializer of the seeds' test_heavy_function (one type byte, then cloudpickle), without its
    prints; a subclass of the engine's own Serializer, made once the engine's `scaler` is importable."""
    import cloudpickle

    from scaler import Serializer

    class HeavySerializer(Serializer):
        @staticmethod
        def serialize(obj: Any) -> bytes:
            if isinstance(obj, int):
                return b"I" + str(obj).encode()
            return b"O" + cloudpickle.dumps(obj)

        @staticmethod
        def deserialize(payload: bytes) -> Any:
            if payload[:1] == b"I":
                return int(payload[1:])
            return cloudpickle.loads(payload[1:])

    return HeavySerializer


def connect(engine: str, address: str, workload: str) -> Any:
    if engine in ("dask", "dask-direct"):
        return DaskApi(address, direct=engine == "dask-direct")
    serializer = heavy_serializer_class()() if workload == "heavy" else None
    return ScalerApi(address, serializer)


# ---- workloads -------------------------------------------------------------------------------------------------------


class Outcome:
    """What a trial reports; `checked` counts results found right."""

    def __init__(self, expected: int, moved: int) -> None:
        self.expected = expected
        self.moved = moved  # bytes the workload moves (0: reported in seconds only)
        self.checked = 0
        self.wrong: List[str] = []

    def check(self, ok: bool, what: str) -> None:
        if ok:
            self.checked += 1
        elif len(self.wrong) < 5:
            self.wrong.append(what)


def run_workload(api: Any, workload: str, params: Dict[str, Any]) -> Tuple[float, Outcome]:
    """Build the inputs, then time from the first submit to the last result checked."""
    size = params["payload_bytes"]
    tasks = params["tasks"]
    length = size // 8
    if workload == "results":
        outcome = Outcome(tasks, tasks * size)
        _bytes_body(size)
        start = time.perf_counter()
        for index, value in enumerate(api.map(make_bytes, [(index, size) for index in range(tasks)])):
            outcome.check(bytes_intact(value, index, size), f"result {index}")
    elif workload == "results-numpy":
        outcome = Outcome(tasks, tasks * length * 8)
        _array_base(length)
        start = time.perf_counter()
        for index, value in enumerate(api.map(make_array, [(index, length) for index in range(tasks)])):
            outcome.check(array_intact(value, index, length), f"result {index}")
    elif workload in ("args", "args-numpy"):
        numpy_arrays = workload == "args-numpy"
        checker: Callable[..., Any] = check_array if numpy_arrays else check_bytes
        maker = make_array if numpy_arrays else make_bytes
        unit = length if numpy_arrays else size
        calls = [(maker(index, unit), index, unit) for index in range(tasks)]
        nbytes = length * 8 if numpy_arrays else size
        outcome = Outcome(tasks, tasks * nbytes)
        start = time.perf_counter()
        for index, value in enumerate(api.map(checker, calls)):
            outcome.check(tuple(value) == (nbytes, index, True), f"task {index} answered {value!r}")
    elif workload == "chains":
        chains = params["chains"]
        # every argument a key of the graph: the seeds' client.get takes nothing else
        graph: Dict[str, Any] = {"size": size}
        for index in range(chains):
            graph[f"index-{index}"] = index
            graph[f"make-{index}"] = (chain_make, f"index-{index}", "size")
            graph[f"step-{index}"] = (chain_step, f"make-{index}")
            graph[f"length-{index}"] = (chain_size, f"step-{index}", "size")
        keys = [f"length-{index}" for index in range(chains)]
        outcome = Outcome(chains, chains * 2 * size)  # two intermediates a chain: make's and step's
        _bytes_body(size)
        start = time.perf_counter()
        for index, value in enumerate(api.get(graph, keys)):
            outcome.check(tuple(value) == (size, index, True), f"chain {index} answered {value!r}")
    elif workload == "fanin":
        leaves = params["fanin_leaves"]
        graph = {"size": FANIN_LEAF_BYTES}  # every argument a key, as in chains
        for index in range(leaves):
            graph[f"index-{index}"] = index
            graph[f"leaf-{index}"] = (chain_make, f"index-{index}", "size")
        graph["read"] = (fanin_check, "size", *[f"leaf-{index}" for index in range(leaves)])
        outcome = Outcome(1, leaves * FANIN_LEAF_BYTES)
        _bytes_body(FANIN_LEAF_BYTES)
        start = time.perf_counter()
        (value,) = api.get(graph, ["read"])
        outcome.check(tuple(value) == (leaves, leaves), f"the node read {value!r} of {leaves} leaves")
    elif workload == "matmul":
        import dask.array as da
        import numpy

        side, chunk = params["matmul_side"], params["matmul_chunk"]
        x = da.random.default_rng(0).random((side, side), chunks=(chunk, chunk))
        # mean(x @ x.T) is the sum of the squared column sums over side**2: a reference without the product
        columns = x.compute(scheduler="synchronous").sum(axis=0)
        expected = float(numpy.dot(columns, columns)) / side**2
        expression = (x @ x.T).mean()
        outcome = Outcome(1, 0)
        start = time.perf_counter()
        value = float(api.compute(expression))
        outcome.check(math.isclose(value, expected, rel_tol=1e-9), f"mean {value!r}, expected {expected!r}")
    elif workload == "heavy":
        heavy_bytes, heavy_tasks = params["heavy_bytes"], params["heavy_tasks"]
        function = functools.partial(heavy_function, payload=b"1" * heavy_bytes)
        outcome = Outcome(heavy_tasks, 0)
        start = time.perf_counter()
        values = api.map(function, [(sec,) for sec in range(1, heavy_tasks + 1)])
        for sec, value in enumerate(values, 1):
            outcome.check(value == sec * heavy_bytes, f"task {sec} answered {value!r}")
    else:
        raise ValueError(f"unknown workload {workload!r}")
    return time.perf_counter() - start, outcome


def prime(kind: str, size: int) -> int:
    """A warm-up task: this process makes its payload body (and imports numpy) before the timing starts."""
    return len(_bytes_body(size)) if kind == "bytes" else int(_array_base(size // 8).nbytes)


def warm_up(api: Any, workload: str, params: Dict[str, Any]) -> None:
    """A few tasks per worker, untimed: the client's function cache, the workers' imports and payload bodies."""
    slots = 2 * params["workers"]
    size = params["payload_bytes"]
    function: Callable[..., Any]
    calls: List[Tuple[Any, ...]]
    if workload in ("matmul", "heavy"):
        function, calls, expected = noop, [(index,) for index in range(slots)], list(range(slots))
    else:
        kind = "array" if workload.endswith("-numpy") else "bytes"
        function, calls, expected = prime, [(kind, size)] * slots, [size] * slots
    if api.map(function, calls) != expected:
        raise AssertionError("warm-up: wrong results")
    if workload == "matmul":
        import dask.array as da

        small = da.ones((200, 200), chunks=(100, 100))
        if float(api.compute((small @ small.T).mean())) != 200.0:
            raise AssertionError("warm-up: wrong dask.array result")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=ENGINES, required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--params", required=True, help="sizes, as JSON (transfer.py's)")
    parser.add_argument("--out", required=True, help="where to write the outcome, as JSON")
    args = parser.parse_args()
    params = json.loads(args.params)
    report: Dict[str, Any] = {"seconds": None, "checked": 0, "expected": None, "bytes": 0, "error": None}
    api: Optional[Any] = None
    try:
        api = connect(args.engine, args.address, args.workload)
        warm_up(api, args.workload, params)
        seconds, outcome = run_workload(api, args.workload, params)
        report.update(seconds=seconds, checked=outcome.checked, expected=outcome.expected, bytes=outcome.moved)
        if outcome.wrong:
            report["error"] = "wrong results: " + "; ".join(outcome.wrong)
    except BaseException as error:  # reported, not raised: the trial failed, the benchmark goes on
        traceback.print_exc()
        report["error"] = f"{type(error).__name__}: {error}"[:2000]
    finally:
        if api is not None:
            try:
                api.close()
            except Exception:  # a client that failed may fail to close too; the error above is what matters
                traceback.print_exc()
    with open(args.out, "w") as out:
        json.dump(report, out)
    sys.exit(1 if report["error"] else 0)


if __name__ == "__main__":
    main()
