"""The Slurm and autoscaling pages say what the code does: the sbatch script and the job script the slurm backend
writes are checked against the code itself (docs/reference/cli.md's option table is generated: tests/test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

from scaler import config
from scaler.autoscale.backends.base import WorkerCommand
from scaler.autoscale.backends.slurm import SlurmBackend
from scaler.testing.processes import ROOT

DOCS = Path(ROOT) / "docs" / "deployment"


def test_the_slurm_page_shows_the_pool_script_as_it_is() -> None:
    page = (DOCS / "slurm.md").read_text()
    block = re.search(r"<!-- example: deploy/slurm/scaler-pool.sbatch -->\n```bash\n(.*?)```", page, re.DOTALL)
    assert block is not None, "docs/deployment/slurm.md shows deploy/slurm/scaler-pool.sbatch in a marked bash block"
    assert block.group(1) == (Path(ROOT) / "deploy" / "slurm" / "scaler-pool.sbatch").read_text()


def test_the_job_script_shown_is_the_one_written() -> None:
    shown = re.search(r"```sh\n(#!/bin/sh\n# scaler_autoscale.*?)```", (DOCS / "autoscaling.md").read_text(), re.DOTALL)
    assert shown is not None
    retire = tuple(config.RETIRE_TIMEOUT.to_argv(config.RETIRE_TIMEOUT.default))  # what the autoscaler passes on
    command = WorkerCommand(("/path/to/python", "-m", "scaler.cluster"), "tcp://10.0.0.1:2345", 16, retire)
    assert shown.group(1) == SlurmBackend(command, 120.0, "scaler-workers").job_script()
