"""Under PyPy, with SCALER_JIT_EVENTS=PATH and this directory on PYTHONPATH (bench/jit/jit_phases.py sets both for the
scheduler it starts): every loop, entry bridge and bridge the JIT compiles, and every trace it aborts, one line each
in PATH.<pid> with its time.monotonic(), PyPy's loop number and the code it starts in. Does nothing otherwise."""

import os
import sys

if os.environ.get("SCALER_JIT_EVENTS") and sys.implementation.name == "pypy":
    import time

    import pypyjit

    _out = open(f"{os.environ['SCALER_JIT_EVENTS']}.{os.getpid()}", "a", buffering=1)

    def _code(code, position) -> str:
        return f"{code.co_name} {os.path.basename(code.co_filename)}:{code.co_firstlineno} @{position}"

    def _where(info) -> str:
        """A loop's green key; for a bridge, the first place its trace passes (where the guard that failed was)."""
        if info.greenkey is not None:
            try:
                return _code(info.greenkey[0], info.greenkey[1])
            except (TypeError, AttributeError, IndexError):  # a builtin's loop: its key is a description
                return str(info.greenkey)
        for operation in info.operations:
            if getattr(operation, "name", "") == "debug_merge_point":
                try:
                    return _code(operation.pycode, operation.bytecode_no)
                except AttributeError:
                    return repr(operation)[:100]
        return "?"

    def _on_compile(info) -> None:
        _out.write(f"{time.monotonic():.6f}\t{info.type}\t{info.loop_no}\t{_where(info)}\n")

    def _on_abort(jitdriver_name, greenkey, reason, operations) -> None:
        _out.write(f"{time.monotonic():.6f}\tabort {reason}\t-\t{greenkey}\n")

    pypyjit.set_compile_hook(_on_compile)
    pypyjit.set_abort_hook(_on_abort)
