from scaler import Client, SchedulerClusterCombo

# needs uvloop, on CPython: pip install "scaler[uvloop]"
cluster = SchedulerClusterCombo(address="tcp://127.0.0.1:2345", event_loop="uvloop", n_workers=4)

with Client(address=cluster.get_address()) as client:
    print(client.submit(sum, [1, 2, 3]).result())  # 6

cluster.shutdown()
