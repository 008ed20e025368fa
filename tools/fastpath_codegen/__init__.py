"""Build tool: generates scaler/fastpath/_messages.py from scaler/protocol/scaler.capnp (CPython with pycapnp).

Run from the repository's root: ``python3 -m tools.fastpath_codegen.generate`` (``--check`` only compares). Not part
of the installed package: nothing in scaler/ imports it at run time.
"""
