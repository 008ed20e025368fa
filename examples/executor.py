import concurrent.futures
import math

from scaler import Client


def digits_of_factorials(executor: concurrent.futures.Executor, numbers):
    # written for any Executor: ThreadPoolExecutor, ProcessPoolExecutor, or a Scaler cluster
    return list(executor.map(len, executor.map(str, executor.map(math.factorial, numbers))))


with Client(address="tcp://127.0.0.1:2345") as client:
    with client.executor() as executor:  # a concurrent.futures.Executor running on the cluster
        print(digits_of_factorials(executor, [10, 100, 1000]))  # [7, 158, 2568]

        future = executor.submit(pow, 2, 100)
        print(future.result())  # 1267650600228229401496703205376
