"""Scheduler, workers and client on three hosts: network namespaces this test makes, joined by veth pairs.

The scheduler's host has one link to the workers' host and one to the client's, so every byte between them crosses a
real network interface, and nothing leaves for any address but those of these namespaces. The namespaces (and with
them the links) are removed afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from scaler.io.curve import generate_key_pair
from scaler.testing.processes import ROOT, ScalerProcess, free_tcp_address
from tests.e2e.monitor import wait_for_status

SUBNET = "10.231"  # .1.0/24 links scheduler and workers, .2.0/24 scheduler and client


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def hosts() -> Iterator[Dict[str, List[str]]]:
    """{'scheduler'|'workers'|'client': command prefix running a program on that host}."""
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("network namespaces need root and iproute2's ip")
    tag = f"{os.getpid() % 100000}"
    names = {role: f"scaler{tag}{role[0]}" for role in ("scheduler", "workers", "client")}
    made: List[str] = []
    try:
        for name in names.values():
            try:
                _ip("netns", "add", name)
            except subprocess.CalledProcessError as error:
                pytest.skip(f"cannot create network namespaces here: {error.stderr.decode().strip()}")
            made.append(name)
        for index, role in ((1, "workers"), (2, "client")):
            near, far = f"v{tag}s{index}", f"v{tag}p{index}"
            _ip("link", "add", near, "type", "veth", "peer", "name", far)
            _ip("link", "set", near, "netns", names["scheduler"])
            _ip("link", "set", far, "netns", names[role])
            _ip("-n", names["scheduler"], "addr", "add", f"{SUBNET}.{index}.1/24", "dev", near)
            _ip("-n", names[role], "addr", "add", f"{SUBNET}.{index}.2/24", "dev", far)
            _ip("-n", names["scheduler"], "link", "set", near, "up")
            _ip("-n", names[role], "link", "set", far, "up")
        for name in names.values():
            _ip("-n", name, "link", "set", "lo", "up")
        yield {role: ["ip", "netns", "exec", name] for role, name in names.items()}
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


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


def _run_cluster(hosts: Dict[str, List[str]], tmp_path: Path, curve: bool) -> List[str]:
    """Start scheduler and workers on their hosts; run clients (authorized, then keyless) on theirs; their outputs."""
    port = free_tcp_address().rpartition(":")[2]
    keys = tmp_path / "keys"
    scheduler_args = [f"tcp://0.0.0.0:{port}", "-ma", f"ipc://{tmp_path}/monitor"]
    worker_args = ["-n", "2", f"tcp://{SUBNET}.1.1:{port}"]
    client_keys = ["", ""]
    if curve:
        for name in ("scheduler", "worker", "client", "stranger"):
            generate_key_pair(str(keys), name)
        (keys / "authorized").mkdir()
        for name in ("worker", "client"):
            shutil.copy(keys / f"{name}.key", keys / "authorized")
        scheduler_args += ["--curve-secret-key", str(keys / "scheduler.key_secret")]
        scheduler_args += ["--curve-authorized-keys", str(keys / "authorized")]
        worker_args += ["--curve-secret-key", str(keys / "worker.key_secret")]
        worker_args += ["--curve-server-key", str(keys / "scheduler.key")]
        client_keys = [str(keys / "client.key_secret"), str(keys / "scheduler.key")]
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
    # with CurveZMQ: put through the scheduler
    assert served == f"ok {sum(n * n for n in range(500))} 42 300000 300000"
    assert "data relay" not in scheduler_log
    assert keyless.startswith("refused TimeoutError")  # a peer without CURVE learns nothing from the scheduler
    assert stranger.startswith("refused AuthenticationError")
    assert "is not among the authorized keys" in scheduler_log and f"{SUBNET}.2.2" in scheduler_log
    assert "refused a connection to the scheduler address" in scheduler_log
    assert "without CurveZMQ" not in scheduler_log
