import random

from scaler import Client, SchedulerClusterCombo


def calculate(sec: int):
    return sec * 1


def main():
    address = "tcp://127.0.0.1:2345"

    cluster = SchedulerClusterCombo(address=address, n_workers=4)

    tasks = [random.randint(0, 100) for _ in range(10000)]

    with Client(address=address) as client:
        # one call, one serialization of `calculate`, results in order
        results = client.map(calculate, [(i,) for i in tasks])

    assert results == tasks
    print(f"{len(results)} results, in order")  # 10000 results, in order

    cluster.shutdown()


if __name__ == "__main__":
    main()
