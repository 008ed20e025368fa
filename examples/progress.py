import time

import scaler
from scaler import Client


def work(value: int) -> int:
    time.sleep(0.01)
    return value


with Client(address="tcp://127.0.0.1:2345") as client:
    # a progress bar on stderr (or in the notebook), moved as results arrive
    results = client.map(work, [(i,) for i in range(500)], progress=True)

    # a bar for any futures: returns them once all are done
    futures = scaler.progress([client.submit(work, i) for i in range(100)])

    print(sum(results), sum(future.result() for future in futures))  # 124750 4950
