"""A scheduler SIGKILLed in the middle of the work and a new one started on the same address: nothing is lost.

Real processes: the scheduler (CPython, or PyPy where .venv-pypy exists), two workers from scaler_cluster and the
client in this process. Each case kills the scheduler once work is under way, starts another within a second or two,
and checks that every future resolves once with the right value: the values, and that the client settled each future
(a done callback cannot tell: a future ignores a second answer) exactly once. It prints the time from the kill to the
last result ("restart recovery"), which the README quotes.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import sys
import threading
import time
from collections import Counter
from typing import Callable, Dict, Iterator, List, Optional

import cloudpickle
import psutil
import pytest
import zmq

from scaler import Client
from scaler.client.future import ScalerFuture
from scaler.errors import SchedulerGoneError
from scaler.protocol import DataRequest, DataResponse, decode_frame, encode
from scaler.testing.processes import ScalerProcess, free_tcp_address, wait_for
from tests.e2e.monitor import wait_for_status
from tests.perf_e2e.test_pypy_scheduler import SCHEDULER_PYTHON

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(180)


def slow_square(value: int) -> int:
    time.sleep(0.0002)
    return value * value


def node(*parents: int) -> int:
    time.sleep(0.002)
    return sum(parents) % 1_000_003 + 1


def fibonacci(client: Client, n: int) -> int:
    if n < 2:
        return n
    time.sleep(0.01)
    left, right = client.submit(fibonacci, client, n - 1), client.submit(fibonacci, client, n - 2)
    return left.result() + right.result()


def dot(vector: List[int], index: int) -> int:
    time.sleep(0.005)
    return sum(vector) * index


class Restartable:
    """A scheduler on a fixed address that can be SIGKILLed and started again, with workers that outlive it."""

    def __init__(self, tmp_path, python: Optional[str] = None, workers: int = 2) -> None:
        self.address = free_tcp_address()
        self.monitor = f"ipc://{tmp_path / 'monitor'}"
        self.tmp_path = tmp_path
        self.python = python
        self.schedulers: List[ScalerProcess] = []
        self.start()
        self.cluster = ScalerProcess(
            "scaler.cluster",
            ["-n", str(workers), "--heartbeat-interval", "0.5", self.address],
            str(tmp_path / "cluster.log"),
        )
        wait_for_status(self.monitor, lambda status: len(status.workers) == workers, 60)

    def start(self) -> None:
        arguments = [self.address, "--monitor-address", self.monitor, "--status-interval", "0.2"]
        log = str(self.tmp_path / f"scheduler{len(self.schedulers)}.log")
        scheduler = ScalerProcess("scaler.scheduler", arguments, log, self.python)
        self.schedulers.append(scheduler)
        scheduler.wait_for_output("Scheduler: listening on", timeout=60)

    def kill(self) -> float:
        scheduler = self.schedulers[-1]
        os.kill(scheduler.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        scheduler.popen.wait(10)
        return killed_at

    def restart_when(self, condition: Callable[[object], bool], downtime: float = 1.0) -> float:
        """Once a status satisfies `condition`, SIGKILL the scheduler and start another after `downtime` seconds."""
        wait_for_status(self.monitor, condition, 60)
        killed_at = self.kill()
        time.sleep(downtime)
        self.start()
        return killed_at

    def stop(self) -> None:
        self.cluster.stop()
        for scheduler in self.schedulers:
            scheduler.stop()


@pytest.fixture
def restartable(tmp_path) -> Iterator[Restartable]:
    cluster = Restartable(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def settlements(monkeypatch) -> Counter:
    """How often the client settled each task id's future: its IO thread hands every answer to _settle, or a frame's
    plain successes together to _settle_values."""
    counts: Counter = Counter()
    settle, settle_values = ScalerFuture._settle, ScalerFuture._settle_values

    def counting(future: ScalerFuture, *args) -> None:
        counts[future.task_id] += 1
        settle(future, *args)

    def counting_values(futures, *args) -> None:
        counts.update(future.task_id for future in futures)
        settle_values(futures, *args)

    monkeypatch.setattr(ScalerFuture, "_settle", counting)
    monkeypatch.setattr(ScalerFuture, "_settle_values", staticmethod(counting_values))
    return counts


def settled_once(counts: Counter, futures: List[ScalerFuture]) -> None:
    twice = {task_id.hex(): n for task_id, n in counts.items() if n != 1}
    assert not twice, f"futures settled more than once: {twice}"
    assert all(counts[future.task_id] == 1 for future in futures), "a future was never settled by an answer"


def report(case: str, killed_at: float) -> float:
    seconds = time.monotonic() - killed_at
    print(f"\nrestart recovery, {case}: {seconds:.2f}s from the kill to the last result")
    return seconds


def in_thread(call: Callable[[], object]) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as error:
            future.set_exception(error)

    threading.Thread(target=run, daemon=True).start()
    return future


def completed(at_least: int) -> Callable[[object], bool]:
    return lambda status: status.completed_tasks >= at_least


def test_a_map_of_20000_tasks_survives_a_scheduler_restart(restartable: Restartable, settlements: Counter) -> None:
    with Client(restartable.address) as client:
        results = in_thread(lambda: client.map(slow_square, [(i,) for i in range(20_000)]))
        killed_at = restartable.restart_when(completed(4_000))
        assert not results.done(), "the kill came in the middle of the map"
        assert results.result(120) == [i * i for i in range(20_000)]
        report("20,000-task map", killed_at)
        assert len(settlements) == 20_000 and set(settlements.values()) == {1}, "each future settled exactly once"
        assert client.submit(slow_square, 3).result(30) == 9, "the client goes on as before"
    workers = restartable.cluster.output()
    assert workers.count("registered again, as a new worker") == 2, "the workers stayed and registered again"
    assert "client" in restartable.schedulers[-1].output() and "registered again" in restartable.schedulers[-1].output()


def expected_graph(layers: int, width: int) -> Dict[str, int]:
    values: Dict[str, int] = {}
    for layer in range(layers):
        for index in range(width):
            parents = [values[f"n{layer - 1}-{(index + k) % width}"] for k in (0, 1)] if layer else [index]
            values[f"n{layer}-{index}"] = sum(parents) % 1_000_003 + 1
    return values


def test_a_1000_node_graph_survives_a_scheduler_restart(restartable: Restartable, settlements: Counter) -> None:
    layers, width = 10, 100
    graph: Dict[str, object] = {}
    for layer in range(layers):
        for index in range(width):
            parents = [f"n{layer - 1}-{(index + k) % width}" for k in (0, 1)] if layer else [index]
            graph[f"n{layer}-{index}"] = (node, *parents)
    # the last layer, and a few keys in the middle whose results the nodes after them need after the restart
    keys = [f"n{layers - 1}-{index}" for index in range(width)] + [f"n4-{index}" for index in range(0, width, 10)]
    with Client(restartable.address) as client:
        futures = client.get(graph, keys, block=False)
        settled: Dict[str, int] = {}
        for key, future in futures.items():
            future.add_done_callback(lambda _, key=key: settled.__setitem__(key, settled.get(key, 0) + 1))
        killed_at = restartable.restart_when(completed(450))
        values = {key: future.result(120) for key, future in futures.items()}
        report("1,000-node graph", killed_at)
    expected = expected_graph(layers, width)
    assert values == {key: expected[key] for key in keys}
    assert settled == dict.fromkeys(keys, 1), "each future's callbacks ran once"
    settled_once(settlements, list(futures.values()))


def test_nested_fibonacci_survives_a_scheduler_restart(restartable: Restartable, settlements: Counter) -> None:
    with Client(restartable.address) as client:
        future = client.submit(fibonacci, client, 11)
        killed_at = restartable.restart_when(completed(80))
        assert not future.done()
        assert future.result(120) == 89
        report("nested fibonacci(11)", killed_at)
    settled_once(settlements, [future])  # the nested ones settle in the workers' processes


def test_objects_sent_with_send_object_survive_a_scheduler_restart(
    restartable: Restartable, settlements: Counter
) -> None:
    vector = list(range(100_000))  # about 500 kB pickled: an object of its own, never inline
    with Client(restartable.address) as client:
        reference = client.send_object(vector, name="vector")
        futures = [client.submit(dot, reference, index) for index in range(600)]
        killed_at = restartable.restart_when(completed(100))
        assert [future.result(120) for future in futures] == [sum(vector) * index for index in range(600)]
        report("600 tasks on an object from send_object", killed_at)
        settled_once(settlements, futures)
        assert client.submit(dot, reference, 2).result(30) == sum(vector) * 2, "the reference still works"


def test_a_scheduler_that_never_comes_back_fails_pending_futures_within_reconnect_seconds(tmp_path) -> None:
    restartable = Restartable(tmp_path)
    try:
        with Client(restartable.address, reconnect_seconds=3) as client:
            future = client.submit(time.sleep, 60)
            wait_for_status(restartable.monitor, lambda status: any(worker.sent for worker in status.workers), 30)
            killed_at = restartable.kill()
            with pytest.raises(SchedulerGoneError) as raised:
                future.result(30)
            waited = time.monotonic() - killed_at
        assert isinstance(raised.value, TimeoutError) and "no message from the scheduler" in str(raised.value)
        assert waited < 3 + 1.5, waited  # within reconnect_seconds of the kill; slack for a loaded machine
    finally:
        restartable.stop()


def test_a_scheduler_restarted_on_pypy_serves_cpython_workers_and_clients(tmp_path, settlements: Counter) -> None:
    if not os.path.exists(SCHEDULER_PYTHON):
        pytest.skip(f"no PyPy environment at {SCHEDULER_PYTHON} (bash scripts/test.sh builds it)")
    restartable = Restartable(tmp_path, SCHEDULER_PYTHON)
    try:
        with Client(restartable.address) as client:
            results = in_thread(lambda: client.map(slow_square, [(i,) for i in range(5_000)]))
            killed_at = restartable.restart_when(completed(1_000))
            assert results.result(120) == [i * i for i in range(5_000)]
            report("5,000-task map, PyPy scheduler", killed_at)
            assert len(settlements) == 5_000 and set(settlements.values()) == {1}, "each settled exactly once"
        assert "pypy" in psutil.Process(restartable.schedulers[-1].pid).exe().lower()
    finally:
        restartable.stop()


MiB = 1024 * 1024


def counted(path: str) -> None:
    """A line in a ledger per run of a task: a task made again shows."""
    with open(path, "a") as runs:  # one short O_APPEND write: lines never mix
        runs.write(f"{os.getpid()}\n")


def large_when_allowed(marker_directory: str) -> bytes:
    """Says it started and which worker agent runs it, waits for the test's go (bounded), returns 1 MiB: a result its
    worker holds."""
    agent = psutil.Process(os.getppid()).ppid()  # processor -> fork server -> agent
    with open(os.path.join(marker_directory, "agent"), "w") as file:
        file.write(str(agent))
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(marker_directory, "go")) and time.monotonic() < deadline:
        time.sleep(0.02)
    counted(os.path.join(marker_directory, "runs"))
    return b"r" * MiB


def large_counted(marker_directory: str) -> bytes:
    counted(os.path.join(marker_directory, "runs"))
    return b"r" * MiB


def length_when_allowed(data: bytes, marker_directory: str) -> int:
    with open(os.path.join(marker_directory, "reading"), "w"):
        pass
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(marker_directory, "go")) and time.monotonic() < deadline:
        time.sleep(0.02)
    return len(data)


def serves(agent: int, object_id: bytes) -> bool:
    """Whether the worker agent serves this result on its data address (the one TCP port it listens on)."""
    process = psutil.Process(agent)
    listening = [c.laddr for c in process.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
    if not listening:
        return False
    context = zmq.Context.instance()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(f"tcp://{listening[0].ip}:{listening[0].port}")
        sock.send(encode(DataRequest(object_ids=[object_id])))
        if not sock.poll(5000):
            return False
        (response,) = decode_frame(sock.recv_multipart()[0])
        return type(response) is DataResponse and response.found
    finally:
        sock.close()


def test_a_result_held_when_the_scheduler_restarts_answers_its_resubmitted_task(tmp_path, settlements) -> None:
    """The worker holds the result, the scheduler never heard of it (stopped, then killed): the client resubmits
    the task, and the new scheduler answers it with what the worker reports it holds, without running it again."""
    restartable = Restartable(tmp_path, workers=1)
    try:
        with Client(restartable.address) as client:
            future = client.submit(large_when_allowed, str(tmp_path))
            agent_file = tmp_path / "agent"
            wait_for(lambda: agent_file.exists() and agent_file.read_text(), 30, "the task running")
            scheduler = restartable.schedulers[-1]
            os.kill(scheduler.pid, signal.SIGSTOP)  # its result reaches no scheduler that could record it
            (tmp_path / "go").touch()
            agent = int(agent_file.read_text())
            wait_for(lambda: serves(agent, future.task_id), 30, "the worker holding the result")
            restartable.kill()
            restartable.start()
            assert future.result(60) == b"r" * MiB
        settled_once(settlements, [future])
    finally:
        restartable.stop()
    assert len((tmp_path / "runs").read_text().splitlines()) == 1, "the task ran once"
    assert "registered again holding 1 result(s)" in restartable.schedulers[-1].output()


def test_a_graph_intermediate_held_when_the_scheduler_restarts_is_not_made_again(tmp_path, settlements) -> None:
    restartable = Restartable(tmp_path, workers=1)
    try:
        with Client(restartable.address) as client:
            graph = {"held": (large_counted, str(tmp_path)), "reader": (length_when_allowed, "held", str(tmp_path))}
            (future,) = client.submit_graph(graph, keys=["reader"])
            wait_for(lambda: (tmp_path / "reading").exists(), 30, "the reader running, its input held")
            restartable.kill()  # the reader, running, runs again; what it reads is held by the worker
            (tmp_path / "go").touch()
            restartable.start()
            assert future.result(60) == MiB
        settled_once(settlements, [future])
    finally:
        restartable.stop()
    assert len((tmp_path / "runs").read_text().splitlines()) == 1, "the intermediate was made once"


class Tally:
    """An actor that remembers every call it ran: a call run twice would show."""

    def __init__(self) -> None:
        self.ran: List[int] = []

    def add(self, number: int) -> int:
        time.sleep(0.01)
        self.ran.append(number)
        return number

    def history(self) -> List[int]:
        return self.ran


def test_an_actor_survives_a_scheduler_restart_and_runs_each_call_once(
    restartable: Restartable, settlements: Counter
) -> None:
    with Client(restartable.address) as client:
        tally = client.actor(Tally)
        futures = [tally.add(number) for number in range(400)]
        killed_at = restartable.restart_when(completed(60))
        assert not all(future.done() for future in futures), "the kill came in the middle of the calls"
        assert [future.result(90) for future in futures] == list(range(400))
        report("400 actor calls", killed_at)
        assert tally.history().result(30) == list(range(400)), "each call ran once, in order, on the same instance"
        settled_once(settlements, futures)
