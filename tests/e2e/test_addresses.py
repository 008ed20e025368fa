"""Addresses whose host does not exist fail at once, naming the host, in the client and in every CLI that connects;
a host that resolves but has no scheduler yet is still waited for, as a scheduler may start later, and a worker
waiting for one says so."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from scaler import Client
from scaler.testing.processes import ROOT, ScalerProcess, free_tcp_address

BIN = Path(sys.executable).parent
NO_SUCH_HOST = "no-such-host.invalid"  # RFC 6761: never resolves
BAD_ADDRESS = f"tcp://{NO_SUCH_HOST}:2345"
AT_ONCE_SECONDS = 5.0  # each command below would wait 20 s or more for the host before


def test_a_client_fails_at_once_on_a_host_that_does_not_exist() -> None:
    start = time.monotonic()
    with pytest.raises(ValueError, match=f"cannot resolve host '{NO_SUCH_HOST}' of {BAD_ADDRESS}"):
        Client(BAD_ADDRESS, timeout_seconds=20)
    assert time.monotonic() - start < AT_ONCE_SECONDS


def test_a_client_still_waits_for_a_host_that_resolves_and_has_no_scheduler_yet() -> None:
    address = free_tcp_address().replace("127.0.0.1", "localhost")
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="no answer from the scheduler"):
        Client(address, timeout_seconds=1)
    assert time.monotonic() - start >= 1


@pytest.mark.parametrize(
    "command",
    [
        ["scaler_cluster", "-n", "1", "--death-timeout", "20"],
        ["scaler_top", "--once", "--timeout", "20"],
        ["scaler_ui", "--port", free_tcp_address().rpartition(":")[2], "--timeout", "20"],
    ],
    ids=lambda command: command[0],
)
def test_every_cli_that_connects_fails_at_once_on_a_host_that_does_not_exist(command: list) -> None:
    start = time.monotonic()
    completed = subprocess.run(
        [str(BIN / command[0]), *command[1:], BAD_ADDRESS], capture_output=True, text=True, timeout=30, cwd=ROOT
    )
    assert completed.returncode != 0 and time.monotonic() - start < AT_ONCE_SECONDS + 5, completed  # + start-up
    assert f"cannot resolve host '{NO_SUCH_HOST}'" in completed.stderr, completed.stderr


def test_a_worker_waiting_for_its_scheduler_says_so(tmp_path: Path) -> None:
    address = free_tcp_address()  # nobody listens there (yet)
    cluster = ScalerProcess("scaler.cluster", ["-n", "1", address], str(tmp_path / "cluster.log"))
    try:
        cluster.wait_for_output(f"Worker[0]: still waiting for the scheduler at {address} after 5s", timeout=30)
        assert "(exiting in 295s if none answers)" in cluster.output()
    finally:
        cluster.stop()
