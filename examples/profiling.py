from scaler import Client


def calculate(sec: int):
    return sec * 1


with Client(address="tcp://127.0.0.1:2345") as client:
    fut = client.submit(calculate, 1, profiling=True)
    fut.result()

    info = fut.profiling_info()
    print(info.duration_us >= 0)  # True: how long the task ran, in microseconds
    print(info.peak_memory >= 0)  # True: peak memory growth while it ran, in bytes
