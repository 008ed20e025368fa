"""Build the sdist and the wheel as a release would, and check them: `python scripts/check_dist.py`.

Fails when the build warns of something deprecated (a pyproject field setuptools will refuse one day), when
`twine check --strict` finds the metadata or README unfit for PyPI, when a file the package needs at run time (the
Cap'n Proto schema, scaler_ui's page, the py.typed marker) or a console script is missing from the wheel, or when the
wheel ships what is not the package (the code generator in tools/, the tests). Needs the `release` extra.
"""

from __future__ import annotations

import configparser
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from typing import List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "build", "dist-check")
SCRIPTS = ("scaler_scheduler", "scaler_cluster", "scaler_worker", "scaler_top", "scaler_keygen", "scaler_ui")


def main() -> int:
    shutil.rmtree(OUT, ignore_errors=True)
    build = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", OUT, ROOT],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    output = build.stdout + build.stderr
    if build.returncode != 0:
        print(output)
        return fail("the build failed")
    problems = list(dict.fromkeys(line.strip() for line in output.splitlines() if "eprecat" in line))
    (wheel,) = glob.glob(os.path.join(OUT, "*.whl"))
    (sdist,) = glob.glob(os.path.join(OUT, "*.tar.gz"))
    print(f"check_dist: built {os.path.basename(sdist)} and {os.path.basename(wheel)}")
    twine = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", sdist, wheel], text=True)
    if twine.returncode != 0:
        problems.append("twine check --strict failed (above)")
    problems += check_wheel(wheel) + check_sdist(sdist)
    if problems:
        return fail("\n    ".join(["the distributions have problems:", *problems]))
    print("check_dist: sdist and wheel are fine")
    return 0


def check_wheel(path: str) -> List[str]:
    problems = []
    with zipfile.ZipFile(path) as wheel:
        names = set(wheel.namelist())
        metadata_name = next(name for name in names if name.endswith(".dist-info/METADATA"))
        metadata = wheel.read(metadata_name).decode()
        entry_points = configparser.ConfigParser()
        entry_points.read_string(wheel.read(metadata_name.replace("METADATA", "entry_points.txt")).decode())
    needed = ["scaler/protocol/scaler.capnp", "scaler/fastpath/_messages.py", "scaler/py.typed"]
    needed += [os.path.relpath(file, ROOT) for file in glob.glob(os.path.join(ROOT, "scaler/monitor/ui/static/*"))]
    problems += [f"the wheel lacks {name}" for name in needed if name not in names]
    if not any(name.endswith(".dist-info/licenses/LICENSE") for name in names):
        problems.append("the wheel lacks the LICENSE file")
    if "License-Expression: Apache-2.0" not in metadata.splitlines():
        problems.append("the wheel's METADATA has no 'License-Expression: Apache-2.0'")
    scripts = set(entry_points["console_scripts"]) if entry_points.has_section("console_scripts") else set()
    problems += [f"the wheel lacks the console script {name}" for name in SCRIPTS if name not in scripts]
    problems += [f"the wheel ships {name}" for name in sorted(names) if name.startswith(("tools/", "tests/", "bench/"))]
    return problems


def check_sdist(path: str) -> List[str]:
    with tarfile.open(path) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    needed = ["pyproject.toml", "README.md", "LICENSE", "scaler/protocol/scaler.capnp"]
    needed += ["scaler/monitor/ui/static/index.html"]
    return [f"the sdist lacks {name}" for name in needed if name not in names]


def fail(message: str) -> int:
    print(f"check_dist: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
