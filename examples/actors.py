from scaler import Client, SchedulerClusterCombo


class Counter:
    def __init__(self, start):
        self.value = start

    def add(self, amount):
        self.value += amount
        return self.value


cluster = SchedulerClusterCombo(address="tcp://127.0.0.1:2345", n_workers=2)

with Client(address=cluster.get_address()) as client:
    counter = client.actor(Counter, 10)  # made on a worker, kept there
    futures = [counter.add(1) for _ in range(5)]  # run one at a time, in this order
    print([future.result() for future in futures])  # [11, 12, 13, 14, 15]
    counter.close()  # freed once the calls made before have run

cluster.shutdown()
