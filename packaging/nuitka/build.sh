#!/usr/bin/env bash
# Builds the single-file binaries dist/scaler_scheduler and dist/scaler_top with Nuitka (CPython, onefile).
# One compile of packaging/nuitka/scaler_onefile.py serves both: the binary runs the CLI named by its own file name.
# The build tools live in their own venv (.venv-build, or $BUILD_VENV) so the project's venvs stay clean.
# Needs a C compiler, patchelf (installed here with apt when missing) and the Python headers / libpython of python3.
set -euo pipefail
cd "$(dirname "$0")/../.."

python="${PYTHON:-python3}"
build_venv="${BUILD_VENV:-.venv-build}"
work_dir="build/nuitka"

if ! command -v patchelf >/dev/null; then
    echo "== installing patchelf (Nuitka needs it for standalone binaries on Linux)"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq patchelf >/dev/null
fi

echo "== build venv ($build_venv)"
[ -x "$build_venv/bin/python" ] || "$python" -m venv "$build_venv"
"$build_venv/bin/python" -m pip install -q "nuitka>=2.4,<5" zstandard ordered-set
# Nuitka compiles what the build interpreter imports: scaler (editable, so always this tree) and its dependencies.
# It follows the imports of packaging/nuitka/scaler_onefile.py, the late ones inside functions included (zmq, uvloop,
# curses): the parts of scaler that neither CLI imports are kept out explicitly, so a stray import fails loudly.
"$build_venv/bin/python" -m pip install -q -e ".[uvloop]"

# Link libpython statically when the interpreter ships it (pyenv's does): one file less in the payload, 5 MB smaller.
# Nuitka's own "auto" picks it only for interpreters it recognises, which a venv made from a tox env's is not.
static_libpython=no
"$build_venv/bin/python" -c 'import os, sysconfig as c; exit(not os.path.isfile(os.path.join(
    c.get_config_var("LIBPL") or "", c.get_config_var("LIBRARY") or "-")))' && static_libpython=yes

echo "== compiling (takes minutes; static libpython: $static_libpython)"
start=$(date +%s)
"$build_venv/bin/python" -m nuitka \
    --mode=onefile \
    --assume-yes-for-downloads \
    --jobs="${NUITKA_JOBS:-$(nproc)}" \
    --static-libpython="$static_libpython" \
    --nofollow-import-to=scaler.client --nofollow-import-to=scaler.worker --nofollow-import-to=scaler.cluster \
    --nofollow-import-to=scaler.monitor.ui --nofollow-import-to=cloudpickle --nofollow-import-to=capnp \
    --output-dir="$work_dir" \
    --output-filename=scaler_onefile \
    --remove-output \
    packaging/nuitka/scaler_onefile.py

mkdir -p dist
for name in scaler_scheduler scaler_top; do
    cp "$work_dir/scaler_onefile" "dist/$name"
done
echo "== built in $(($(date +%s) - start))s: $(ls -l dist/scaler_scheduler | awk '{print $5}') bytes each"
ls -l dist/scaler_scheduler dist/scaler_top
