"""Run a command and fail if it leaves files in the temporary directories: `python3 scripts/leftovers.py -- CMD...`.

The command runs with TMPDIR set to a fresh, empty directory, which must be empty again when it ends. Paths that do
not follow TMPDIR (the scheduler's default monitor address ipc:///tmp/{host}_{port}_monitor, tmux's /tmp/tmux-UID) are
caught as well:
- as root, where Linux allows it (and unless the command runs from a directory in /tmp), the command runs in a mount
  namespace of its own whose /tmp is that same fresh directory: whatever the run leaves anywhere in /tmp is found,
  and nothing another process on the machine does in the real /tmp can be blamed on the run;
- otherwise /tmp is compared before and after for the names the run's processes would use (no other process is
  expected to make those; on a machine shared with other Scaler runs, one of theirs could be reported).
pytest's own pytest-of-USER directory is left to pytest (tmp_path_retention_policy keeps failed tests' files only).
Exit status: the command's, or 3 if it passed but left files behind.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tempfile
from typing import List, Set

SYSTEM_TMP = "/tmp"
# what the run's processes could leave in /tmp when no private /tmp is possible
PATTERNS = ("*_monitor", "scaler*", "tmux-*/scaler*", ".org.chromium.*", "org.chromium.*", "onefile_*", "[0-9]*.[0-9]*")
PYTEST_OWN = "pytest-of-*"


def main(argv: List[str]) -> int:
    if not argv or argv[0] != "--" or len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    command = argv[1:]
    work = tempfile.mkdtemp(prefix="scaler-leftovers-", dir=SYSTEM_TMP)
    # the fresh directory stands for /tmp: tests may run tools as other users, and some (munged) refuse a socket under
    # a directory that not everyone may enter; mkdtemp makes the one above it 0700
    os.chmod(work, 0o755)
    fresh = os.path.join(work, "tmp")
    os.mkdir(fresh)
    os.chmod(fresh, 0o1777)
    try:
        if _private_tmp_works(fresh):
            print(f"leftovers: the run gets a private /tmp ({fresh}), which must be empty afterwards")
            code = _run([*_private_tmp_prefix(fresh), *command], {"TMPDIR": SYSTEM_TMP})
            left = _entries(fresh)
            where = "/tmp"
        else:
            print(f"leftovers: TMPDIR={fresh}, which must be empty afterwards; /tmp is checked for {PATTERNS}")
            before = _matching(SYSTEM_TMP)
            code = _run(command, {"TMPDIR": fresh})
            left = [os.path.join(fresh, name) for name in _entries(fresh)]
            left += [os.path.join(SYSTEM_TMP, name) for name in sorted(_matching(SYSTEM_TMP) - before)]
            where = "the temporary directories"
        if left:
            print(f"leftovers: the run left {len(left)} file(s) in {where}:", file=sys.stderr)
            for path in left[:50]:
                print(f"    {path}", file=sys.stderr)
            return code or 3
        print("leftovers: none")
        return code
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(command: List[str], env: dict) -> int:
    try:
        return subprocess.call(command, env={**os.environ, **env})
    except KeyboardInterrupt:
        return 130


def _private_tmp_prefix(fresh: str) -> List[str]:
    # private propagation: the bind mount stays inside the namespace; the run's children all inherit it
    script = 'mount --bind "$0" /tmp && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, fresh]


def _private_tmp_works(fresh: str) -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    if os.path.realpath(os.getcwd()).startswith(SYSTEM_TMP + "/"):
        return False  # a checkout in /tmp would vanish behind the private /tmp
    probe = [*_private_tmp_prefix(fresh), "true"]
    return subprocess.run(probe, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def _entries(directory: str) -> List[str]:
    """Everything under `directory` except pytest's own directory (whose failed-test files pytest keeps on purpose)."""
    found = []
    for root, directories, files in os.walk(directory):
        relative = os.path.relpath(root, directory)
        if relative == ".":
            directories[:] = [name for name in directories if not fnmatch.fnmatch(name, PYTEST_OWN)]
        names = [*files, *(name for name in directories if not os.listdir(os.path.join(root, name)))]
        found += [os.path.normpath(os.path.join(relative, name)) for name in names]
    return sorted(found)


def _matching(directory: str) -> Set[str]:
    found = set()
    for pattern in PATTERNS:
        head, _, tail = pattern.partition("/")
        for name in fnmatch.filter(os.listdir(directory), head):
            inside = os.path.join(directory, name)
            if not tail:
                found.add(name)
            elif os.path.isdir(inside) and os.access(inside, os.R_OK):
                found |= {f"{name}/{inner}" for inner in fnmatch.filter(os.listdir(inside), tail)}
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
