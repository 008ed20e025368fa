from scaler import Client


def add(a, b):
    return a + b


with Client(address="tcp://127.0.0.1:2345") as client:
    # send_object(obj, name=None): the object travels once, tasks get it through the reference
    ref = client.send_object([1, 2, 3, 4, 5], name="large_object")

    fut = client.submit(add, ref, [6])
    print(fut.result())  # [1, 2, 3, 4, 5, 6]

    # this will not work, scaler doesn't do deep resolving: the task would receive [ref], not [[1, 2, 3, 4, 5]]
    # fut = client.submit(add, [ref], [6])
