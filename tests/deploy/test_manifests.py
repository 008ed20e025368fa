"""deploy/kubernetes against the Kubernetes schemas (kubernetes-validate, strict: unknown fields are errors), rendered
by kustomize with each optional component, and wired as the pods expect: Services select their pods and name their
ports, the workers Deployment can be resized by scaler_autoscale and nothing else fights it over its replicas."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import List

import kubernetes_validate
import pytest

from tests.deploy.kube import (
    Object,
    base_objects,
    components,
    find,
    kustomization,
    load_documents,
    of_kind,
    only_container,
    render,
    resource_files,
    selects,
)
from tests.deploy.test_dockerfiles import PYPROJECT

# The oldest Kubernetes still common in managed clusters, and the newest whose schemas kubernetes-validate ships.
VERSIONS = ("1.28.0", kubernetes_validate.latest_version())
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl renders the kustomization")
RENDERINGS = [(), *[(component,) for component in components()], tuple(components())]


def validate(objects: List[Object]) -> None:
    for document in objects:
        for version in VERSIONS:
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                name = f"{document['kind']} {document['metadata']['name']}"
                raise AssertionError(f"{name} is not valid for Kubernetes {version}: {error.message}") from None


@pytest.mark.parametrize("path", resource_files(), ids=lambda path: str(path.relative_to(path.parents[2])))
def test_each_file_matches_the_schemas(path: Path):
    validate(load_documents(path))


@needs_kubectl
@pytest.mark.parametrize("turned_on", RENDERINGS, ids=lambda on: "+".join(on) or "base")
def test_each_rendering_matches_the_schemas(turned_on, tmp_path: Path):
    objects = render(tmp_path, turned_on)
    validate(objects)
    namespace = kustomization()["namespace"]
    assert all(o["metadata"].get("namespace") == namespace for o in objects if o["kind"] != "Namespace")
    assert not of_kind(objects, "HorizontalPodAutoscaler"), "an HPA would fight scaler_autoscale over the replicas"


def test_schema_validation_catches_a_misspelled_field():
    deployment = find(base_objects(), "Deployment", "scaler-scheduler")
    only_container(deployment)["readinesProbe"] = only_container(deployment).pop("readinessProbe")
    with pytest.raises(AssertionError, match="readinesProbe"):
        validate([deployment])


def test_deployments_select_their_own_pods_and_services_their_ports():
    objects = base_objects()
    deployments = of_kind(objects, "Deployment")
    for deployment in deployments:
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selects(deployment["spec"]["selector"]["matchLabels"], labels), deployment["metadata"]["name"]
    for service in of_kind(objects, "Service"):
        selected = [
            d for d in deployments if selects(service["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])
        ]
        assert len(selected) == 1, f"Service {service['metadata']['name']} selects {len(selected)} Deployments"
        port_names = {port["name"] for port in only_container(selected[0])["ports"]}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, f"{service['metadata']['name']}: no container port {port}"


def test_every_container_has_resources_and_runs_locked_down():
    for deployment in of_kind(base_objects(), "Deployment"):
        container = only_container(deployment)
        name = deployment["metadata"]["name"]
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]), name
        assert "memory" in container["resources"]["limits"], name
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], name
        assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is False, name


def test_images_are_the_project_version():
    for deployment in of_kind(base_objects(), "Deployment"):
        assert only_container(deployment)["image"].endswith(":" + PYPROJECT["project"]["version"])


def test_one_scheduler_at_a_time():
    scheduler = find(base_objects(), "Deployment", "scaler-scheduler")
    assert scheduler["spec"]["replicas"] == 1
    assert scheduler["spec"]["strategy"]["type"] == "Recreate", "a rollout never runs two schedulers at once"


@needs_kubectl
def test_the_autoscaler_component_may_resize_the_workers_and_nothing_else(tmp_path: Path):
    objects = render(tmp_path, ["components/autoscaler-rbac"])
    workers = find(objects, "Deployment", "scaler-workers")
    assert "replicas" not in workers["spec"], "kubectl apply -k must leave the autoscaler's replica count alone"
    account = find(objects, "ServiceAccount", "scaler-autoscaler")
    role = find(objects, "Role", "scaler-autoscaler")
    assert role["rules"] == [
        {
            "apiGroups": ["apps"],
            "resources": ["deployments/scale"],
            "resourceNames": ["scaler-workers"],
            "verbs": ["get", "patch"],
        }
    ]
    binding = find(objects, "RoleBinding", "scaler-autoscaler")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "scaler-autoscaler"}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "scaler-autoscaler", "namespace": account["metadata"]["namespace"]}
    ]
    base_workers = find(base_objects(), "Deployment", "scaler-workers")
    assert base_workers["spec"]["replicas"] >= 1, "without the autoscaler, a fixed pool"


@needs_kubectl
def test_curve_keys_are_readable_by_the_pods_user_only(tmp_path: Path):
    objects = render(tmp_path, ["components/curve"])
    for deployment in of_kind(objects, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        secrets = [volume["secret"] for volume in pod["volumes"] if "secret" in volume]
        assert secrets, f"{deployment['metadata']['name']} gets no key"
        for secret in secrets:
            assert secret["defaultMode"] == 0o440, "owner root, group the pod's fsGroup, nobody else"
            assert find(objects, "Secret", secret["secretName"])["data"], "the Secret holds the key files"
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
