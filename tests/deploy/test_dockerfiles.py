"""deploy/docker's Dockerfiles, checked without a Docker daemon (none can run here).

They are parsed by BuildKit's own parser (the `dockerfile` package wraps it), and what they rely on is checked
against the repository: the files they copy exist and pass .dockerignore, those files build a complete wheel, the
extras they install exist, the commands they run are what installing scaler provides, and the user and ports agree
with deploy/kubernetes. Not tested: pulling the base images, apt and pip inside them, and running the images.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, List, NamedTuple, Tuple

import dockerfile
import pytest

from scaler.testing.processes import ROOT
from tests.deploy.kube import base_objects, image_name, of_kind, only_container

DOCKER = Path(ROOT) / "deploy" / "docker"
IMAGES = {"scaler-scheduler": DOCKER / "Dockerfile.scheduler", "scaler-worker": DOCKER / "Dockerfile.worker"}
BASE_IMAGES = {"scaler-scheduler": "pypy:3.9", "scaler-worker": "python:3.11"}  # the interpreters the tests run on

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the deploy tests run on CPython 3.11
    tomllib = pytest.importorskip("tomli")

PYPROJECT = tomllib.loads((Path(ROOT) / "pyproject.toml").read_text())


class Stage(NamedTuple):
    name: str
    base: str
    commands: List[dockerfile.Command]


def stages(path: Path) -> List[Stage]:
    """The build stages with their FROM resolved against the ARG defaults declared before it."""
    args: Dict[str, str] = {}
    found: List[Stage] = []
    for command in dockerfile.parse_file(str(path)):
        if command.cmd == "ARG" and not found:
            name, _, default = command.value[0].partition("=")
            args[name] = default
        elif command.cmd == "FROM":
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], command.value[0])
            name = command.value[2] if len(command.value) == 3 and command.value[1].upper() == "AS" else ""
            found.append(Stage(name, base, []))
        else:
            found[-1].commands.append(command)
    return found


def final(path: Path) -> Stage:
    return stages(path)[-1]


def instruction(stage: Stage, cmd: str) -> dockerfile.Command:
    (command,) = [command for command in stage.commands if command.cmd == cmd]
    return command


def dockerignored(relative_path: str) -> bool:
    """Whether .dockerignore keeps `relative_path` out of the build context: Docker's rules (the last matching pattern
    decides, `!` re-includes, `**` spans directories, and a pattern matching a parent directory matches its files)."""
    excluded = False
    for line in (Path(ROOT) / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = "".join(
            ".*" if part == "**" else "[^/]*" if part == "*" else "[^/]" if part == "?" else re.escape(part)
            for part in re.split(r"(\*\*|\*|\?)", pattern)
        )
        parts = relative_path.split("/")
        prefixes = ["/".join(parts[: index + 1]) for index in range(len(parts))]
        if any(re.fullmatch(regex, prefix) for prefix in prefixes):
            excluded = not negate
    return excluded


def copied_from_context(path: Path) -> List[Tuple[List[str], str]]:
    """(sources, destination) of each COPY from the build context (not --from another stage)."""
    copies = []
    for stage in stages(path):
        for command in stage.commands:
            if command.cmd in ("COPY", "ADD") and not any(flag.startswith("--from=") for flag in command.flags):
                copies.append((list(command.value[:-1]), command.value[-1]))
    return copies


def pip_commands(path: Path) -> List[List[str]]:
    words = [
        shlex.split(command.value[0]) for stage in stages(path) for command in stage.commands if command.cmd == "RUN"
    ]
    pips = []
    for run in words:
        for start in [index for index, word in enumerate(run) if word == "pip"]:
            end = run.index("&&", start) if "&&" in run[start:] else len(run)
            pips.append(run[start:end])
    return pips


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_each_image_is_built_in_stages_on_its_interpreter(image: str):
    built = stages(IMAGES[image])
    assert len(built) == 2, "a build stage, and a runtime stage without compilers or sources"
    assert built[0].base == built[1].base, "the wheels are built for the interpreter that runs them"
    assert built[1].base.startswith(BASE_IMAGES[image]), built[1].base
    names = {stage.name for stage in built}
    for stage in built:
        for command in stage.commands:
            for flag in command.flags:
                if flag.startswith("--from="):
                    assert flag.split("=", 1)[1] in names, f"COPY {flag}: no such stage"
    runtime_pip = [pip for pip in pip_commands(IMAGES[image]) if pip[1] == "install"]
    assert runtime_pip and all("--no-index" in pip for pip in runtime_pip), "the runtime installs the built wheels only"


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_what_they_copy_is_in_the_build_context(image: str):
    for sources, _ in copied_from_context(IMAGES[image]):
        for source in sources:
            assert (Path(ROOT) / source).exists(), f"COPY {source}: not in the repository"
            assert not dockerignored(source), f"COPY {source}: .dockerignore keeps it out of the context"


def test_dockerignore_is_read_as_docker_reads_it():
    assert dockerignored(".venv/bin/python") and dockerignored("tests/test_readme.py")
    assert not dockerignored("scaler/scheduler/core.py") and not dockerignored("pyproject.toml")
    assert dockerignored("scaler/scheduler/__pycache__/core.cpython-311.pyc")


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_the_extras_they_install_exist(image: str):
    extras = PYPROJECT["project"]["optional-dependencies"]
    requirements = [word for pip in pip_commands(IMAGES[image]) for word in pip if re.match(r"^(\.|scaler)\[", word)]
    for requirement in requirements:
        for extra in re.search(r"\[(.*)\]", requirement).group(1).split(","):
            assert extra.strip() in extras, f"{requirement}: pyproject.toml has no extra {extra!r}"


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_their_default_command_is_what_scaler_installs(image: str):
    cmd = instruction(final(IMAGES[image]), "CMD")
    assert cmd.json, "exec form: the process gets SIGTERM itself, not a shell in front of it"
    program, *args = cmd.value
    if program in ("pypy3", "python"):
        assert args[0] == "-m"
        module_dir = Path(ROOT, *args[1].split("."))
        assert (module_dir / "__main__.py").exists(), f"python -m {args[1]}: no such module"
    else:
        assert program in PYPROJECT["project"]["scripts"], f"{program}: not a console script of scaler"


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_user_and_ports_agree_with_the_manifests(image: str):
    runtime = final(IMAGES[image])
    user = instruction(runtime, "USER").value[0]
    assert user.isdigit() and int(user) != 0, "a numeric non-root user, which runAsNonRoot can verify"
    deployments = [d for d in of_kind(base_objects(), "Deployment") if image_name(only_container(d)) == image]
    assert deployments, f"no Deployment runs {image}"
    for deployment in deployments:
        security = deployment["spec"]["template"]["spec"]["securityContext"]
        assert security["runAsUser"] == int(user) and security["runAsNonRoot"] is True
        ports = {port["containerPort"] for port in only_container(deployment).get("ports", [])}
        exposed = {int(port) for command in runtime.commands if command.cmd == "EXPOSE" for port in command.value}
        if image == "scaler-scheduler":
            assert exposed == ports


def test_the_kubernetes_page_builds_the_images_the_manifests_run():
    page = (Path(ROOT) / "docs" / "deployment" / "kubernetes.md").read_text()
    built = dict(re.findall(r"docker build -t (\S+) -f (deploy/docker/\S+) \.", page))
    images = {only_container(d)["image"] for d in of_kind(base_objects(), "Deployment")}
    assert images <= set(built), f"the Kubernetes page builds {sorted(built)}, the manifests run {sorted(images)}"
    for tag, path in built.items():
        assert Path(ROOT, path) == IMAGES[tag.rsplit(":", 1)[0]], f"{tag} is built from {path}"
        assert tag.rsplit(":", 1)[1] == PYPROJECT["project"]["version"], f"{tag}: not the project's version"


def test_the_copied_files_build_a_complete_wheel(tmp_path: Path):
    """The build stage's COPY instructions applied to a directory, and that directory built as the images build it."""
    context = tmp_path / "src"
    context.mkdir()
    for sources, destination in copied_from_context(IMAGES["scaler-worker"]):
        for source in sources:
            target = context / destination / Path(source).name if destination.endswith("/") else context / destination
            if (Path(ROOT) / source).is_dir():
                shutil.copytree(Path(ROOT) / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(Path(ROOT) / source, target)
    assert copied_from_context(IMAGES["scaler-worker"]) == copied_from_context(IMAGES["scaler-scheduler"])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--wheel-dir",
            str(tmp_path / "wheels"),
            str(context),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    (wheel,) = (tmp_path / "wheels").glob("scaler-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (entry_points,) = [name for name in names if name.endswith("entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    for needed in (
        "scaler/monitor/ui/static/index.html",
        "scaler/protocol/scaler.capnp",
        "scaler/scheduler/__main__.py",
    ):
        assert needed in names, f"the wheel built from the copied files lacks {needed}"
    for script in ("scaler_cluster", "scaler_top", "scaler_ui"):
        assert f"{script} = " in scripts
