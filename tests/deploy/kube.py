"""The Kubernetes manifests of deploy/kubernetes as data, and their containers run here as local processes.

No cluster can run on the test machines. What can be checked without one: the manifests against the published
schemas, kustomize's rendering (`kubectl kustomize`, offline, exactly what `kubectl apply -k` sends), and the
commands, arguments, environment, Secrets, Services and probes of the rendered pods, by starting each container's
command as a local process the way a kubelet would: `$(VAR)` expanded from the container's env, Secret volumes
written out as files, Service names and container ports mapped to free loopback ports.
"""

from __future__ import annotations

import base64
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.request
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterable, List, Sequence, Tuple

import yaml

from scaler.testing.processes import ROOT, ScalerProcess, free_tcp_address

MANIFESTS = Path(ROOT) / "deploy" / "kubernetes"
Object = Dict[str, Any]

# What each image of deploy/docker provides: the interpreter its scripts run on. The tests run a container's command
# with the same interpreter here: the PyPy venv that scripts/test.sh makes for the scheduler, CPython for the rest.
PYPY_VENV_BIN = Path(ROOT) / ".venv-pypy" / "bin"
CPYTHON_BIN = Path(sys.executable).parent
IMAGE_INTERPRETERS = {"scaler-scheduler": ("pypy3",), "scaler-worker": ("python", "python3")}
INTERPRETERS = ("pypy3", "python", "python3")


def load_documents(path: Path) -> List[Object]:
    with open(path) as stream:
        return [document for document in yaml.safe_load_all(stream) if document is not None]


def kustomization(directory: Path = MANIFESTS) -> Object:
    (document,) = load_documents(directory / "kustomization.yaml")
    return document


def resource_files(directory: Path = MANIFESTS) -> List[Path]:
    """The files of Kubernetes objects (not kustomize's own) in the base and its components."""
    files = [directory / name for name in kustomization(directory)["resources"]]
    for component in sorted((directory / "components").iterdir()):
        files += [component / name for name in kustomization(component).get("resources", [])]
    return files


def base_objects() -> List[Object]:
    """The objects of the base's resource files as written, without kustomize."""
    return [o for name in kustomization()["resources"] for o in load_documents(MANIFESTS / name)]


def components(directory: Path = MANIFESTS) -> List[str]:
    return sorted(f"components/{path.name}" for path in (directory / "components").iterdir() if path.is_dir())


def render(work_dir: Path, turned_on: Sequence[str] = ()) -> List[Object]:
    """`kubectl kustomize` of a copy of deploy/kubernetes with `turned_on` components (and, for components/curve,
    keys written by scaler_keygen into it, as README says to)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise RuntimeError("kubectl is not installed: it renders the kustomization offline")
    directory = work_dir / "kubernetes"
    shutil.copytree(MANIFESTS, directory, ignore=shutil.ignore_patterns("keys"))
    if "components/curve" in turned_on:
        keygen = [str(CPYTHON_BIN / "scaler_keygen"), str(directory / "components/curve/keys")]
        subprocess.run([*keygen, "scheduler", "worker", "monitor"], check=True, capture_output=True, timeout=30)
    document = kustomization(directory)
    document["components"] = list(turned_on)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(document))
    result = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize failed:\n{result.stderr}")
    return [document for document in yaml.safe_load_all(result.stdout) if document is not None]


def find(objects: Iterable[Object], kind: str, name: str) -> Object:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{len(matches)} {kind} named {name}"
    return matches[0]


def of_kind(objects: Iterable[Object], kind: str) -> List[Object]:
    return [o for o in objects if o["kind"] == kind]


def selects(selector: Dict[str, str], labels: Dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def only_container(deployment: Object) -> Object:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def image_name(container: Object) -> str:
    return container["image"].rsplit(":", 1)[0]


def quantity(text: str) -> Decimal:
    """A Kubernetes quantity in the forms the manifests use: 2, 1.5, 500m, 4Gi."""
    suffixes = {"m": Decimal("0.001"), "Ki": Decimal(1024), "Mi": Decimal(1024**2), "Gi": Decimal(1024**3)}
    for suffix, factor in suffixes.items():
        if text.endswith(suffix):
            return Decimal(text[: -len(suffix)]) * factor
    return Decimal(text)


def env_values(container: Object) -> Dict[str, str]:
    """The container's environment as its process sees it (values, and resourceFieldRef as the kubelet computes it:
    the resource divided by the divisor, rounded up)."""
    values: Dict[str, str] = {}
    for variable in container.get("env", []):
        if "value" in variable:
            values[variable["name"]] = expand(variable["value"], values)
            continue
        reference = variable["valueFrom"]["resourceFieldRef"]  # the only kind of valueFrom the manifests use
        kind, resource = reference["resource"].split(".")
        amount = quantity(container["resources"][kind][resource]) / quantity(reference.get("divisor", "1"))
        values[variable["name"]] = str(math.ceil(amount))
    return values


def expand(word: str, values: Dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion of command, args and env: `$$` is a literal `$`, unknown names stay."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda match: "$" if match.group(0) == "$$" else values.get(match.group(1), match.group(0)),
        word,
    )


class ContainerProcess(ScalerProcess):
    """Any command, not only `python -m MODULE`, with ScalerProcess's log capture and whole-tree stop."""

    def __init__(self, argv: List[str], log_path: str) -> None:
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.popen = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.pid = self.popen.pid


class LocalPods:
    """The rendered Deployments' containers as local processes, wired as their Services and volumes say."""

    def __init__(self, objects: List[Object], work_dir: Path) -> None:
        self.objects = objects
        self.work_dir = work_dir
        self.deployments = {d["metadata"]["name"]: d for d in of_kind(objects, "Deployment")}
        self.services = {s["metadata"]["name"]: s for s in of_kind(objects, "Service")}
        self.secrets = {s["metadata"]["name"]: s for s in of_kind(objects, "Secret")}
        container_ports = [
            port["containerPort"]
            for deployment in self.deployments.values()
            for port in only_container(deployment).get("ports", [])
        ]
        assert len(container_ports) == len(set(container_ports)), "container ports must differ to share one host"
        self.local_port = {port: int(free_tcp_address().rsplit(":", 1)[1]) for port in container_ports}

    # -- wiring
    def container(self, deployment: str) -> Object:
        return only_container(self.deployments[deployment])

    def container_port(self, deployment: str, port: Any) -> int:
        """A probe's or Service's port, by name or number, as a port of the deployment's container."""
        ports = self.container(deployment).get("ports", [])
        for entry in ports:
            if port in (entry.get("name"), entry["containerPort"]):
                return entry["containerPort"]
        raise AssertionError(f"{deployment} has no container port {port!r}")

    def service_target(self, service_name: str, port: int) -> Tuple[str, int]:
        """(deployment, container port) that Service `service_name`:`port` sends traffic to."""
        service = self.services.get(service_name)
        assert service is not None, f"no Service named {service_name}"
        (entry,) = [entry for entry in service["spec"]["ports"] if entry["port"] == port]
        selector = service["spec"]["selector"]
        (deployment,) = [
            name
            for name, d in self.deployments.items()
            if selects(selector, d["spec"]["template"]["metadata"]["labels"])
        ]
        return deployment, self.container_port(deployment, entry.get("targetPort", port))

    def service_address(self, service_name: str, port: int) -> str:
        _, container_port = self.service_target(service_name, port)
        return f"127.0.0.1:{self.local_port[container_port]}"

    def _local(self, deployment: str, match: re.Match) -> str:
        return self._address(deployment, match.group(1), int(match.group(2)))

    def _address(self, deployment: str, host: str, port: int) -> str:
        if host in ("0.0.0.0", "127.0.0.1", "localhost"):  # this pod's own port
            return f"127.0.0.1:{self.local_port[self.container_port(deployment, port)]}"
        return self.service_address(host.split(".")[0], port)  # NAME or NAME.NAMESPACE.svc...

    def _volume_dirs(self, deployment: str) -> Dict[str, str]:
        """mountPath -> a local directory holding what the kubelet would mount there (Secret keys as files)."""
        spec = self.deployments[deployment]["spec"]["template"]["spec"]
        volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
        mounted = {}
        for mount in self.container(deployment).get("volumeMounts", []):
            volume = volumes[mount["name"]]
            if "emptyDir" in volume:
                continue  # /tmp and the like: the local one does
            secret = self.secrets.get(volume["secret"]["secretName"])
            assert secret is not None, f"{deployment} mounts Secret {volume['secret']['secretName']}, not rendered"
            directory = self.work_dir / "volumes" / deployment / mount["name"]
            directory.mkdir(parents=True, exist_ok=True)
            for key, encoded in secret.get("data", {}).items():
                (directory / key).write_bytes(base64.b64decode(encoded))
            mounted[mount["mountPath"]] = str(directory)
        return mounted

    def argv(self, deployment: str, words: Sequence[str]) -> List[str]:
        """A container's command line as run here: variables expanded, addresses, ports and mounts made local."""
        container = self.container(deployment)
        values = env_values(container)
        mounts = self._volume_dirs(deployment)
        argv = [expand(word, values) for word in words]
        local: List[str] = []
        for index, word in enumerate(argv):
            word = re.sub(
                r"tcp://([^:/]+):(\d+)",
                lambda m: "tcp://" + self._address(deployment, m.group(1), int(m.group(2))),
                word,
            )
            if index > 0 and argv[index - 1] in ("--port", "-p"):
                word = str(self.local_port[self.container_port(deployment, int(word))])
            if word == "0.0.0.0":
                word = "127.0.0.1"  # a test serves nothing to the network
            for mount_path, directory in mounts.items():
                word = re.sub(rf"(^|=){re.escape(mount_path)}(?=/|$)", rf"\g<1>{directory}", word)
            local.append(word)
        local[0] = self.executable(deployment, local[0])
        return local

    def executable(self, deployment: str, name: str) -> str:
        """The local stand-in for `name` in the deployment's image: its interpreter, or a console script of scaler
        installed for that interpreter (PyPy's venv if there is one, else this CPython)."""
        interpreters = IMAGE_INTERPRETERS[image_name(self.container(deployment))]
        bin_dir = PYPY_VENV_BIN if "pypy3" in interpreters and pypy_available() else CPYTHON_BIN
        if name in INTERPRETERS:
            assert name in interpreters, f"{deployment} runs {name}; its image has {interpreters}"
            return str(bin_dir / "python")
        path = bin_dir / name
        assert path.exists(), f"{deployment} runs {name}, which installing scaler does not provide"
        return str(path)

    # -- running
    def start(self, deployment: str) -> ContainerProcess:
        container = self.container(deployment)
        argv = self.argv(deployment, [*container["command"], *container.get("args", [])])
        return ContainerProcess(argv, str(self.work_dir / f"{deployment}.log"))

    def probe(self, deployment: str, kind: str) -> None:
        """Run the container's readinessProbe or livenessProbe once, as the kubelet does; AssertionError if it fails."""
        probe = self.container(deployment)[kind]
        timeout = probe.get("timeoutSeconds", 1)
        if "tcpSocket" in probe:
            port = self.local_port[self.container_port(deployment, probe["tcpSocket"]["port"])]
            with socket.create_connection(("127.0.0.1", port), timeout=timeout):
                pass
        elif "httpGet" in probe:
            port = self.local_port[self.container_port(deployment, probe["httpGet"]["port"])]
            url = f"http://127.0.0.1:{port}{probe['httpGet']['path']}"
            with urllib.request.urlopen(url, timeout=timeout) as response:
                assert 200 <= response.status < 400, f"{deployment} {kind}: {url} answered {response.status}"
        else:
            argv = self.argv(deployment, probe["exec"]["command"])
            result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
            assert result.returncode == 0, f"{deployment} {kind} {argv} exited {result.returncode}:\n{result.stderr}"


def pypy_available() -> bool:
    return os.access(PYPY_VENV_BIN / "python", os.X_OK)
