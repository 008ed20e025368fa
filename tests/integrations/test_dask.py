"""Dask collections computed on a real Scaler cluster give what dask's own threaded scheduler gives."""

from __future__ import annotations

import dask
import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from scaler import Client


def on_both(client: Client, *collections):
    """(computed on Scaler, computed by dask's threaded scheduler)."""
    return dask.compute(*collections, scheduler=client.get), dask.compute(*collections, scheduler="threads")


def test_delayed_with_shared_nodes_containers_and_keywords(client: Client) -> None:
    @dask.delayed
    def combine(left, right, scale=1):
        return (left + right) * scale

    base = dask.delayed(lambda: 10)()
    left = combine(base, 1)
    right = combine(base, 2, scale=3)  # base is computed once and used twice
    top = combine(left, right, scale=dask.delayed(int)("2"))
    ours, threads = on_both(client, top, [left, {"right": right}], (base, 7))
    assert ours == threads == (2 * (11 + 36), [11, {"right": 36}], (10, 7))


def test_array_reductions_and_a_matrix_product(client: Client) -> None:
    x = da.random.RandomState(42).random_sample((600, 400), chunks=(100, 80))
    ours, threads = on_both(client, x.sum(), x.mean(axis=0), (x @ x.T)[:50, :50], x[::7, 3])
    for scaler_value, dask_value in zip(ours, threads):
        np.testing.assert_allclose(scaler_value, dask_value, rtol=1e-12)
    assert ours[2].shape == (50, 50)


def test_array_persist_then_compute(client: Client) -> None:
    x = da.arange(10_000, chunks=1_000) ** 2
    (persisted,) = dask.persist(x, scheduler=client.get)  # results come back into this process, as dask's schedulers do
    assert len(persisted.dask) == persisted.npartitions
    np.testing.assert_array_equal(persisted.compute(scheduler="sync"), np.arange(10_000) ** 2)


def test_array_written_by_workers_through_dask_s_compute_as_if_collection(client: Client, tmp_path) -> None:
    # to_npy_stack hands the scheduler a plain dict and a flat list of keys, and ignores what comes back
    x = da.arange(1_000, chunks=100) * 3
    with dask.config.set(scheduler=client.get):
        da.to_npy_stack(str(tmp_path), x)  # the workers write the files: same host here
    np.testing.assert_array_equal(da.from_npy_stack(str(tmp_path)).compute(scheduler="sync"), np.arange(1_000) * 3)


def test_bag_map_filter_fold_and_frequencies(client: Client) -> None:
    words = db.from_sequence(["spam", "eggs", "spam", "ham", "spam", "eggs"] * 50, npartitions=7)
    lengths = words.map(len).filter(lambda n: n > 3)
    ours, threads = on_both(
        client,
        lengths.sum(),
        words.frequencies(sort=True),
        words.foldby(len, lambda acc, w: acc + 1, 0),
        words.distinct(),
    )
    assert ours[0] == threads[0] == 4 * 250
    assert ours[1] == threads[1] == [("spam", 150), ("eggs", 100), ("ham", 50)]
    assert sorted(ours[2]) == sorted(threads[2]) and sorted(ours[3]) == sorted(threads[3]) == ["eggs", "ham", "spam"]


def test_dataframe_groupby_merge_and_map_partitions(client: Client) -> None:
    # off Dask distributed, dask shuffles through partd files on the local disk of whichever process runs the task,
    # which only works on one host (and leaves them in /tmp): on a cluster the shuffle must go through tasks
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        _groupby_merge_and_map_partitions(client)


def _groupby_merge_and_map_partitions(client: Client) -> None:
    pandas_frame = pd.DataFrame({"key": np.arange(1000) % 7, "value": np.arange(1000, dtype="float64")})
    frame = dd.from_pandas(pandas_frame, npartitions=5)
    names = dd.from_pandas(pd.DataFrame({"key": range(7), "name": list("abcdefg")}), npartitions=2)
    grouped = frame.groupby("key").value.agg(["sum", "mean", "count"])
    merged = frame.merge(names, on="key").groupby("name").value.max()
    doubled = frame.map_partitions(lambda part: part.assign(double=part.value * 2)).double.sum()
    ours, threads = on_both(client, grouped, merged, doubled, frame.value.describe())
    pd.testing.assert_frame_equal(ours[0].sort_index(), threads[0].sort_index())
    pd.testing.assert_series_equal(ours[1].sort_index(), threads[1].sort_index())
    assert ours[2] == threads[2] == 2 * pandas_frame.value.sum()
    pd.testing.assert_series_equal(ours[3], threads[3])


def test_scaler_as_dask_default_scheduler(client: Client) -> None:
    with dask.config.set(scheduler=client.get):
        assert da.ones(100, chunks=10).sum().compute() == 100
        assert db.from_sequence(range(10), npartitions=3).sum().compute() == 45


def test_a_failing_task_raises_its_exception_from_compute(client: Client) -> None:
    @dask.delayed
    def check(value):
        if value == 3:
            raise ValueError(f"bad value {value}")
        return value

    with pytest.raises(ValueError, match="bad value 3"):
        dask.compute([check(n) for n in range(6)], scheduler=client.get)
