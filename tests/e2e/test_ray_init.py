"""scaler.compat.ray's init() without an address starts a local cluster, as Ray does, and shutdown() stops it."""

from __future__ import annotations

import sys

import cloudpickle
import psutil
import pytest

import scaler.compat.ray as ray
from scaler.compat.ray.exceptions import ObjectLostError
from scaler.testing.processes import wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def triple(x):
    return 3 * x


def test_init_without_an_address_starts_a_local_cluster_and_shutdown_stops_it() -> None:
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    context = ray.init(num_cpus=1)
    try:
        assert ray.is_initialized() and context.started_local_cluster
        assert context.address.startswith("tcp://127.0.0.1:")
        assert ray.get(ray.remote(triple).remote(5), timeout=60) == 15
        with pytest.raises(RuntimeError, match="twice"):
            ray.init()
        assert ray.init(ignore_reinit_error=True) == context
        started = {child.pid for child in psutil.Process().children(recursive=True)} - before
        assert started  # the scheduler and the worker
    finally:
        ray.shutdown()
    assert not ray.is_initialized()
    wait_for(lambda: not any(psutil.pid_exists(pid) for pid in started), 20, "the local cluster's processes to end")
    ray.shutdown()  # again: nothing to do


def test_init_refuses_what_it_cannot_do() -> None:
    with pytest.raises(NotImplementedError, match="runtime_env"):
        ray.init(runtime_env={"pip": ["requests"]})
    with pytest.raises(ValueError, match="auto"):
        ray.init(address="auto")
    assert not ray.is_initialized()


def test_the_first_remote_call_without_init_starts_a_local_cluster() -> None:
    """As in Ray: a program that never calls init() gets one on its first remote call."""
    assert not ray.is_initialized()
    try:
        assert ray.get(ray.remote(triple).remote(2), timeout=60) == 6
        assert ray.is_initialized()
    finally:
        ray.shutdown()


def test_a_put_of_an_earlier_session_is_an_object_lost_error() -> None:
    ray.init(num_cpus=1)
    try:
        earlier = ray.put(5)
    finally:
        ray.shutdown()
    ray.init(num_cpus=1)
    try:
        with pytest.raises(ObjectLostError):
            ray.get(ray.remote(triple).remote(earlier), timeout=60)
    finally:
        ray.shutdown()
