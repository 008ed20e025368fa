from preload_rates import in_dollars

from scaler import Client, SchedulerClusterCombo

cluster = SchedulerClusterCombo(address="tcp://127.0.0.1:2345", n_workers=2, preload="preload_rates:load")

with Client(address=cluster.get_address()) as client:
    print(client.submit(in_dollars, 100, "EUR").result())  # 108.0

cluster.shutdown()
