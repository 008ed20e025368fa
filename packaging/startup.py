"""Start-up times of the packaged scheduler, beside the same scheduler run from the project's venvs.

    .venv/bin/python packaging/startup.py [--repeat 7]

For each way of running scaler_scheduler, the median wall time of `-h` and of a real start up to its
"Scheduler: listening on" log line. The Nuitka binaries and the pex files come from packaging/*/build.sh; a missing one
is left out of the table. Pex files unpack into ~/.cache/pex on their first run: that cost is measured separately, on
an empty PEX_ROOT. The machine's other load shows in these numbers: compare rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIST = os.path.join(ROOT, "dist")
LISTENING = b"Scheduler: listening on"
# The bare interpreter, not a venv with scaler installed: the pex must carry scaler itself.
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def free_tcp_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


def time_help(command: List[str], env: Dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([*command, "-h"], check=True, stdout=subprocess.DEVNULL, env=env, cwd=tempfile.gettempdir())
    return time.perf_counter() - start


def time_to_listening(command: List[str], env: Dict[str, str], timeout: float = 120.0) -> float:
    with tempfile.TemporaryDirectory() as directory:
        monitor = "ipc://" + os.path.join(directory, "monitor")
        start = time.perf_counter()
        process = subprocess.Popen(
            [*command, free_tcp_address(), "--monitor-address", monitor],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=directory,
        )
        try:
            assert process.stdout is not None
            output = b""
            for line in iter(process.stdout.readline, b""):  # ends when the process exits
                output += line
                if LISTENING in line:
                    return time.perf_counter() - start
                if time.perf_counter() - start > timeout:
                    break
            raise RuntimeError(f"{command} did not start:\n{output.decode(errors='replace')}")
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def variants() -> Dict[str, List[str]]:
    found: Dict[str, List[str]] = {}
    venv_python = os.path.join(ROOT, ".venv", "bin", "python")
    venv_pypy = os.path.join(ROOT, ".venv-pypy", "bin", "python")
    pypy = shutil.which("pypy3")
    scheduler_pex = os.path.join(DIST, "scaler_scheduler.pex")
    nuitka_binary = os.path.join(DIST, "scaler_scheduler")
    if os.path.exists(venv_python):
        found["venv CPython 3.11: python -m scaler.scheduler"] = [venv_python, "-m", "scaler.scheduler"]
    if os.path.exists(venv_pypy):
        found["venv PyPy 3.9: pypy3 -m scaler.scheduler"] = [venv_pypy, "-m", "scaler.scheduler"]
    if os.path.exists(nuitka_binary):
        found["Nuitka onefile: dist/scaler_scheduler"] = [nuitka_binary]
    if os.path.exists(scheduler_pex):
        found["pex on CPython 3.11: python3.11 dist/scaler_scheduler.pex"] = [BASE_PYTHON, scheduler_pex]
        if pypy:
            found["pex on PyPy 3.9: pypy3 dist/scaler_scheduler.pex"] = [pypy, scheduler_pex]
    return found


def top_variants() -> Dict[str, List[str]]:
    found: Dict[str, List[str]] = {}
    pypy = shutil.which("pypy3")
    top_pex = os.path.join(DIST, "scaler_top.pex")
    if os.path.exists(os.path.join(DIST, "scaler_top")):
        found["Nuitka onefile: dist/scaler_top"] = [os.path.join(DIST, "scaler_top")]
    if os.path.exists(top_pex):
        found["pex on CPython 3.11: python3.11 dist/scaler_top.pex"] = [BASE_PYTHON, top_pex]
        if pypy:
            found["pex on PyPy 3.9: pypy3 dist/scaler_top.pex"] = [pypy, top_pex]
    return found


def first_pex_runs() -> Dict[str, List[str]]:
    """Pex variants only: measured once each on an empty PEX_ROOT, where the pex unpacks its wheels first."""
    return {name: command for name, command in variants().items() if command[-1].endswith(".pex")}


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs per measurement; the median is reported")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}

    names = ("scaler_scheduler", "scaler_top", "scaler_scheduler.pex", "scaler_top.pex")
    for path in (os.path.join(DIST, name) for name in names):
        if os.path.exists(path):
            print(f"{os.path.relpath(path, ROOT)}: {os.path.getsize(path) / 1e6:.1f} MB")
    print(f"\n{'scaler_scheduler':88} {'-h (s)':>8} {'listening (s)':>14}")
    for name, command in variants().items():
        time_help(command, env)  # a warm-up run: every later run finds the same caches filled
        helps = [time_help(command, env) for _ in range(args.repeat)]
        starts = [time_to_listening(command, env) for _ in range(args.repeat)]
        print(f"{name:88} {statistics.median(helps):8.2f} {statistics.median(starts):14.2f}")
    for name, command in first_pex_runs().items():
        with tempfile.TemporaryDirectory() as pex_root:
            first = time_to_listening(command, {**env, "PEX_ROOT": pex_root})
        print(f"{name + ', first run (empty PEX_ROOT)':88} {'':8} {first:14.2f}")
    print(f"\n{'scaler_top':88} {'-h (s)':>8}")
    for name, command in top_variants().items():
        time_help(command, env)
        helps = [time_help(command, env) for _ in range(args.repeat)]
        print(f"{name:88} {statistics.median(helps):8.2f}")


if __name__ == "__main__":
    main()
