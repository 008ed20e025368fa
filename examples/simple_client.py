import random

from scaler import Client, SchedulerClusterCombo


def calculate(sec: int):
    return sec * 1


def main():
    address = "tcp://127.0.0.1:2345"

    cluster = SchedulerClusterCombo(address=address, n_workers=4)

    tasks = [random.randint(0, 100) for _ in range(1000)]

    with Client(address=address) as client:
        # submit returns a concurrent.futures.Future at once; result() waits for the task
        futures = [client.submit(calculate, i) for i in tasks]
        results = [future.result() for future in futures]

    assert results == tasks
    print(f"{len(results)} results")  # 1000 results

    cluster.shutdown()


if __name__ == "__main__":
    main()
