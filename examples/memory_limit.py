from scaler import Client, SchedulerClusterCombo
from scaler.errors import MemoryLimitError


def allocate(megabytes: int) -> int:
    return len(b"\x01" * (megabytes * 1_000_000))


cluster = SchedulerClusterCombo(address="tcp://127.0.0.1:2345", n_workers=1, memory_limit="400MB")

with Client(address=cluster.get_address()) as client:
    try:
        client.submit(allocate, 1000).result()
    except MemoryLimitError as error:  # also a MemoryError
        print("stopped:", error.limit_bytes, error.peak_bytes > 0)
    print(client.submit(allocate, 10).result())  # the worker goes on: 10000000

cluster.shutdown()
