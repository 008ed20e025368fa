"""dist/scaler_scheduler and dist/scaler_top (packaging/nuitka/build.sh): onefile binaries that need no Python.

The serving tests run the binaries in a mount namespace where every Python installation on this machine and the
checkout itself are hidden behind empty tmpfs mounts, so they prove the binaries carry everything they import.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from typing import Iterator, List, NamedTuple

import pytest

from scaler.testing.processes import ROOT, wait_for
from tests.packaging.serving import (
    LISTENING,
    START_TIMEOUT_SECONDS,
    TASKS,
    CommandProcess,
    built,
    check_tasks_run_on_cluster,
    check_top_once,
    new_addresses,
    running_cluster,
    scheduler_arguments,
    top_once_arguments,
)

BUILD = "bash packaging/nuitka/build.sh"
BARE_ENVIRONMENT = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # no VIRTUAL_ENV, PYTHONPATH nor pyenv shims


def python_installations() -> List[str]:
    """Every place a Python could be imported from here: ours, pyenv's, Debian's; all hidden from the binaries."""
    candidates = {ROOT, sys.base_prefix, os.path.realpath(sys.base_prefix)}
    candidates.update(glob.glob("/usr/lib/python3*") + glob.glob("/usr/local/lib/python3*"))
    candidates.update(glob.glob("/usr/lib/pypy3*"))
    return sorted(path for path in candidates if os.path.isdir(path) and path != "/")


def without_python(command: List[str]) -> List[str]:
    """`command` run where python_installations() are empty directories (needs root for `unshare --mount`)."""
    mounts = [f"mount -t tmpfs scaler-hidden {shlex.quote(path)}" for path in python_installations()]
    return ["unshare", "--mount", "sh", "-c", " && ".join([*mounts, "exec " + shlex.join(command)])]


@pytest.fixture(scope="module")
def hiding() -> None:
    if shutil.which("unshare") is None:
        pytest.skip("cannot hide the Python installations: `unshare` (util-linux) is not installed")
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot hide the Python installations, `unshare --mount` failed: {probe.stderr.strip()}")
    # The hiding itself must work, or the serving tests below would prove nothing: no interpreter may start behind it.
    interpreters = {sys.executable, getattr(sys, "_base_executable", sys.executable)}
    interpreters.update(path for path in ("/usr/bin/python3", "/usr/bin/pypy3") if os.path.exists(path))
    for python in interpreters:
        started = subprocess.run(without_python([python, "-c", "pass"]), capture_output=True, timeout=30)
        assert started.returncode != 0, f"{python} still runs where Python installations should be hidden"


def copied(tmp_path, *names: str) -> str:
    """Copies of dist/scaler_scheduler under `names`, outside the checkout; returns their directory."""
    source = built("scaler_scheduler", BUILD)
    directory = tmp_path / "bin"
    directory.mkdir(exist_ok=True)
    for name in names:
        shutil.copy2(source, directory / name)
    return str(directory)


@pytest.mark.parametrize("name", ["scaler_scheduler", "scaler_top"])
def test_help_from_another_directory(name: str, tmp_path) -> None:
    binary = built(name, BUILD)
    result = subprocess.run(
        [binary, "-h"],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_SECONDS,
        cwd=tmp_path,
        env=BARE_ENVIRONMENT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {name}"), result.stdout


def test_unknown_program_name_is_refused(tmp_path) -> None:
    binary = os.path.join(copied(tmp_path, "scaler_something"), "scaler_something")
    result = subprocess.run([binary, "-h"], capture_output=True, text=True, timeout=START_TIMEOUT_SECONDS)
    assert result.returncode != 0
    assert "scaler_something: unknown program name" in result.stderr
    assert "scaler_scheduler, scaler_top" in result.stderr


class Served(NamedTuple):
    bin_directory: str
    monitor_address: str
    work_directory: str


@pytest.fixture(scope="module")
def served(hiding, tmp_path_factory) -> Iterator[Served]:
    """The scheduler binary, with no Python visible, serving a real cluster that ran a real client's tasks."""
    tmp_path = tmp_path_factory.mktemp("nuitka")
    bin_directory = copied(tmp_path, "scaler_scheduler", "scaler_top")
    address, monitor_address = new_addresses(tmp_path)
    # uvloop, so that the test also proves the binary carries it (the shell imports it only for this option).
    arguments = [*scheduler_arguments(address, monitor_address), "--event-loop", "uvloop"]
    command = [os.path.join(bin_directory, "scaler_scheduler"), *arguments]
    scheduler = CommandProcess(
        without_python(command), str(tmp_path / "scheduler.log"), cwd=str(tmp_path), env=BARE_ENVIRONMENT
    )
    try:
        scheduler.wait_for_output(LISTENING, START_TIMEOUT_SECONDS)
        with running_cluster(address, tmp_path) as cluster:
            check_tasks_run_on_cluster(address, cluster)
            yield Served(bin_directory, monitor_address, str(tmp_path))
    finally:
        assert scheduler.stop() == 0, scheduler.output()
    assert "use event loop: uvloop" in scheduler.output()


def test_top_once_shows_the_served_tasks(served: Served) -> None:
    top = os.path.join(served.bin_directory, "scaler_top")
    command = without_python([top, *top_once_arguments(served.monitor_address)])
    check_top_once(command, cwd=served.work_directory, env=BARE_ENVIRONMENT)


def test_top_screen_in_a_terminal(served: Served) -> None:
    """The curses screen, in a real terminal (tmux): it shows the workers and quits on `q`."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (scripts/test.sh installs it)")
    socket_directory = tempfile.mkdtemp(prefix="scaler-tmux-")  # a server of its own; tmux leaves its socket behind
    tmux = ["tmux", "-S", os.path.join(socket_directory, "socket")]
    top = without_python([os.path.join(served.bin_directory, "scaler_top"), served.monitor_address])
    try:
        subprocess.run([*tmux, "new-session", "-d", "-x", "160", "-y", "40", shlex.join(top)], check=True, timeout=30)

        def screen() -> str:
            return subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True, timeout=30).stdout

        wait_for(lambda: "Total 2 worker(s)" in screen(), START_TIMEOUT_SECONDS, "scaler_top's screen in tmux")
        assert "success" in screen() and f"{TASKS + 1}" in screen(), screen()
        subprocess.run([*tmux, "send-keys", "q"], check=True, timeout=30)

        def session_ended() -> bool:
            return subprocess.run([*tmux, "has-session"], capture_output=True, timeout=30).returncode != 0

        wait_for(session_ended, 30, "scaler_top to quit on q")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)
        shutil.rmtree(socket_directory, ignore_errors=True)
