"""CurveZMQ: keys, the ZAP decision, and refusals end to end on real sockets."""

from __future__ import annotations

import logging
import pickle
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq
import zmq.auth
from zmq.utils import z85
from zmq.utils.monitor import recv_monitor_message

from scaler import Client, SchedulerClusterCombo
from scaler.client.connection import Connection
from scaler.errors import AuthenticationError
from scaler.io.curve import answer_zap_request, generate_key_pair
from scaler.io.curve_keys import load_peer_keys, load_server_keys, raw_key, z85_decode
from scaler.io.sockets import create_dealer
from scaler.protocol import Goodbye
from scaler.scheduler.settings import SchedulerSettings
from scaler.testing.curve_files import (
    client_key_options,
    make_key_files,
    peer_key_options,
    scheduler_key_options,
    until_it_takes_nothing,
)
from scaler.testing.processes import ScalerProcess, free_tcp_address, wait_for
from scaler.worker.core import EXIT_REFUSED
from scaler.worker.outbox import Outbox
from scaler.worker.settings import WorkerSettings

BIN = Path(sys.executable).parent


def _zap_request(mechanism: bytes, *credentials: bytes) -> list:
    return [b"1.0", b"7", b"scaler", b"10.0.0.9", b"", mechanism, *credentials]


def test_zap_accepts_listed_keys_and_logs_a_refused_key_once(tmp_path: Path, caplog) -> None:
    public_file, _ = generate_key_pair(str(tmp_path), "alice")
    alice = load_peer_keys(str(tmp_path / "alice.key_secret"), public_file)
    raw_alice = z85.decode(alice.public_key)
    stranger = zmq.curve_keypair()[0]
    refusals: dict = {}
    accepted = answer_zap_request(_zap_request(b"CURVE", raw_alice), frozenset({alice.public_key}), refusals)
    assert accepted[:3] == [b"1.0", b"7", b"200"] and accepted[4] == alice.public_key
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            refused = answer_zap_request(_zap_request(b"CURVE", z85.decode(stranger)), frozenset(), refusals)
            assert refused[2] == b"400"
    logged = [r.getMessage() for r in caplog.records if "refused a connection" in r.getMessage()]
    assert len(logged) == 1 and stranger.decode() in logged[0] and "10.0.0.9" in logged[0]
    assert refusals == {stranger: 3}


def test_zap_refuses_other_mechanisms_and_malformed_requests() -> None:
    assert answer_zap_request(_zap_request(b"NULL"), frozenset(), {})[2] == b"400"
    assert answer_zap_request(_zap_request(b"PLAIN", b"user", b"pass"), frozenset(), {})[2] == b"400"
    assert answer_zap_request([b"0.9", b"1"], frozenset(), {})[2] == b"500"
    assert answer_zap_request([], frozenset(), {})[2] == b"500"


def test_key_files_are_checked_with_clear_errors(tmp_path: Path) -> None:
    public_file, secret_file = generate_key_pair(str(tmp_path), "scheduler")
    assert oct(Path(secret_file).stat().st_mode & 0o777) == "0o600"
    with pytest.raises(ValueError, match="exists already"):
        generate_key_pair(str(tmp_path), "scheduler")
    with pytest.raises(ValueError, match="both keys"):
        load_peer_keys(secret_file, None)
    with pytest.raises(ValueError, match="no secret key"):
        load_peer_keys(public_file, public_file)
    with pytest.raises(ValueError, match="does not exist"):
        load_peer_keys(str(tmp_path / "nope.key_secret"), public_file)
    (tmp_path / "junk.key").write_text("not a certificate")
    with pytest.raises(ValueError, match="not a CurveZMQ certificate"):
        load_peer_keys(secret_file, str(tmp_path / "junk.key"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="nobody could connect"):
        load_server_keys(secret_file, str(empty))
    with pytest.raises(ValueError, match="key file"):
        Client("tcp://127.0.0.1:1", curve_secret_key_file=str(tmp_path / "missing"), curve_server_key_file=public_file)


def test_key_files_are_read_as_pyzmq_reads_them_without_loading_zmq(tmp_path: Path) -> None:
    """curve_keys.py reads certificates itself, so that settings (and the cores holding them) need no zmq: it must read
    what zmq.auth reads, and decode Z85 as pyzmq does."""
    public_file, secret_file = generate_key_pair(str(tmp_path), "alice")
    generate_key_pair(str(tmp_path), "scheduler")
    keys = load_peer_keys(secret_file, str(tmp_path / "scheduler.key"))
    assert keys is not None
    assert (keys.public_key, keys.secret_key) == zmq.auth.load_certificate(secret_file)
    assert keys.server_key == zmq.auth.load_certificate(str(tmp_path / "scheduler.key"))[0]
    assert raw_key(keys.public_key) == z85.decode(keys.public_key) and len(raw_key(keys.public_key)) == 32
    assert raw_key(raw_key(keys.public_key)) == raw_key(keys.public_key)  # 32 bytes already: as they are
    for raw in (bytes(32), b"\xff" * 32, bytes(range(32))):
        assert z85_decode(z85.encode(raw)) == raw
    for not_z85 in (b"abcd", b"abc d", b"#####"):  # length, alphabet, a group over 2**32 - 1
        with pytest.raises(ValueError):
            z85_decode(not_z85)
    authorized = tmp_path / "authorized"
    authorized.mkdir()
    shutil.copy(public_file, authorized)
    server = load_server_keys(str(tmp_path / "scheduler.key_secret"), str(authorized))
    assert server is not None and server.authorized_keys == frozenset(zmq.auth.load_certificates(str(authorized)))
    (tmp_path / "half.key").write_text("curve\n    public-key\n")
    with pytest.raises(ValueError, match="not a CurveZMQ certificate"):
        load_peer_keys(secret_file, str(tmp_path / "half.key"))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; from scaler.io.curve_keys import load_peer_keys; "
            f"load_peer_keys({secret_file!r}, {public_file!r}); assert 'zmq' not in sys.modules",
        ],
        cwd=Path(__file__).resolve().parents[2],  # this tree's scaler first on sys.path
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_settings_reject_bad_key_files_when_made(tmp_path: Path) -> None:
    """The settings load their keys as they are made, so a wrong key file stops a scheduler or a cluster at start, in
    the caller, with the loader's message."""
    public_file, secret_file = generate_key_pair(str(tmp_path), "worker")
    (tmp_path / "junk.key").write_text("not a certificate")
    address = "tcp://127.0.0.1:1"
    with pytest.raises(ValueError, match="does not exist"):
        WorkerSettings(address, curve_secret_key_file=str(tmp_path / "nope"), curve_server_key_file=public_file)
    with pytest.raises(ValueError, match="not a CurveZMQ certificate"):
        WorkerSettings(address, curve_secret_key_file=secret_file, curve_server_key_file=str(tmp_path / "junk.key"))
    with pytest.raises(ValueError, match="both keys"):
        WorkerSettings(address, curve_secret_key_file=secret_file)
    with pytest.raises(ValueError, match="no secret key"):
        SchedulerSettings(address, curve_secret_key_file=public_file, curve_authorized_keys_dir=str(tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="nobody could connect"):
        SchedulerSettings(address, curve_secret_key_file=secret_file, curve_authorized_keys_dir=str(empty))
    settings = WorkerSettings(address, curve_secret_key_file=secret_file, curve_server_key_file=public_file)
    assert settings.curve_keys == load_peer_keys(secret_file, public_file)
    assert pickle.loads(pickle.dumps(settings)).curve_keys == settings.curve_keys  # a worker process loads them again


def test_keygen_cli_writes_pairs_and_never_overwrites(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(BIN / "scaler_keygen"), str(tmp_path), "a", "b"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.key", "a.key_secret", "b.key", "b.key_secret"]
    again = subprocess.run([str(BIN / "scaler_keygen"), str(tmp_path), "a"], capture_output=True, text=True, timeout=30)
    assert again.returncode == 1 and "not overwriting" in again.stderr
    assert subprocess.run([str(BIN / "scaler_keygen"), "-h"], capture_output=True, timeout=30).returncode == 0


def test_only_authorized_clients_are_served(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    log = tmp_path / "scheduler.log"
    make_key_files(keys, ["alice"], strangers=["mallory"], scheduler=False)  # the combo makes its own
    combo = SchedulerClusterCombo(n_workers=1, curve_keys_dir=str(keys), logging_level="INFO", logging_paths=[str(log)])
    try:
        server_key = combo.curve_server_key_file
        with Client(
            combo.get_address(), timeout_seconds=20,
            curve_secret_key_file=str(keys / "alice.key_secret"), curve_server_key_file=server_key,
        ) as alice:  # fmt: skip
            assert alice.map(abs, [(-1,), (-2,)]) == [1, 2]
        with pytest.raises(AuthenticationError, match="refused this client's CurveZMQ key"):
            Client(
                combo.get_address(), timeout_seconds=20,
                curve_secret_key_file=str(keys / "mallory.key_secret"), curve_server_key_file=server_key,
            )  # fmt: skip
        with pytest.raises(TimeoutError):
            Client(combo.get_address(), timeout_seconds=3)  # no keys at all
        wait_for(lambda: "is not among the authorized keys" in log.read_text(), 10, "the refusal of mallory's key")
        wait_for(lambda: "refused a connection to the scheduler address" in log.read_text(), 15, "the keyless refusal")
        assert log.read_text().count("client C|") == 2  # alice connected and left; nobody else got in
    finally:
        combo.shutdown()


def test_a_refusal_before_the_client_looked_still_fails_at_once(tmp_path: Path, monkeypatch) -> None:
    """libzmq tries a refused handshake once: a monitor attached after the connection started could miss its event,
    and the client wait for its whole timeout. Attaching the monitor takes a second here; the refusal comes first."""
    keys = tmp_path / "keys"
    make_key_files(keys, [], strangers=["mallory"], scheduler=False)
    attach = zmq.Socket.get_monitor_socket

    def slow_attach(self, *args, **kwargs):
        time.sleep(1.0)  # a client thread descheduled for that long: the handshake is over meanwhile
        return attach(self, *args, **kwargs)

    with SchedulerClusterCombo(n_workers=1, curve_keys_dir=str(keys), logging_level="WARNING") as combo:
        monkeypatch.setattr(zmq.Socket, "get_monitor_socket", slow_attach)
        _mallory_is_refused(combo, keys, timeout_seconds=20)


def _mallory_is_refused(combo: SchedulerClusterCombo, keys: Path, timeout_seconds: float) -> None:
    """A client with the key pair of mallory, a stranger, is refused: saying so, not at its timeout."""
    with pytest.raises(AuthenticationError, match="refused this client's CurveZMQ key"):
        Client(
            combo.get_address(), timeout_seconds=timeout_seconds,
            curve_secret_key_file=str(keys / "mallory.key_secret"),
            curve_server_key_file=combo.curve_server_key_file,
        )  # fmt: skip


def test_a_refusal_before_the_first_hello_fails_at_once_instead_of_blocking_it(tmp_path: Path, monkeypatch) -> None:
    """Once a handshake failed, ZeroMQ never connects that socket again and has nowhere to queue a message: a blocking
    send waits forever. A client whose IO thread gets to its first Hello after the refusal (a busy host) must still be
    told at once, and its thread end."""
    keys = tmp_path / "keys"
    make_key_files(keys, [], strangers=["mallory"], scheduler=False)
    hello = Connection.hello
    threads = []

    def late_hello(self):
        threads.append(threading.current_thread())
        until_it_takes_nothing(self._io._socket)  # the handshake is refused meanwhile
        return hello(self)

    with SchedulerClusterCombo(n_workers=1, curve_keys_dir=str(keys), logging_level="WARNING") as combo:
        monkeypatch.setattr(Connection, "hello", late_hello)
        started = time.monotonic()
        _mallory_is_refused(combo, keys, timeout_seconds=6)
        assert time.monotonic() - started < 5
        wait_for(lambda: not threads[0].is_alive(), 5, "the client's IO thread to end")


def test_a_scheduler_back_without_the_clients_key_fails_its_tasks_at_once(tmp_path: Path) -> None:
    """A refused handshake is final (ZeroMQ never tries that connection again): a client whose scheduler came back on
    its address without the client's key among the authorized ones fails its unfinished tasks, saying why, at once,
    instead of waiting out reconnect_seconds for a connection that cannot come."""
    keys = make_key_files(tmp_path / "keys", ["client", "worker"])
    address = free_tcp_address()
    arguments = [address, *scheduler_key_options(keys)]
    first = ScalerProcess("scaler.scheduler", arguments, str(tmp_path / "first.log"))
    try:
        first.wait_for_output("Scheduler: listening on")
        with Client(address, timeout_seconds=60, **client_key_options(keys, "client")) as client:
            future = client.submit(abs, -1)  # no worker: it waits
            first.popen.kill()
            first.popen.wait(10)
            (keys / "authorized" / "client.key").unlink()
            second = ScalerProcess("scaler.scheduler", arguments, str(tmp_path / "second.log"))
            try:
                second.wait_for_output("Scheduler: listening on")
                started = time.monotonic()
                with pytest.raises(AuthenticationError, match="refused this client's CurveZMQ key"):
                    future.result(timeout=30)
                assert time.monotonic() - started < 15
                assert "is not among the authorized keys" in second.output()
            finally:
                second.stop()
    finally:
        first.stop()


def test_a_refused_workers_outbox_drops_its_frame_instead_of_blocking(tmp_path: Path) -> None:
    """The worker's side of it: its agent sends what a turn gathered after reading its socket's events, and a refusal
    may come in between. The frame is dropped; the DISCONNECTED event, already queued, makes the agent connect anew."""
    keys = make_key_files(tmp_path / "keys", ["worker"], strangers=["mallory"])
    address = free_tcp_address()
    scheduler = ScalerProcess("scaler.scheduler", [address, *scheduler_key_options(keys)], str(tmp_path / "s.log"))
    context = zmq.Context()
    sender = None
    try:
        scheduler.wait_for_output("Scheduler: listening on")
        mallory = load_peer_keys(str(keys / "mallory.key_secret"), str(keys / "scheduler.key"))
        dealer, events = create_dealer(context, address, b"W|mallory", zmq.EVENT_DISCONNECTED, mallory)
        assert events.poll(10_000), "the refusal closes the connection"
        until_it_takes_nothing(dealer)
        outbox = Outbox(dealer)
        outbox.add(Goodbye(reason="anything", reconnect=False))
        sender = threading.Thread(target=outbox.flush, daemon=True)
        sender.start()
        sender.join(5)
        assert not sender.is_alive(), "a blocking send waits forever on a socket that never connects again"
        assert recv_monitor_message(events)["event"] == zmq.EVENT_DISCONNECTED
        dealer.disable_monitor()
        events.close(linger=0)
        dealer.close(linger=0)
    finally:
        if sender is None or not sender.is_alive():  # else its socket is in use: left to the process's end
            context.term()
        scheduler.stop()


def test_a_worker_with_a_refused_key_leaves_saying_why_instead_of_connecting_in_a_loop(tmp_path: Path) -> None:
    """libzmq never connects a refused socket again: a worker that connected anew after each refusal hammered the
    scheduler with handshakes (37,192 in a minute, here) and never told its user."""
    keys = make_key_files(tmp_path / "keys", ["worker"], strangers=["mallory"])
    address = free_tcp_address()
    scheduler = ScalerProcess("scaler.scheduler", [address, *scheduler_key_options(keys)], str(tmp_path / "s.log"))
    try:
        scheduler.wait_for_output("Scheduler: listening on")
        worker = ScalerProcess(
            "scaler.cluster", ["-n", "1", address, *peer_key_options(keys, "mallory")], str(tmp_path / "w.log")
        )
        try:
            assert worker.popen.wait(20) == EXIT_REFUSED
        finally:
            worker.stop()
        output = worker.output()
        assert "exiting: the scheduler refused this worker's CurveZMQ key" in output
        assert output.count("connecting to") <= 2, "gave up at the first refusal (or the second, at a reconnection)"
    finally:
        scheduler.stop()


def test_public_bind_without_curve_warns(tmp_path: Path) -> None:
    port = free_tcp_address().rpartition(":")[2]
    scheduler = ScalerProcess(
        "scaler.scheduler", [f"tcp://0.0.0.0:{port}", "-ma", f"ipc://{tmp_path}/m"], str(tmp_path / "s.log")
    )
    try:
        scheduler.wait_for_output("Scheduler: listening on")
        assert "reachable from other hosts without CurveZMQ" in scheduler.output()
    finally:
        scheduler.stop()


def test_monitors_need_an_authorized_key_too(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    make_key_files(keys, ["monitor"], scheduler=False)
    with SchedulerClusterCombo(n_workers=1, curve_keys_dir=str(keys), logging_level="WARNING") as combo:
        top = [str(BIN / "scaler_top"), combo.get_monitor_address(), "--once", "--timeout", "5"]
        key_options = peer_key_options(keys, "monitor")

        def keyed_top_sees_the_worker() -> bool:
            keyed = subprocess.run([*top, *key_options], capture_output=True, text=True, timeout=30)
            assert keyed.returncode == 0, keyed.stderr
            return "Total 1 worker(s)" in keyed.stdout

        wait_for(keyed_top_sees_the_worker, 30, "scaler_top with the monitor's key to show the worker")
        keyless = subprocess.run(top, capture_output=True, text=True, timeout=30)
        assert keyless.returncode == 1 and "no status" in keyless.stderr
