# Each task process runs load() once, before its first task: scaler_cluster --preload preload_rates:load
RATES = {}


def load():
    RATES.update({"EUR": 1.08, "GBP": 1.27})  # in practice: read a file, query a database, load a model


def in_dollars(amount, currency):
    return round(amount * RATES[currency], 2)  # RATES as load() left it in this process
