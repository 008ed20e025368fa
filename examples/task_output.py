import sys

from scaler import Client


def work(n: int) -> int:
    print(f"working on {n}")
    if n == 2:
        print(f"{n} is even and prime", file=sys.stderr)
    return n * n


with Client(address="tcp://127.0.0.1:2345", stream_output=True) as client:
    futures = [client.submit(work, n) for n in range(4)]
    # [work#0] working on 0, [work#1] working on 1... (and [work#2] 2 is even and prime on stderr)
    # result() returns once its task's lines are printed, so they all come before the total
    print(sum(future.result() for future in futures))  # 14
