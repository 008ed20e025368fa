"""Data addresses with CurveZMQ on real processes, on one host: results, kept arguments and graph inputs come from
their holders, not through the scheduler, and a worker's data address answers only the keys its scheduler accepts.
(On one host, readers take the same-host path of scaler/io/local_data.py; tests/security/test_multihost.py has each
peer on a host of its own, where every fetch crosses TCP with CurveZMQ.)"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Iterator, Optional, Tuple

import cloudpickle
import pytest
import zmq

from scaler import Client, SchedulerClusterCombo
from scaler.io.curve_keys import CurvePeerKeys, load_peer_keys
from scaler.protocol import DataRequest, DataResponse, decode_frame, encode
from scaler.testing.curve_files import make_key_files
from scaler.testing.processes import wait_for
from tests.e2e.monitor import counters, wait_for_status

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(120)

MiB = 1024 * 1024


class Cluster:
    def __init__(self, directory: Path) -> None:
        self.keys = directory / "keys"
        self.log = directory / "cluster.log"
        make_key_files(self.keys, ["client"], strangers=["stranger"], scheduler=False)  # the combo makes its own
        self.combo = SchedulerClusterCombo(
            n_workers=2,
            curve_keys_dir=str(self.keys),
            logging_level="INFO",
            logging_paths=[str(self.log)],
            per_worker_queue_size=1,  # one task at a time each: readers of one input spread over both workers
        )
        self.client_keys = self.peer_keys("client")

    def peer_keys(self, name: str) -> CurvePeerKeys:
        keys = load_peer_keys(str(self.keys / f"{name}.key_secret"), self.combo.curve_server_key_file)
        assert keys is not None
        return keys

    def client(self) -> Client:
        return Client(
            self.combo.get_address(),
            timeout_seconds=20,
            curve_secret_key_file=str(self.keys / "client.key_secret"),
            curve_server_key_file=self.combo.curve_server_key_file,
        )

    def wait_workers(self) -> None:
        wait_for(lambda: self.log.read_text().count("connected to") >= 2, 30, "both workers registered")

    def data_addresses(self) -> list:
        pattern = r"data address (tcp://\S+) \(CurveZMQ\)"
        wait_for(lambda: len(re.findall(pattern, self.log.read_text())) >= 2, 30, "both workers' data addresses")
        return re.findall(pattern, self.log.read_text())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path)
    try:
        yield made
    finally:
        made.combo.shutdown()


def make(index: int, size: int) -> bytes:
    return bytes([index % 256]) * size


def read_on(data: bytes) -> Tuple[int, int]:
    """Which worker process read its input, and how much; slow enough that two readers take two workers."""
    time.sleep(0.5)
    return os.getppid(), len(data)


def test_results_and_graph_inputs_come_from_their_holders(cluster: Cluster) -> None:
    cluster.wait_workers()
    with cluster.client() as client:
        futures = [client.submit(make, index, MiB) for index in range(6)]
        for index, future in enumerate(futures):
            assert future.result(timeout=60) == bytes([index]) * MiB
        assert client.submit(len, b"k" * MiB).result(timeout=60) == MiB  # kept by the client, fetched by a worker
        readers = [f"reader{index}" for index in range(4)]
        graph = {"input": (make, 7, 2 * MiB), **{reader: (read_on, "input") for reader in readers}}
        results = client.get(graph, keys=readers)
        assert {results[reader][1] for reader in readers} == {2 * MiB}
        assert len({results[reader][0] for reader in readers}) == 2, "readers on the worker not holding the input too"
        status = wait_for_status(
            cluster.combo.get_monitor_address(),
            lambda status: counters(status.received).get("ObjectDelete", 0) >= 6,
            curve=cluster.client_keys,
        )
    sent, received = counters(status.sent), counters(status.received)
    assert sent.get("ObjectRequest", 0) == 0, "the scheduler relayed nothing: no holder was asked to upload"
    # the three functions, and where the kept argument is (ObjectPut.heldBySender): no result, no argument's bytes
    assert received.get("ObjectPut", 0) <= 4
    assert received.get("DataKeys", 0) >= 3 and sent.get("DataKeys", 0) >= 3, "two workers and the client"
    assert "refused a connection" not in cluster.log.read_text()


def _ask(address: str, keys: Optional[CurvePeerKeys], server_key: bytes, seconds: float) -> Optional[DataResponse]:
    """One DataRequest to a data address, as `keys` (None: without CurveZMQ); its answer, if one comes in time."""
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    if keys is not None:
        dealer.curve_publickey, dealer.curve_secretkey = keys.public_key, keys.secret_key
        dealer.curve_serverkey = server_key
    dealer.connect(address)
    try:
        dealer.send(encode(DataRequest(object_ids=[b"n" * 16])))
        if not dealer.poll(int(seconds * 1000)):
            return None
        (answer,) = decode_frame(dealer.recv())
        return answer
    finally:
        dealer.close()
        context.term()


def test_a_workers_data_address_answers_only_keys_its_scheduler_accepts(cluster: Cluster) -> None:
    address = cluster.data_addresses()[0]
    worker_key = (cluster.keys / "worker.key").read_bytes()
    server_key = re.search(rb'public-key = "(.{40})"', worker_key).group(1)  # type: ignore[union-attr]
    cluster.wait_workers()
    answer = _ask(address, cluster.client_keys, server_key, 10)  # a key the scheduler lists: answered
    assert type(answer) is DataResponse and not answer.found
    assert _ask(address, cluster.peer_keys("stranger"), server_key, 3) is None
    assert _ask(address, None, server_key, 2) is None  # no CurveZMQ at all
    assert _ask(address, cluster.client_keys, zmq.curve_keypair()[0], 2) is None  # not the worker's key
    wait_for(
        lambda: "is not among the authorized keys (domain scaler-data)" in cluster.log.read_text(),
        10,
        "the worker to log the stranger's refusal",
    )
