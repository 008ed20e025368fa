"""README's "Running on a cluster" says what the code does: the sbatch script, the autoscaler's options and the job
script the slurm backend writes are checked against the code itself."""

from __future__ import annotations

import re
from pathlib import Path

from scaler import config
from scaler.autoscale.backends.base import WorkerCommand
from scaler.autoscale.backends.slurm import SlurmBackend
from scaler.autoscale.cli import build_parser
from scaler.testing.processes import ROOT

README = (Path(ROOT) / "README.md").read_text()


def _section() -> str:
    start = README.index("## Running on a cluster")
    return README[start : README.index("\n## ", start + 1)]


def test_readme_shows_the_pool_script_as_it_is() -> None:
    block = re.search(r"<!-- example: deploy/slurm/scaler-pool.sbatch -->\n```bash\n(.*?)```", README, re.DOTALL)
    assert block is not None, "README shows deploy/slurm/scaler-pool.sbatch in a marked bash block"
    assert block.group(1) == (Path(ROOT) / "deploy" / "slurm" / "scaler-pool.sbatch").read_text()


def test_the_options_table_lists_exactly_the_options() -> None:
    table = re.search(r"\| `scaler_autoscale` option \|.*?\n\n", _section(), re.DOTALL)
    assert table is not None
    documented = set(re.findall(r"`(--[a-z-]+)`", table.group(0)))
    actual = {
        option
        for action in build_parser()._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }
    assert documented == actual


def test_the_job_script_shown_is_the_one_written() -> None:
    shown = re.search(r"```sh\n(#!/bin/sh\n# scaler_autoscale.*?)```", _section(), re.DOTALL)
    assert shown is not None
    retire = tuple(config.RETIRE_TIMEOUT.to_argv(config.RETIRE_TIMEOUT.default))  # what the autoscaler passes on
    command = WorkerCommand(("/path/to/python", "-m", "scaler.cluster"), "tcp://10.0.0.1:2345", 16, retire)
    assert shown.group(1) == SlurmBackend(command, 120.0, "scaler-workers").job_script()
