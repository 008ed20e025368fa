#!/usr/bin/env bash
# Builds dist/scaler_scheduler.pex and dist/scaler_top.pex: one zip file per tool holding wheels for both CPython 3.11
# and PyPy 3.9, so either interpreter runs it (`python3.11 dist/scaler_scheduler.pex ...`, `pypy3 dist/...pex ...`).
# The PyPy half resolves only the project's own dependencies (pyzmq, psutil<7.1.3 built from source, cloudpickle):
# uvloop is an extra limited to CPython by its marker and pycapnp is a test extra, so neither is in it.
# Needs pypy3 and pypy3-dev (psutil compiles for PyPy), as scripts/test.sh installs.
set -euo pipefail
cd "$(dirname "$0")/../.."

build_venv="${BUILD_VENV:-.venv-build}"
# The real executables, not pyenv shims or venvs: pex records each interpreter it resolves for.
cpython="$("${CPYTHON:-python3.11}" -c 'import sys; print(sys.executable)')"
pypy="$("${PYPY:-pypy3}" -c 'import sys; print(sys.executable)')"

[ -x "$build_venv/bin/python" ] || python3 -m venv "$build_venv"
"$build_venv/bin/python" -m pip install -q "pex>=2.20,<3"

mkdir -p dist
for tool in scaler_scheduler scaler_top; do
    requirement="."
    # uvloop only for CPython, by the extra's marker: `--event-loop uvloop` then works from the pex too.
    [ "$tool" = scaler_scheduler ] && requirement=".[uvloop]"
    echo "== dist/$tool.pex (for $cpython and $pypy)"
    "$build_venv/bin/pex" "$requirement" \
        --python "$cpython" --python "$pypy" \
        --console-script "$tool" \
        --python-shebang "/usr/bin/env python3" \
        --output-file "dist/$tool.pex"
done
ls -l dist/*.pex
