# Ray's core walkthrough (tasks, objects) and its first-timer tip on ray.wait, as Ray code: only the import differs
import time

import scaler.compat.ray as ray  # was: import ray

ray.init()  # no address: starts a scheduler and one worker per CPU on this machine, as Ray starts a local cluster


# Define the square task.
@ray.remote
def square(x):
    return x * x


# Launch four parallel square tasks.
futures = [square.remote(i) for i in range(4)]

# Retrieve results.
print(ray.get(futures))  # [0, 1, 4, 9]


# Put a large object once; tasks that take its reference read the object itself.
@ray.remote
def sum_matrix(matrix):
    return sum(sum(row) for row in matrix)


matrix_ref = ray.put([[1] * 1000 for _ in range(1000)])
print(ray.get(sum_matrix.remote(matrix_ref)))  # 1000000


# Pass references to other tasks: add waits for both squares on the worker, never in this program.
@ray.remote
def add(a, b):
    return a + b


print(ray.get(add.remote(square.remote(3), square.remote(4))))  # 25


# Process results as they finish, not in submission order.
@ray.remote
def do_some_work(x):
    time.sleep(x / 10)  # stands for real work of uneven length
    return x


refs = [do_some_work.remote(x) for x in range(4)]
finished = []
while refs:
    done, refs = ray.wait(refs, num_returns=1)
    finished.append(ray.get(done[0]))
print(sorted(finished))  # [0, 1, 2, 3]

ray.shutdown()
