"""TCP keepalive on every ZeroMQ TCP socket: the options on real sockets, the settings of every process on its real
connections (as the kernel reports them through `ss`), and probes that close a connection whose path is gone."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from typing import Dict, List, Tuple

import pytest
import zmq

from scaler import Client
from scaler.io.sockets import (
    DEFAULT_KEEPALIVE,
    TcpKeepalive,
    create_dealer,
    create_publisher,
    create_router,
    create_subscriber,
)
from scaler.monitor import top
from scaler.monitor.subscriber import StatusSubscriber
from scaler.monitor.ui import app
from scaler.testing.processes import ROOT, ScalerProcess, free_tcp_address

OPTIONS = (zmq.TCP_KEEPALIVE, zmq.TCP_KEEPALIVE_IDLE, zmq.TCP_KEEPALIVE_INTVL, zmq.TCP_KEEPALIVE_CNT)


def _options(sock: zmq.Socket) -> Tuple[int, ...]:
    return tuple(sock.getsockopt(option) for option in OPTIONS)


def test_every_socket_kind_gets_the_options() -> None:
    assert DEFAULT_KEEPALIVE == TcpKeepalive(True, 60, 10, 6)
    context = zmq.Context()
    custom = TcpKeepalive(True, 7, 3, 4)
    events = zmq.EVENT_DISCONNECTED
    try:
        any_port, nobody = "tcp://127.0.0.1:*", "tcp://127.0.0.1:9"
        sockets = [
            (create_router(context, any_port), create_router(context, any_port, keepalive=custom)),
            (create_publisher(context, any_port), create_publisher(context, any_port, None, custom)),
            (
                create_dealer(context, nobody, b"d", events)[0],
                create_dealer(context, nobody, b"e", events, None, custom)[0],
            ),
            (create_subscriber(context, nobody), create_subscriber(context, nobody, keepalive=custom)),
        ]
        for default, customized in sockets:
            assert _options(default) == (1, 60, 10, 6)
            assert _options(customized) == (1, 7, 3, 4)
        off, _ = create_dealer(context, "tcp://127.0.0.1:9", b"f", events, None, TcpKeepalive(False))
        assert off.getsockopt(zmq.TCP_KEEPALIVE) == 0
    finally:
        context.destroy(linger=0)  # the dealers' monitors too


def test_client_keywords_are_checked_and_monitor_options_parsed() -> None:
    with pytest.raises(ValueError, match="tcp_keepalive_idle_seconds must be >= 1"):
        Client("tcp://127.0.0.1:9", tcp_keepalive_idle_seconds=0)
    with pytest.raises(TypeError, match="tcp_keepalive must be a bool"):
        Client("tcp://127.0.0.1:9", tcp_keepalive=1)
    for parser in (top.build_parser(), app.build_parser()):
        args = parser.parse_args(["tcp://127.0.0.1:9", "--tcp-keepalive-idle", "45", "--tcp-keepalive-count", "2"])
        assert TcpKeepalive.of(args) == TcpKeepalive(True, 45, 10, 2)
        assert TcpKeepalive.of(parser.parse_args(["tcp://127.0.0.1:9", "--no-tcp-keepalive"])).enabled is False


def _keepalive_timers(pid: int) -> List[Tuple[int, int, float]]:
    """(local port, peer port, seconds until the next probe) of the established TCP connections of process `pid`
    that have a keepalive timer running, from the kernel (`ss -tnpo`)."""
    output = subprocess.run(["ss", "-Htnpo", "state", "established"], capture_output=True, text=True, timeout=10)
    timers = []
    for line in output.stdout.splitlines():
        if f"pid={pid}," not in line:
            continue
        match = re.search(r":(\d+)\s+\S+:(\d+)\s.*timer:\(keepalive,(?:(\d+)min)?(?:(\d+)sec)?(?:(\d+)ms)?", line)
        if match:
            minutes, seconds, milliseconds = (int(group or 0) for group in match.groups()[2:])
            timers.append((int(match.group(1)), int(match.group(2)), 60 * minutes + seconds + milliseconds / 1000))
    return timers


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs iproute2's ss")
def test_each_process_probes_its_connections_as_its_settings_say(tmp_path) -> None:
    """Scheduler (idle 50 s), worker (40 s), client (30 s) and monitor (20 s): the kernel's keepalive timer of each
    connection, as `ss` shows it, counts down from the idle time of the process that owns that end."""
    address, monitor = free_tcp_address(), free_tcp_address()
    port, monitor_port = int(address.rsplit(":", 1)[1]), int(monitor.rsplit(":", 1)[1])
    scheduler = ScalerProcess(
        "scaler.scheduler", [address, "-ma", monitor, "--tcp-keepalive-idle", "50"], str(tmp_path / "scheduler.log")
    )
    cluster = ScalerProcess(
        "scaler.cluster", ["-n", "1", "--tcp-keepalive-idle", "40", address], str(tmp_path / "cluster.log")
    )
    subscriber = None
    try:
        scheduler.wait_for_output("Scheduler: listening on")
        cluster.wait_for_output("Worker[0]: connected")
        (agent,) = [child for child in cluster.descendants() if child.ppid() == cluster.pid]  # the worker agent
        with Client(address, tcp_keepalive_idle_seconds=30) as client:
            assert client.submit(abs, -1).result(timeout=20) == 1
            subscriber = StatusSubscriber(monitor, 10, keepalive=TcpKeepalive(True, 20, 10, 6))
            assert subscriber.receive(wait_seconds=10) is not None
            expected: Dict[str, Tuple[int, int]] = {
                "scheduler, to the worker": (scheduler.pid, 50),
                "scheduler, to the client": (scheduler.pid, 50),
                "scheduler, to the monitor": (scheduler.pid, 50),
                "worker": (agent.pid, 40),
                "client": (os.getpid(), 30),
                "monitor": (os.getpid(), 20),
            }
            seen: Dict[str, float] = {}
            deadline = time.monotonic() + 20
            while len(seen) < len(expected) and time.monotonic() < deadline:
                _look(seen, scheduler.pid, agent.pid, port, monitor_port)
                time.sleep(0.2)
    finally:
        if subscriber is not None:
            subscriber.close()
        cluster.stop()
        scheduler.stop()
    assert set(seen) == set(expected), f"no keepalive timer seen for {set(expected) - set(seen)}: {seen}"
    for what, (_, idle) in expected.items():
        assert idle - 10 < seen[what] <= idle, f"{what}: next probe in {seen[what]} s, idle time {idle} s"


def _look(seen: Dict[str, float], scheduler_pid: int, agent_pid: int, port: int, monitor_port: int) -> None:
    """Records the timer of each connection of interest once it shows one (between two heartbeats it does)."""
    agent_ports = {local for local, peer, _ in _keepalive_timers(agent_pid) if peer == port}
    for local, peer, left in _keepalive_timers(scheduler_pid):
        if local == monitor_port:
            seen.setdefault("scheduler, to the monitor", left)
        elif local == port:
            seen.setdefault("scheduler, to the worker" if peer in agent_ports else "scheduler, to the client", left)
    for _, peer, left in _keepalive_timers(agent_pid):
        if peer == port:
            seen.setdefault("worker", left)
    for _, peer, left in _keepalive_timers(os.getpid()):
        if peer == port:
            seen.setdefault("client", left)
        elif peer == monitor_port:
            seen.setdefault("monitor", left)


_PROBE_SCRIPT = """
import sys, time, zmq
from zmq.utils.monitor import recv_monitor_message
from scaler.io.sockets import TcpKeepalive, create_dealer, create_router
context = zmq.Context()
watched, kept = {}, []
for name, keepalive in (("on", TcpKeepalive(True, 1, 1, 2)), ("off", TcpKeepalive(False))):
    router = create_router(context, "tcp://127.0.0.1:*", keepalive=keepalive)
    events = router.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    endpoint = router.getsockopt(zmq.LAST_ENDPOINT).decode()
    dealer = create_dealer(context, endpoint, name.encode(), zmq.EVENT_DISCONNECTED, keepalive=TcpKeepalive(False))[0]
    dealer.send(b"hello")
    assert router.recv_multipart() == [name.encode(), b"hello"]
    watched[events] = name
    kept += [router, dealer]
print("connected", flush=True)
sys.stdin.readline()
started = time.monotonic()
poller = zmq.Poller()
for events in watched:
    poller.register(events, zmq.POLLIN)
until = started + 12  # then, once the first closed, 3 s more for the other to close too, as it should not
while time.monotonic() < until:
    for events, _ in poller.poll(100):
        recv_monitor_message(events)
        print(f"closed {watched[events]} after {time.monotonic() - started:.1f}", flush=True)
        until = min(until, time.monotonic() + 3)
print("end", flush=True)
"""


@pytest.mark.skipif(shutil.which("ip") is None or os.geteuid() != 0, reason="network namespaces need root and ip")
def test_probes_close_a_connection_whose_path_is_gone() -> None:
    """Two idle connections in a network namespace of their own, the accepting side of one with keepalive (1 s idle,
    1 s interval, 2 probes), the other without; then the namespace's only link goes down, so that nothing is
    answered. The kernel's probes close the first within about 1 + 2 x 1 s; the second stays open."""
    namespace = f"scalerka{os.getpid() % 100000}"
    try:
        subprocess.run(["ip", "netns", "add", namespace], check=True, capture_output=True, timeout=10)
    except subprocess.CalledProcessError as error:
        pytest.skip(f"cannot create network namespaces here: {error.stderr.decode().strip()}")
    try:
        subprocess.run(["ip", "-n", namespace, "link", "set", "lo", "up"], check=True, timeout=10)
        command = ["ip", "netns", "exec", namespace, sys.executable, "-c", textwrap.dedent(_PROBE_SCRIPT)]
        probe = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            assert probe.stdout.readline() == "connected\n"
            subprocess.run(["ip", "-n", namespace, "link", "set", "lo", "down"], check=True, timeout=10)
            probe.stdin.write("go\n")
            probe.stdin.flush()
            output, _ = probe.communicate(timeout=30)
        finally:
            probe.kill()
            probe.wait(10)
    finally:
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=10)
    closed = re.findall(r"closed (\w+) after ([\d.]+)", output)
    assert [name for name, _ in closed] == ["on"], output
    assert 2.0 <= float(closed[0][1]) <= 8.0, output
