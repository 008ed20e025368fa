"""Client(stream_output=True) against a real cluster: the client runs in a subprocess and we read its stdout and
stderr, as a user's terminal would show them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator, Tuple

import pytest

from scaler.testing.processes import ROOT
from tests.e2e.test_examples import _cli_cluster

pytestmark = pytest.mark.timeout(120)

LIMIT = 4000  # the workers' --task-output-limit, small so the burst stays small

CLIENT_SCRIPT = """
import sys
import time

from scaler import Client


def chatty(name):
    print(f"{name} line 1")
    print(f"{name} warning", file=sys.stderr)
    print(f"{name} line 2")
    print(f"{name} unfinished", end="")
    return name.upper()


def burst(count):
    for index in range(count):
        print(f"burst {index:04d}".ljust(99, "."))
    return count


def child(n):
    print(f"child {n} here")
    return n


def parent(client):
    print("parent before")
    total = sum(client.submit(child, n).result() for n in range(2))
    print("parent after")
    return total


with Client(address=sys.argv[1], stream_output=sys.argv[2] == "on") as client:
    print("RESULT", client.submit(chatty, "first").result(), flush=True)
    print("RESULT", client.submit(burst, 100).result(), flush=True)
    print("RESULT", client.submit(parent, client).result(), flush=True)
"""


@pytest.fixture(scope="module")
def address(tmp_path_factory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("task-output")
    yield from _cli_cluster(directory, protected=True, cluster_options=("--task-output-limit", str(LIMIT)))


def run_client(address: str, tmp_path: Path, streaming: bool, merged: bool = False) -> Tuple[str, str]:
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent(CLIENT_SCRIPT))
    completed = subprocess.run(
        [sys.executable, str(script), address, "on" if streaming else "off"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merged else subprocess.PIPE,
        text=True,
        timeout=90,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert completed.returncode == 0, f"{completed.stdout}\n{completed.stderr}"
    return completed.stdout, completed.stderr or ""


def test_each_line_is_marked_on_its_stream_and_a_burst_is_cut_at_the_limit(address, tmp_path):
    stdout, stderr = run_client(address, tmp_path, streaming=True)
    lines = stdout.splitlines()
    assert lines[:4] == [
        "[chatty#0] first line 1",
        "[chatty#0] first line 2",
        "[chatty#0] first unfinished",
        "RESULT FIRST",
    ]
    assert "[chatty#0] first warning" in stderr.splitlines()
    burst = [line for line in lines if line.startswith("[burst#1] ")]
    # 4000 bytes: 40 lines of 100 bytes, the newline included; the other 60 lines are dropped, counted on stderr
    assert burst == [f"[burst#1] burst {index:04d}".ljust(109, ".") for index in range(40)]
    assert "[burst#1] [... 6000 bytes of output dropped]" in stderr.splitlines()
    assert lines.index(burst[-1]) < lines.index("RESULT 100")


def test_a_childs_lines_come_once_inside_its_parents(address, tmp_path):
    stdout, _ = run_client(address, tmp_path, streaming=True)
    lines = stdout.splitlines()
    after = lines[lines.index("RESULT 100") + 1 :]
    # a child's number is its place among the tasks of the nested client's connection, shared by the worker's tasks
    children = [re.fullmatch(r"\[parent#2\] \[child#\d+\] (child \d here)", line) for line in after[1:3]]
    assert [match.group(1) for match in children if match] == ["child 0 here", "child 1 here"], after
    assert [after[0], *after[3:]] == ["[parent#2] parent before", "[parent#2] parent after", "RESULT 1"]


def test_every_line_a_task_wrote_precedes_its_result_on_both_streams(address, tmp_path):
    merged, _ = run_client(address, tmp_path, streaming=True, merged=True)
    lines = merged.splitlines()
    for line in ("[chatty#0] first line 2", "[chatty#0] first warning", "[chatty#0] first unfinished"):
        assert lines.index(line) < lines.index("RESULT FIRST")
    assert lines.index("[burst#1] [... 6000 bytes of output dropped]") < lines.index("RESULT 100")


def test_without_stream_output_nothing_of_the_tasks_appears(address, tmp_path):
    stdout, stderr = run_client(address, tmp_path, streaming=False)
    assert stdout.splitlines() == ["RESULT FIRST", "RESULT 100", "RESULT 1"]
    assert stderr == ""
