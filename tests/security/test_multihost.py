"""Scheduler, workers and client on three hosts: network namespaces this test makes, joined by veth pairs.

The scheduler's host has one link to the workers' host and one to the client's, so every byte between them crosses a
real network interface, and nothing leaves for any address but those of these namespaces. The namespaces (and with
them the links) are removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable, Dict, Iterator, List

import pytest

from scaler.io.curve_keys import load_peer_keys
from scaler.testing.curve_files import client_key_options, make_key_files, peer_key_options, scheduler_key_options
from scaler.testing.processes import ROOT, ScalerProcess, free_tcp_address
from tests.e2e.monitor import counters, wait_for_status

SUBNET = "10.231"  # .1.0/24 links scheduler and workers, .2.0/24 scheduler and client


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@contextlib.contextmanager
def _namespaces(names: Dict[str, str], wire: Callable[[Dict[str, str], str], None]) -> Iterator[Dict[str, List[str]]]:
    """A network namespace per role (named `scaler<tag><names[role]>`), linked by `wire(namespaces, tag)`; yields
    {role: command prefix running a program on that host}, and removes them (and their links) afterwards."""
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("network namespaces need root and iproute2's ip")
    tag = f"{os.getpid() % 100000}"
    namespaces = {role: f"scaler{tag}{name}" for role, name in names.items()}
    made: List[str] = []
    try:
        for name in namespaces.values():
            try:
                _ip("netns", "add", name)
            except subprocess.CalledProcessError as error:
                pytest.skip(f"cannot create network namespaces here: {error.stderr.decode().strip()}")
            made.append(name)
        wire(namespaces, tag)
        for name in namespaces.values():
            _ip("-n", name, "link", "set", "lo", "up")
        yield {role: ["ip", "netns", "exec", name] for role, name in namespaces.items()}
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


def _veth(tag: str, index: int, hub: str, hub_address: str, host: str, host_address: str) -> str:
    """A link between namespace `hub` and namespace `host`, up, with these addresses (the hub's end may have none: it
    is then left for a bridge); returns the name of the hub's end."""
    near, far = f"v{tag}s{index}", f"v{tag}p{index}"
    _ip("link", "add", near, "type", "veth", "peer", "name", far)
    _ip("link", "set", near, "netns", hub)
    _ip("link", "set", far, "netns", host)
    if hub_address:
        _ip("-n", hub, "addr", "add", hub_address, "dev", near)
    _ip("-n", host, "addr", "add", host_address, "dev", far)
    _ip("-n", hub, "link", "set", near, "up")
    _ip("-n", host, "link", "set", far, "up")
    return near


@pytest.fixture
def hosts() -> Iterator[Dict[str, List[str]]]:
    """{'scheduler'|'workers'|'client': command prefix running a program on that host}."""

    def wire(names: Dict[str, str], tag: str) -> None:
        for index, role in ((1, "workers"), (2, "client")):
            _veth(tag, index, names["scheduler"], f"{SUBNET}.{index}.1/24", names[role], f"{SUBNET}.{index}.2/24")

    with _namespaces({role: role[0] for role in ("scheduler", "workers", "client")}, wire) as prefixes:
        yield prefixes


CLIENT_SCRIPT = textwrap.dedent(
    """
    import logging
    import sys
    from scaler import Client
    from scaler.errors import AuthenticationError

    relayed = []  # the client's warning that it could not reach a holder and went through the relay
    handler = logging.Handler()
    handler.emit = lambda record: relayed.append(record) if "relay" in record.getMessage() else None
    logging.getLogger("scaler").addHandler(handler)

    address, secret, server = sys.argv[1], sys.argv[2] or None, sys.argv[3] or None
    try:
        with Client(address, timeout_seconds=8, curve_secret_key_file=secret, curve_server_key_file=server) as client:
            squares = client.map(pow, [(n, 2) for n in range(500)])
            graph = client.get({"a": 20, "b": (abs, -22), "c": (sum, ["a", "b"])}, keys=["c"])
            # held by its worker, on a host this client cannot reach: it comes through the relay
            big = client.submit(bytes, 300_000).result(timeout=40)
            # kept by this client, which the workers cannot reach: they fetch it through the relay
            kept = client.submit(len, b"k" * 300_000).result(timeout=40)
            print("ok", sum(squares), graph["c"], len(big), kept, "relayed" * bool(relayed), flush=True)
    except (TimeoutError, AuthenticationError) as error:
        print("refused", type(error).__name__, error, flush=True)
    """
)


def _make_keys(keys: Path, scheduler_args: List[str], worker_args: List[str]) -> List[str]:
    """Key pairs for the scheduler, the workers, a client and a stranger (not authorized) in `keys`; adds the
    scheduler's and workers' CurveZMQ options to their arguments and returns the client's (secret, server key)."""
    make_key_files(keys, ["worker", "client"], strangers=["stranger"])
    scheduler_args += scheduler_key_options(keys)
    worker_args += peer_key_options(keys, "worker")
    client = client_key_options(keys, "client")
    return [client["curve_secret_key_file"], client["curve_server_key_file"]]


def _run_cluster(hosts: Dict[str, List[str]], tmp_path: Path, curve: bool) -> List[str]:
    """Start scheduler and workers on their hosts; run clients (authorized, then keyless) on theirs; their outputs."""
    port = free_tcp_address().rpartition(":")[2]
    keys = tmp_path / "keys"
    scheduler_args = [f"tcp://0.0.0.0:{port}", "-ma", f"ipc://{tmp_path}/monitor"]
    worker_args = ["-n", "2", f"tcp://{SUBNET}.1.1:{port}"]
    client_keys = ["", ""]
    if curve:
        client_keys = _make_keys(keys, scheduler_args, worker_args)
    scheduler = ScalerProcess(
        "scaler.scheduler", scheduler_args, str(tmp_path / "scheduler.log"), prefix=hosts["scheduler"]
    )
    outputs = []
    try:
        scheduler.wait_for_output("Scheduler: listening on")
        workers = ScalerProcess("scaler.cluster", worker_args, str(tmp_path / "workers.log"), prefix=hosts["workers"])
        try:
            workers.wait_for_output("Worker[1]: connected to")
            script = tmp_path / "client.py"
            script.write_text(CLIENT_SCRIPT)
            attempts = [client_keys, ["", ""]]
            if curve:
                attempts.append([str(keys / "stranger.key_secret"), str(keys / "scheduler.key")])
            for secret, server in attempts:
                done = subprocess.run(
                    [*hosts["client"], sys.executable, str(script), f"tcp://{SUBNET}.2.1:{port}", secret, server],
                    capture_output=True, text=True, timeout=60, cwd=ROOT,
                )  # fmt: skip
                assert done.returncode == 0, done.stderr
                outputs.append(done.stdout.strip())
            if not curve:  # (the monitor speaks CurveZMQ then)
                status = wait_for_status(f"ipc://{tmp_path}/monitor", lambda status: True)
                outputs.append(f"relayed fetches {status.relayed_fetches}, bytes {status.relayed_bytes}")
        finally:
            workers.stop()
    finally:
        scheduler.stop()
    outputs.append(scheduler.output())
    return outputs


def test_tasks_cross_hosts_without_curve(hosts: Dict[str, List[str]], tmp_path: Path) -> None:
    served, keyless_too, relay, scheduler_log = _run_cluster(hosts, tmp_path, curve=False)
    expected = f"ok {sum(n * n for n in range(500))} 42 300000 300000 relayed"
    assert served == expected and keyless_too == expected
    assert "reachable from other hosts without CurveZMQ" in scheduler_log
    # each client's result, and its kept argument for a worker: through the relay process, not the scheduler
    fetches, relayed_bytes = (int(word.strip(",")) for word in relay.split()[2::2])
    assert fetches >= 4 and relayed_bytes >= 4 * 300_000, relay
    assert "data relay on port" in scheduler_log


def test_tasks_cross_hosts_with_curve_and_peers_without_keys_are_refused(
    hosts: Dict[str, List[str]], tmp_path: Path
) -> None:
    served, keyless, stranger, scheduler_log = _run_cluster(hosts, tmp_path, curve=True)
    # the client cannot reach the holder's host, nor its worker the client's: the result and the argument this client
    # keeps go through the relay, which speaks CurveZMQ under the scheduler's keys
    assert served == f"ok {sum(n * n for n in range(500))} 42 300000 300000 relayed"
    assert "data relay on port" in scheduler_log and "serves through here" in scheduler_log
    assert keyless.startswith("refused TimeoutError")  # a peer without CURVE learns nothing from the scheduler
    assert stranger.startswith("refused AuthenticationError")
    assert "is not among the authorized keys" in scheduler_log and f"{SUBNET}.2.2" in scheduler_log
    assert "refused a connection to the scheduler address" in scheduler_log
    assert "without CurveZMQ" not in scheduler_log


@pytest.fixture
def lan() -> Iterator[Dict[str, List[str]]]:
    """{'scheduler'|'worker_a'|'worker_b'|'client': command prefix running a program on that host}, all on one
    network (10.231.3.0/24, a bridge on the scheduler's host): the workers reach each other and the client reaches
    them, each host in its own network namespace, so no two share the same-host path of scaler/io/local_data.py."""

    def wire(names: Dict[str, str], tag: str) -> None:
        hub, bridge = names["scheduler"], f"b{tag}"
        _ip("-n", hub, "link", "add", bridge, "type", "bridge")
        _ip("-n", hub, "addr", "add", f"{SUBNET}.3.1/24", "dev", bridge)
        _ip("-n", hub, "link", "set", bridge, "up")
        for index, role in enumerate(("worker_a", "worker_b", "client"), start=2):
            near = _veth(tag, index, hub, "", names[role], f"{SUBNET}.3.{index}/24")
            _ip("-n", hub, "link", "set", near, "master", bridge)

    roles = ("scheduler", "worker_a", "worker_b", "client")
    with _namespaces({role: f"l{index}" for index, role in enumerate(roles)}, wire) as prefixes:
        yield prefixes


LAN_CLIENT_SCRIPT = textwrap.dedent(
    """
    import logging
    import os
    import sys
    import time
    from scaler import Client

    relayed = []  # the client's warning that it could not reach a holder and asked the scheduler to relay
    handler = logging.Handler()
    handler.emit = lambda record: relayed.append(record) if "relay" in record.getMessage() else None
    logging.getLogger("scaler").addHandler(handler)

    def make(size):
        return b"r" * size

    def read_on(data):
        time.sleep(0.5)  # slow enough that the readers of one input spread over both workers
        return os.stat("/proc/self/ns/net").st_ino, len(data)  # which host read it

    address, secret, server = sys.argv[1], sys.argv[2] or None, sys.argv[3] or None
    with Client(address, timeout_seconds=8, curve_secret_key_file=secret, curve_server_key_file=server) as client:
        big = client.submit(make, 300_000).result(timeout=40)  # from its holder's host to this one
        kept = client.submit(len, b"k" * 300_000).result(timeout=40)  # kept here, fetched by a worker from this host
        readers = [f"reader{index}" for index in range(4)]
        results = client.get({"input": (make, 300_000), **{r: (read_on, "input") for r in readers}}, keys=readers)
        hosts = len({results[r][0] for r in readers})
        sizes = sorted({results[r][1] for r in readers})
        print("ok", len(big), kept, hosts, sizes, "relayed" * len(relayed), flush=True)
    """
)

PROBE_SCRIPT = textwrap.dedent(
    """
    import sys
    import zmq
    import zmq.auth
    from scaler.protocol import DataRequest, decode_frame, encode

    address, secret, server = sys.argv[1:4]
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.curve_publickey, dealer.curve_secretkey = zmq.auth.load_certificate(secret)
    dealer.curve_serverkey = zmq.auth.load_certificate(server)[0]
    dealer.connect(address)
    dealer.send(encode(DataRequest(object_ids=[b"n" * 16])))
    if dealer.poll(4000):
        (answer,) = decode_frame(dealer.recv())
        print("answered", type(answer).__name__, answer.found, flush=True)
    else:
        print("no answer", flush=True)
    """
)


@pytest.mark.parametrize("curve", [False, True], ids=["plain", "curve"])
def test_workers_and_client_on_one_network_fetch_from_each_other(
    lan: Dict[str, List[str]], tmp_path: Path, curve: bool
) -> None:
    """Each held result or kept object goes from its holder's host to the host that reads it, never through the
    scheduler's: the client's result, an argument the client keeps, and a graph input read on both worker hosts.
    With CurveZMQ, a worker's data address answers a key the scheduler accepts, from another host, and not a key it
    does not."""
    port = free_tcp_address().rpartition(":")[2]
    keys = tmp_path / "keys"
    monitor = f"ipc://{tmp_path}/monitor"  # a file: reachable from this test's own namespace
    scheduler_args = [f"tcp://0.0.0.0:{port}", "-ma", monitor, "--per-worker-queue-size", "1"]
    worker_args = ["-n", "1", f"tcp://{SUBNET}.3.1:{port}"]
    client_keys = ["", ""]
    monitor_keys = None
    if curve:
        client_keys = _make_keys(keys, scheduler_args, worker_args)
        monitor_keys = load_peer_keys(*client_keys)
    scheduler = ScalerProcess(
        "scaler.scheduler", scheduler_args, str(tmp_path / "scheduler.log"), prefix=lan["scheduler"]
    )
    launchers: List[ScalerProcess] = []
    try:
        scheduler.wait_for_output("Scheduler: listening on")
        for host in ("worker_a", "worker_b"):
            log = str(tmp_path / f"{host}.log")
            launchers.append(ScalerProcess("scaler.cluster", worker_args, log, prefix=lan[host]))
        for launcher in launchers:
            launcher.wait_for_output("Worker[0]: connected to")
        script = tmp_path / "client.py"
        script.write_text(LAN_CLIENT_SCRIPT)
        done = subprocess.run(
            [*lan["client"], sys.executable, str(script), f"tcp://{SUBNET}.3.1:{port}", *client_keys],
            capture_output=True, text=True, timeout=90, cwd=ROOT,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "ok 300000 300000 2 [300000]", "both worker hosts read the input; nothing relayed"
        status = wait_for_status(
            monitor, lambda status: counters(status.received).get("TaskResult", 0) >= 6, 20, monitor_keys
        )
        assert counters(status.sent).get("ObjectRequest", 0) == 0, "no holder was asked to upload through the scheduler"
        # the three functions, and where the kept argument is (ObjectPut.heldBySender): no result, no argument's bytes
        assert counters(status.received).get("ObjectPut", 0) <= 4
        if curve:
            address = re.search(r"data address (tcp://\S+) \(CurveZMQ\)", launchers[0].output())
            assert address is not None, launchers[0].output()
            probe = tmp_path / "probe.py"
            probe.write_text(PROBE_SCRIPT)
            answers = []
            for name in ("client", "stranger"):
                asked = subprocess.run(
                    [*lan["client"], sys.executable, str(probe), address.group(1), str(keys / f"{name}.key_secret"),
                     str(keys / "worker.key")],
                    capture_output=True, text=True, timeout=30, cwd=ROOT,
                )  # fmt: skip
                assert asked.returncode == 0, asked.stderr
                answers.append(asked.stdout.strip())
            assert answers == ["answered DataResponse False", "no answer"]
            launchers[0].wait_for_output("is not among the authorized keys (domain scaler-data)", timeout=10)
    finally:
        for launcher in launchers:
            launcher.stop()
        scheduler.stop()
