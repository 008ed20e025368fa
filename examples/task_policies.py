import os
import tempfile
import time

from scaler import Client
from scaler.errors import TaskTimeoutError


def render(frame: int) -> str:
    return f"frame {frame} rendered"


def flaky(counter: str) -> int:
    """Fails on its first two calls (a file counts them), succeeds on the third."""
    calls = os.path.getsize(counter) + 1 if os.path.exists(counter) else 1
    with open(counter, "a") as file:
        file.write("x")
    if calls < 3:
        raise ConnectionError(f"call {calls}: the service is busy")
    return calls


with Client(address="tcp://127.0.0.1:2345") as client:
    # resources: runs only on workers of `scaler_cluster --resources gpu=1 ...`
    on_gpu = client.options(resources={"gpu": 1})
    print(on_gpu.map(render, [(1,), (2,)]))  # ['frame 1 rendered', 'frame 2 rendered']

    # priority: among queued tasks, higher runs first (default 0)
    urgent = client.options(priority=10).submit(render, 0)
    print(urgent.result())  # frame 0 rendered

    # retries: a task whose function raises runs again, here up to 2 more times
    with tempfile.TemporaryDirectory() as directory:  # the workers run on this host in this example
        print(client.options(retries=2).submit(flaky, os.path.join(directory, "calls")).result())  # 3

    # timeout: a task that runs longer is stopped (its process replaced) and raises TaskTimeoutError
    try:
        client.options(timeout_seconds=0.5).submit(time.sleep, 60).result()
    except TaskTimeoutError as error:
        print("timed out:", error)  # timed out: task ... ran longer than its timeout of 0.5 s: ...
