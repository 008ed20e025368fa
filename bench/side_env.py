"""Make sure a virtual environment of another interpreter, with Scaler installed, exists at PATH.

    python bench/side_env.py PATH --python pypy3                   # a PyPy scheduler beside a CPython tox env
    python bench/side_env.py PATH --python python3.11 --extras test  # the CPython side beside a PyPy tox env

tox gives an environment one interpreter; a PyPy scheduler with CPython workers and client needs two. The tox
environments that mix them (e2e-pypy, bench, bench-all) build the other side with this on first use. PyPy comes from
apt: `pypy3 pypy3-venv pypy3-dev`.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="where the environment lives")
    parser.add_argument("--python", required=True, help="the interpreter to build it with, e.g. pypy3 or python3.11")
    parser.add_argument("--extras", default="", help="extras of scaler to install, e.g. test")
    parser.add_argument("--pip", nargs="*", default=[], help="further packages to install")
    args = parser.parse_args()
    python = args.path / "bin" / "python"
    if not python.exists():
        if shutil.which(args.python) is None:
            sys.exit(f"{args.python} not found (PyPy: apt-get install -y pypy3 pypy3-venv pypy3-dev)")
        subprocess.run([args.python, "-m", "venv", str(args.path)], check=True)
    requirement = f"{ROOT}[{args.extras}]" if args.extras else str(ROOT)
    # editable, so both sides run the same source; quick when it is installed already
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", requirement, *args.pip], check=True)


if __name__ == "__main__":
    main()
