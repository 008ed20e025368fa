"""Results held by the workers that made them, on real processes: the client fetches them from their holders, the
scheduler never carries their bytes, a holder killed mid-graph loses nothing, and a holder retired mid-graph hands
what it holds to another worker before it leaves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import cloudpickle
import psutil
import pytest

from scaler import Client
from scaler.testing.curve_files import client_key_options, make_key_files, peer_key_options, scheduler_key_options
from scaler.testing.processes import mapped_at, wait_for
from tests.e2e.live_cluster import LiveCluster
from tests.e2e.monitor import counters

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(120)

MiB = 1024 * 1024


@pytest.fixture
def live(tmp_path) -> Iterator[LiveCluster]:
    cluster = LiveCluster(tmp_path)
    yield cluster
    cluster.close()


def make(index: int, size: int) -> bytes:
    return bytes([index % 256]) * size


def test_results_come_from_their_holders_not_through_the_scheduler(live) -> None:
    live.add_cluster(2)
    live.wait_workers(2)
    with Client(live.address) as client:
        futures = [client.submit(make, index, 4 * MiB) for index in range(12)]
        for index, future in enumerate(futures):
            assert future.result(timeout=60) == bytes([index]) * (4 * MiB)
        status = live.status(lambda status: counters(status.received).get("ObjectDelete", 0) >= 12)
    received, sent = counters(status.received), counters(status.sent)
    seen = f"sent {sent}, received {received}"
    assert received.get("ObjectPut", 0) <= 1, f"only the function was put; no result went up to the scheduler: {seen}"
    # Each request answered by one message: where a result is (the scheduler has none of their bytes to send), or the
    # function. At least one per result and the function to each of the 2 workers; more only if some peer asked again.
    assert received.get("ObjectRequest", 0) >= 12 + 2, seen
    assert sent.get("ObjectResponse", 0) == received.get("ObjectRequest", 0), seen
    assert sent.get("ObjectDelete", 0) >= 12, "each holder told to drop its result once the client had it"


def holder_pid(marker_directory: str) -> bytes:
    """A 1 MiB result, and the pid of the worker agent holding it written where the test looks."""
    agent = psutil.Process(os.getppid()).ppid()  # processor -> fork server -> agent
    with open(os.path.join(marker_directory, "holder"), "w") as file:
        file.write(str(agent))
    return b"h" * MiB


def read_when_allowed(data: bytes, marker_directory: str) -> int:
    """Reads its input, then waits for the test to kill the holder (bounded, should it never)."""
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(marker_directory, "go")) and time.monotonic() < deadline:
        time.sleep(0.02)
    return len(data)


def total(data: bytes, size: int) -> int:
    return len(data) + size


def test_a_holder_killed_mid_graph_has_what_it_held_made_again(live, tmp_path) -> None:
    live.add_worker()
    live.add_worker()
    live.wait_workers(2)
    marker = str(tmp_path)
    graph = {
        "held": (holder_pid, marker),
        "reader": (read_when_allowed, "held", marker),
        "last": (total, "held", "reader"),  # needs "held" again, after its holder is gone
    }
    with Client(live.address) as client:
        (future,) = client.submit_graph(graph, keys=["last"])
        holder_file = tmp_path / "holder"
        wait_for(lambda: holder_file.exists() and holder_file.read_text(), 30, "the holder's pid")
        victim = int(holder_file.read_text())
        holder_file.unlink()
        live.kill_worker(psutil.Process(victim))
        (tmp_path / "go").touch()
        assert future.result(timeout=60) == 2 * MiB
    wait_for(lambda: "running the task again to make it" in live.scheduler.output(), 10, "the result made again")


def make_array(size: int) -> Any:
    import numpy

    return numpy.arange(size, dtype=numpy.float64)


def add_in_place(array: Any, amount: float) -> Any:
    array += amount  # the task's own copy on write: never the held input another task reads
    return array


def test_a_holder_on_this_host_hands_its_memory_over_without_a_copy(live) -> None:
    """Same host: the client maps the holder's shared memory (the array's memory is that mapping), copy on write, and
    two graph nodes reading one held array each get it as it was made, whatever the other did to its own."""
    import numpy

    live.add_worker()
    live.wait_workers(1)
    size = 1_000_000
    graph = {"base": (make_array, size), "plus1": (add_in_place, "base", 1.0), "plus2": (add_in_place, "base", 2.0)}
    with Client(live.address) as client:
        array = client.submit(make_array, size).result(timeout=60)
        assert numpy.array_equal(array, numpy.arange(size, dtype=numpy.float64))
        mapped = mapped_at(array.__array_interface__["data"][0])
        assert mapped is not None and mapped.startswith("/memfd:scaler-data"), (
            f"the client's array is the holder's memory, mapped: {mapped}"
        )
        array[0] = 42.0  # writable: copy on write
        results = client.get(graph, keys=["plus1", "plus2"])
    base = numpy.arange(size, dtype=numpy.float64)
    assert numpy.array_equal(results["plus1"], base + 1.0)
    assert numpy.array_equal(results["plus2"], base + 2.0)


def _thread_cpu_seconds(native_id: int) -> float:
    with open(f"/proc/self/task/{native_id}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_holder_on_this_host_that_left_costs_the_client_nothing(live) -> None:
    """The client keeps its connection to a holder on this host after the fetch; the holder killed, that connection
    reads as end of file: it is dropped, not polled by the client's IO thread on every turn."""
    live.add_worker()
    live.wait_workers(1)
    with Client(live.address) as client:
        assert client.submit(make, 1, MiB).result(timeout=60) == bytes([1]) * MiB
        assert client._connection is not None
        reader = client._connection._io.data._local  # the connections to holders on this host
        assert reader.descriptors(), "fetched from its holder on this host"
        live.kill_worker()
        wait_for(lambda: not reader.descriptors(), 20, "the client to drop its connection to the holder that left")
        io_thread = client._connection._io._thread  # this client's (a test before may have left others running)
        assert io_thread.native_id is not None
        before = _thread_cpu_seconds(io_thread.native_id)
        time.sleep(1)
        assert _thread_cpu_seconds(io_thread.native_id) - before < 0.3, "the IO thread idles"


def agent_pid_and(size: int) -> tuple:
    """This task's worker agent, with a result large enough to be held."""
    return psutil.Process(os.getppid()).ppid(), b"h" * size


def agent_pid_reading(first: tuple, second: tuple) -> int:
    return psutil.Process(os.getppid()).ppid()


def test_a_holder_on_this_host_that_left_costs_the_worker_that_read_from_it_nothing(live) -> None:
    """A worker that fetched an input from a holder on this host keeps the connection; the holder killed, it reads as
    end of file: the reader's agent drops it, not polled on every turn of its loop."""
    live.add_cluster(2)
    live.wait_workers(2)
    graph = {"a": (agent_pid_and, MiB), "b": (agent_pid_and, MiB), "read": (agent_pid_reading, "a", "b")}
    with Client(live.address) as client:
        results = client.get(graph, keys=["a", "b", "read"])
    makers, reader_pid = {results["a"][0], results["b"][0]}, results["read"]
    assert len(makers) == 2, "a burst of two tasks goes one to each worker"
    (holder_pid,) = makers - {reader_pid}  # the worker the reader fetched from
    reader = psutil.Process(reader_pid)
    live.kill_worker(psutil.Process(holder_pid))
    live.wait_workers(1)
    before = sum(reader.cpu_times()[:2])
    time.sleep(1)
    assert sum(reader.cpu_times()[:2]) - before < 0.3, "the reader's agent idles"


def length_of_all(*parts: bytes) -> int:
    return sum(len(part) for part in parts)


def test_a_task_reading_hundreds_of_held_results_runs(live) -> None:
    """More graph results than one sendmsg passes descriptors (253) go to one task: the worker hands them over in
    batches (before, its channel to the task process stopped for good and the graph never ended)."""
    live.add_cluster(2)
    live.wait_workers(2)
    count, size = 600, 70 * 1024  # above the inline limit: each held where it was made
    graph: Dict[str, Any] = {f"part-{index}": (make, index, size) for index in range(count)}
    graph["total"] = (length_of_all, *[f"part-{index}" for index in range(count)])
    with Client(live.address) as client:
        assert client.get(graph, ["total"], block=False)["total"].result(timeout=60) == count * size


def first_bytes(*parts: bytes) -> List[int]:
    return [part[0] for part in parts if len(set(part)) == 1]  # a part of mixed bytes is left out, and shows


def test_a_worker_holds_more_results_than_its_open_files_limit_allows_descriptors(live) -> None:
    """A held result is a shared memory file, a descriptor, until the worker holds a quarter of its open-files limit's
    worth; it then holds small ones as bytes. Under a limit of 1024, 1,500 results of 70 KiB read by one task (before:
    the workers ran out of descriptors and crashed, EMFILE and MSG_CTRUNC, and the graph never ended)."""
    live.add_cluster(2, prefix=["prlimit", "--nofile=1024:1024", "--"])
    live.wait_workers(2)
    count, size = 1500, 70 * 1024
    graph: Dict[str, Any] = {f"part-{index}": (make, index, size) for index in range(count)}
    graph["firsts"] = (first_bytes, *[f"part-{index}" for index in range(count)])
    with Client(live.address) as client:
        got = client.get(graph, ["firsts", "part-7"], block=False)
        assert got["firsts"].result(timeout=60) == [index % 256 for index in range(count)]
        assert got["part-7"].result(timeout=60) == make(7, size)
    assert "crashed" not in live.launchers[0].output()


CLIENT_KEEPING_ARRAYS = """
import sys
import numpy
from scaler import Client

def make(index):
    return numpy.full(32 * 1024, index, dtype=numpy.float64)  # 256 KiB: held by its worker

with Client(sys.argv[1]) as client:
    kept = client.map(make, [(index,) for index in range(int(sys.argv[2]))])
    print("ok", all(array[0] == index and array[-1] == index for index, array in enumerate(kept)))
"""


def test_a_client_keeps_more_arrays_from_holders_on_its_host_than_it_may_open_files(live) -> None:
    """Each array the client reads from a holder on its host is a mapping of that holder's memory; under an open files
    limit of 256 it keeps 600 of them (before, each mapping kept a descriptor: "Too many open files" failed all)."""
    live.add_cluster(2)
    live.wait_workers(2)
    done = subprocess.run(
        ["prlimit", "--nofile=256:256", "--", sys.executable, "-c", CLIENT_KEEPING_ARRAYS, live.address, "600"],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ok", "True"], done.stdout


def view_of(size: int) -> memoryview:
    return memoryview(bytes(range(256)) * (size // 256))


def test_memoryview_results_arrive_as_their_bytes(live) -> None:
    live.add_worker()
    live.wait_workers(1)
    with Client(live.address) as client:
        small, large = client.submit(view_of, 1024), client.submit(view_of, 4 * MiB)
        assert small.result(timeout=60) == bytes(range(256)) * 4
        assert large.result(timeout=60) == bytes(range(256)) * (4 * MiB // 256)


def counted_holder(marker_directory: str) -> bytes:
    """holder_pid, and a line in a ledger per run: a task made again shows."""
    with open(os.path.join(marker_directory, "runs"), "a") as runs:  # one short O_APPEND write: lines never mix
        runs.write(f"{os.getpid()}\n")
    return holder_pid(marker_directory)


def _curve_options(directory: Path) -> Tuple[List[str], List[str], Dict[str, str]]:
    """Keys for a scheduler, its workers and a client, all authorized: the scheduler's, the workers' and the client's
    options."""
    keys = make_key_files(directory / "keys", ["worker", "client"])
    return scheduler_key_options(keys), peer_key_options(keys, "worker"), client_key_options(keys, "client")


@pytest.mark.parametrize("curve", [False, True], ids=["plain", "curve"])
def test_a_holder_retired_mid_graph_hands_what_it_holds_over_and_nothing_runs_twice(tmp_path, curve) -> None:
    scheduler_options, worker_options, client_options = _curve_options(tmp_path) if curve else ([], [], {})
    live = LiveCluster(tmp_path, extra_args=scheduler_options)
    try:
        live.add_cluster(1, *worker_options)
        live.add_cluster(1, *worker_options)
        # from the log: with CurveZMQ the monitor address wants keys too
        wait_for(lambda: live.scheduler.output().count("connected, capacity") >= 2, 30, "both workers registered")
        marker = str(tmp_path)
        graph = {
            "held": (counted_holder, marker),
            "reader": (read_when_allowed, "held", marker),
            "last": (total, "held", "reader"),  # needs "held" again, after its holder has left
        }
        with Client(live.address, **client_options) as client:
            (future,) = client.submit_graph(graph, keys=["last"])
            holder_file = tmp_path / "holder"
            wait_for(lambda: holder_file.exists() and holder_file.read_text(), 30, "the holder's pid")
            holder = psutil.Process(int(holder_file.read_text()))
            (launcher,) = [launcher for launcher in live.launchers if launcher.pid == holder.ppid()]
            os.kill(launcher.pid, signal.SIGTERM)  # scaler_cluster retires its worker
            wait_for(lambda: "retiring" in live.scheduler.output(), 30, "the holder retiring")
            (tmp_path / "go").touch()
            assert future.result(timeout=60) == 2 * MiB
            assert launcher.popen.wait(30) == 0, "the retired worker left"
        assert len((tmp_path / "runs").read_text().splitlines()) == 1, "the held result was made once"
        scheduler = live.scheduler.output()
        assert "handing 1 held result(s) over to 1 other worker(s)" in scheduler
        assert "running the task again" not in scheduler
    finally:
        live.close()


def test_results_are_freed_on_their_holders_once_read(live) -> None:
    """The client's results once it has them, a graph's intermediates once their readers ran: no worker process keeps
    the shared memory of any of them (descriptor or mapping)."""
    from tests.e2e.shared_memory import memfd_holders

    live.add_cluster(2)
    live.wait_workers(2)
    with Client(live.address) as client:
        workers = [process for agent in live.agents() for process in [agent, *agent.children(recursive=True)]]
        results = [future.result(timeout=60) for future in [client.submit(make, i, 4 * MiB) for i in range(6)]]
        assert results == [bytes([i]) * (4 * MiB) for i in range(6)]
        graph = {"a": (make, 1, 4 * MiB), "b": (make, 2, 4 * MiB), "c": (total, "a", 1), "d": (total, "b", 2)}
        assert client.get(graph, keys=["c", "d"]) == {"c": 4 * MiB + 1, "d": 4 * MiB + 2}
        wait_for(lambda: not memfd_holders(workers), 15, "every held result to be freed on its holder")
