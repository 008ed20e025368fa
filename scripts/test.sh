#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine (as root, or with sudo), builds and checks the sdist and
# wheel, builds the documentation site strictly, then runs every test: the whole suite on CPython, and the protocol
# and scheduler suites and the data relay's tests again on PyPy, where the scheduler and its relay run. A suite that
# passes but leaves files in the temporary directories fails (scripts/leftovers.py). Extra arguments go to both pytest
# runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh

phase() { echo "== [${SECONDS}s] $*"; }  # how long each step took, for a run that nears its 30 minutes

packages=(pypy3 pypy3-venv pypy3-dev tmux chromium)
packages+=(slurm-wlm munge)  # tests/autoscale run a one-node Slurm cluster on this machine
apt_install "${packages[@]}"

ensure_cpython_venv .venv ".[test,bench,uvloop,ui,release,plot,docs]"  # plot: the soak test draws its PNG
# tests/deploy renders deploy/kubernetes with `kubectl kustomize` (offline); Debian's kubectl is too old for it
command -v kubectl >/dev/null || phase "no kubectl on PATH: tests/deploy skips the kustomize renderings"

# ruff and mypy before the builds and the tests: they fail in a minute, the rest takes twenty
phase "ruff check, ruff format --check, mypy (settings in pyproject.toml)"
.venv/bin/python -m pip install -q -e ".[lint]"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy

phase "sdist and wheel, built and checked as a release would be (scripts/check_dist.py: build, twine check)"
.venv/bin/python scripts/check_dist.py

phase "documentation site (mkdocs build --strict: a broken link, a missing page or anchor fails)"
site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$site" || { rm -rf "$site"; exit 1; }
rm -rf "$site"  # the built site is not kept: the check is that it builds

phase "PyPy environment (.venv-pypy)"
[ -x .venv-pypy/bin/python ] || pypy3 -m venv .venv-pypy
.venv-pypy/bin/python -m pip install -q --upgrade pip
.venv-pypy/bin/python -m pip install -q -e ".[test]"

phase "scaler_scheduler.pex and scaler_top.pex, for tests/packaging"
bash packaging/pex/build.sh

phase "Nuitka onefile scaler_scheduler and scaler_top, for tests/packaging (a few minutes)"
bash packaging/nuitka/build.sh

# scripts/leftovers.py runs each suite with a temporary directory of its own, and fails if files are left in it
phase "tests on CPython"
.venv/bin/python scripts/leftovers.py -- .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 tests "$@"

phase "protocol, scheduler and relay tests on PyPy"
.venv/bin/python scripts/leftovers.py -- \
    .venv-pypy/bin/python -m pytest -q -p no:cacheprovider tests/protocol tests/scheduler tests/io/test_relay.py "$@"
phase "all passed"
