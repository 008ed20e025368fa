#!/usr/bin/env bash
# Builds dist/scaler_scheduler.pex and dist/scaler_top.pex: one zip file per tool holding wheels for both CPython 3.11
# and PyPy 3.9, so either interpreter runs it (`python3.11 dist/scaler_scheduler.pex ...`, `pypy3 dist/...pex ...`).
# The PyPy half holds only the project's own dependencies (pyzmq, cffi, psutil<7.1.3 built from source, cloudpickle):
# uvloop is an extra that its marker limits to CPython, and pycapnp is a test extra, so neither is in it.
# Needs pypy3 and pypy3-dev (psutil compiles for PyPy), as scripts/test.sh installs.
set -euo pipefail
cd "$(dirname "$0")/../.."

build_venv="${BUILD_VENV:-.venv-build}"
wheel_dir="build/pex"
# The interpreters themselves, not a venv or a pyenv shim: pex records each one it resolves for.
base_executable='import sys; print(getattr(sys, "_base_executable", sys.executable))'
cpython="$("${CPYTHON:-python3.11}" -c "$base_executable")"
pypy="$("${PYPY:-pypy3}" -c "$base_executable")"

[ -x "$build_venv/bin/python" ] || python3 -m venv "$build_venv"
"$build_venv/bin/python" -m pip install -q "pex>=2.20,<3" "setuptools>=77" wheel  # as pyproject's build-system

# One wheel of this tree for both interpreters and both tools: pex would otherwise build the project once per
# interpreter and tool, each time in a fresh isolated environment, which costs minutes under PyPy.
rm -rf "$wheel_dir"
"$build_venv/bin/python" -m pip wheel -q --no-deps --no-build-isolation --wheel-dir "$wheel_dir" .
wheel="$(ls "$wheel_dir"/scaler-*.whl)"

# --venv: the first run installs the pex into a venv under ~/.cache/pex (PEX_ROOT) and later runs start that venv
# directly, skipping pex's own bootstrap: `-h` under PyPy takes about a third of the time it takes from a zipapp pex.
pex=("$build_venv/bin/pex" --python "$cpython" --python "$pypy" --python-shebang "/usr/bin/env python3" --venv)
mkdir -p dist
echo "== dist/scaler_scheduler.pex (for $cpython and $pypy)"
# With uvloop, for `--event-loop uvloop` on CPython: the extra's marker keeps it out of the PyPy half.
"${pex[@]}" --console-script scaler_scheduler -o dist/scaler_scheduler.pex "scaler[uvloop] @ file://$PWD/$wheel"
echo "== dist/scaler_top.pex"
# scaler_top needs a subset of the scheduler's distributions: take them from its pex instead of resolving again.
"${pex[@]}" --pex-repository dist/scaler_scheduler.pex --console-script scaler_top -o dist/scaler_top.pex \
    "scaler @ file://$PWD/$wheel"
ls -l dist/scaler_scheduler.pex dist/scaler_top.pex
