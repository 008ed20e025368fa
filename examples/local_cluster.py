from scaler import Client, SchedulerClusterCombo


def square(value: int):
    return value * value


cluster = SchedulerClusterCombo(address="tcp://127.0.0.1:2345", n_workers=4)

with Client(address=cluster.get_address()) as client:
    print(client.submit(square, 4).result())  # 16

cluster.shutdown()
