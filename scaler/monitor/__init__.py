"""Internal: monitoring a running scheduler: `scaler_top` in a terminal and `scaler_ui` in a browser.

Both read the SchedulerStatus the scheduler publishes on its monitor address (subscriber.py) and show the same
numbers, formatted once in model.py. top.py and subscriber.py use only pyzmq and the standard library, so `scaler_top`
runs on PyPy too; the web UI (ui/) needs the `ui` extra.
"""
