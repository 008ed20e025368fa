#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine (as root, or with sudo), then runs every test:
# the whole suite on CPython, and the protocol and scheduler suites again on PyPy, where the scheduler runs.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
packages=(pypy3 pypy3-venv pypy3-dev tmux chromium)
missing=()
for package in "${packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing Debian packages: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "== CPython environment (.venv)"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test,bench,uvloop]"

echo "== PyPy environment (.venv-pypy)"
[ -x .venv-pypy/bin/python ] || pypy3 -m venv .venv-pypy
.venv-pypy/bin/python -m pip install -q --upgrade pip
.venv-pypy/bin/python -m pip install -q -e ".[test]"

echo "== tests on CPython"
.venv/bin/python -m pytest -q -p no:cacheprovider tests "$@"

echo "== protocol and scheduler tests on PyPy"
.venv-pypy/bin/python -m pytest -q -p no:cacheprovider tests/protocol tests/scheduler "$@"
