"""Installs bench/latency/rtt_tracer.py in every Python process started with SCALER_RTT_TRACE=DIR and this directory on
PYTHONPATH (bench/latency/rtt_trace.py sets both for the cluster it starts). Does nothing otherwise."""

import os

if os.environ.get("SCALER_RTT_TRACE"):
    import importlib.util

    _path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rtt_tracer.py")
    _spec = importlib.util.spec_from_file_location("rtt_tracer", _path)
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
    _module.install(os.environ["SCALER_RTT_TRACE"])
