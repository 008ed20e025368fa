"""Ray's options as Scaler's task policies (scaler/compat/ray/options.py), as the docs' table says."""

from __future__ import annotations

import pytest

import scaler.compat.ray as ray
from scaler.client.options import UINT32_MAX
from scaler.compat.ray.options import check_options, scaler_policies


@pytest.mark.parametrize(
    "options, policies",
    [
        ({}, {}),
        ({"num_cpus": 1}, {}),  # what every worker offers: no resource nobody announces
        ({"num_cpus": 0}, {}),
        ({"num_cpus": 0.5}, {}),
        ({"num_cpus": 4}, {"resources": {"cpu": 4}}),
        ({"num_gpus": 1}, {"resources": {"gpu": 1}}),
        ({"num_gpus": 0}, {}),
        ({"memory": 2e9}, {"resources": {"memory": 2e9}}),
        ({"resources": {"license": 1}, "num_gpus": 2}, {"resources": {"gpu": 2, "license": 1}}),
        ({"max_retries": 5}, {}),  # worker deaths: the cluster's --task-retry-limit
        ({"max_retries": 5, "retry_exceptions": True}, {"retries": 5}),
        ({"retry_exceptions": True}, {"retries": 3}),  # Ray's default max_retries
        ({"max_retries": -1, "retry_exceptions": True}, {"retries": UINT32_MAX}),
        ({"name": "job", "scheduling_strategy": "SPREAD", "num_returns": 1}, {}),
    ],
)
def test_ray_options_map_onto_task_policies(options, policies) -> None:
    assert scaler_policies(check_options(options)) == policies


@pytest.mark.parametrize(
    "options, error",
    [
        ({"runtime_env": {"pip": ["x"]}}, NotImplementedError),
        ({"placement_group": object()}, NotImplementedError),
        ({"num_returns": 2}, NotImplementedError),
        ({"retry_exceptions": [ValueError]}, NotImplementedError),
        ({"num_cpu": 1}, TypeError),  # a misspelling is not silently ignored
    ],
)
def test_options_scaler_cannot_honour_raise(options, error) -> None:
    with pytest.raises(error):
        check_options(options)
    with pytest.raises(error):
        ray.remote(**options)(len)


def test_options_refine_a_remote_function() -> None:
    @ray.remote(num_gpus=1)
    def f():
        return 1

    refined = f.options(resources={"disk": 1})
    assert refined._policies == {"resources": {"gpu": 1, "disk": 1}}
    assert f._policies == {"resources": {"gpu": 1}}


def test_remote_takes_a_function_a_class_or_options() -> None:
    assert isinstance(ray.remote(len), ray.RemoteFunction)
    assert isinstance(ray.remote(num_cpus=1)(len), ray.RemoteFunction)

    class Counter:
        pass

    assert isinstance(ray.remote(Counter), ray.ActorClass)
    with pytest.raises(TypeError):
        ray.remote(len, len)
