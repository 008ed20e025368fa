import math

import joblib

import scaler.joblib  # noqa: F401  registers the "scaler" backend

with joblib.parallel_config(backend="scaler", address="tcp://127.0.0.1:2345"):
    # 10,000 small calls travel in a few dozen batches
    roots = joblib.Parallel(n_jobs=-1)(joblib.delayed(math.sqrt)(i) for i in range(10_000))

print(round(sum(roots), 2))  # 666616.46
