#!/usr/bin/env bash
# Installs Scaler, with tqdm for its progress bar, into .venv on a fresh Debian machine with python3, then runs the
# main job (scripts/demo.py): a local scheduler and one worker per core estimate pi from 20 million random points in
# 10,000 tasks, with a progress bar and a summary of tasks, seconds and tasks per second. Arguments go to demo.py.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
# setuptools warns about editable installs on every run: not news for someone trying Scaler
PYTHONWARNINGS=ignore ensure_cpython_venv .venv ".[uvloop,progress]"
.venv/bin/python scripts/demo.py "$@"
