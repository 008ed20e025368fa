#!/usr/bin/env bash
# Installs Scaler into .venv on a fresh Debian machine with python3, then runs the main job: a local scheduler and
# workers computing 10,000 tasks through Client.map, then the README's nested-task and graph examples on it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
ensure_cpython_venv .venv ".[uvloop]"
.venv/bin/python examples/map_client.py
.venv/bin/python examples/local_cluster.py
