"""The scheduler removes the ipc socket files it bound when it stops, and only those (scaler.io.ipc_files)."""

from __future__ import annotations

import os
import tempfile
from typing import Iterator

import pytest
import zmq

from scaler.io.ipc_files import BoundIpcFile


@pytest.fixture
def directory() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="scaler-ipc-") as path:  # short: ipc paths are limited to about 100 bytes
        yield path


@pytest.fixture
def context() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.term()


def bound(context: zmq.Context, address: str) -> zmq.Socket:
    socket = context.socket(zmq.PUB)
    socket.setsockopt(zmq.LINGER, 0)
    socket.bind(address)
    return socket


def test_the_file_it_bound_is_removed_after_close(context, directory) -> None:
    path = os.path.join(directory, "monitor")
    socket = bound(context, f"ipc://{path}")
    ipc_file = BoundIpcFile.after_bind(socket)
    socket.close()
    assert os.path.exists(path), "libzmq leaves the socket file behind: that is why this exists"
    assert ipc_file is not None and ipc_file.remove() is True
    assert not os.path.exists(path)
    assert ipc_file.remove() is False  # already gone: nothing to do


def test_a_path_bound_again_by_someone_else_stays(context, directory) -> None:
    path = os.path.join(directory, "monitor")
    first = bound(context, f"ipc://{path}")
    ipc_file = BoundIpcFile.after_bind(first)
    second = bound(context, f"ipc://{path}")  # libzmq unlinks the old file and makes a new one
    first.close()
    assert ipc_file is not None and ipc_file.remove() is False
    assert os.path.exists(path), "the second socket's file must stay"
    second.close()


def test_a_regular_file_put_at_the_path_stays(context, directory) -> None:
    path = os.path.join(directory, "monitor")
    socket = bound(context, f"ipc://{path}")
    ipc_file = BoundIpcFile.after_bind(socket)
    socket.close()
    os.unlink(path)
    with open(path, "w") as file:
        file.write("not ours")
    assert ipc_file is not None and ipc_file.remove() is False
    assert os.path.exists(path)


def test_tcp_and_abstract_addresses_have_no_file(context) -> None:
    socket = bound(context, "tcp://127.0.0.1:*")
    assert BoundIpcFile.after_bind(socket) is None
    socket.close()
    socket = bound(context, f"ipc://@scaler-test-{os.getpid()}")
    assert BoundIpcFile.after_bind(socket) is None
    socket.close()
