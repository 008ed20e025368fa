import dask
import dask.array as da

from scaler import Client


@dask.delayed
def inc(value):
    return value + 1


with Client(address="tcp://127.0.0.1:2345") as client:
    # any dask collection: dask.array, dask.dataframe, dask.bag, dask.delayed
    x = da.arange(1_000_000, chunks=10_000)
    print(x.sum().compute(scheduler=client.get))  # 499999500000

    print(dask.compute(inc(1), [inc(2), inc(3)], scheduler=client.get))  # (2, [3, 4])

    # or make Scaler dask's scheduler for a whole block of code
    with dask.config.set(scheduler=client.get):
        print((x**2).mean().compute())  # 333332833333.5
