"""Internal: the `kubernetes` backend: the workers are a Deployment (each pod runs `scaler_cluster`), scaled through the
API.

It makes two API calls, with the official `kubernetes` client (`pip install "scaler[kubernetes]"`): read the
Deployment's scale subresource, and patch its `spec.replicas`. A job is one replica. Kubernetes chooses which pod goes
when replicas drop (not-ready pods first) and stops it with SIGTERM, which `scaler_cluster` answers by retiring its
workers; give the pods a `terminationGracePeriodSeconds` long enough for a task to finish. The policy cannot tell which
worker runs in which pod, so it works with counts (see policy.py). On exit the Deployment is left as it is, so a
restarted autoscaler (for example its own Deployment rolling over) takes the pool over without a dip.

Credentials: the pod's service account inside the cluster, else a kubeconfig file (--kubeconfig, $KUBECONFIG or
~/.kube/config). The service account needs `get` and `patch` on `deployments/scale` in the namespace.
"""

from __future__ import annotations

import json
import logging
from typing import Any, List, Optional

from scaler.autoscale.backends.base import Backend, BackendError
from scaler.autoscale.records import Job

logger = logging.getLogger(__name__)


def _api(kubeconfig: Optional[str]) -> Any:
    try:
        from kubernetes import client, config
    except ImportError as error:
        raise BackendError(
            'the kubernetes backend needs the kubernetes client: pip install "scaler[kubernetes]"'
        ) from error
    if kubeconfig is None:
        try:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            return client.AppsV1Api(client.ApiClient(configuration))
        except config.ConfigException:
            pass  # not in a pod: the kubeconfig file
    try:
        return client.AppsV1Api(config.new_client_from_config(config_file=kubeconfig, persist_config=False))
    except (config.ConfigException, OSError) as error:
        raise BackendError(f"no Kubernetes credentials: not in a pod, and no usable kubeconfig ({error})") from error


class KubernetesBackend(Backend):
    name = "kubernetes"

    def __init__(self, deployment: str, namespace: str, kubeconfig: Optional[str] = None) -> None:
        self._deployment = deployment
        self._namespace = namespace
        self._api = _api(kubeconfig)
        self._jobs: List[Job] = []  # one per replica, newest last
        self._serial = 0
        self._replicas: Optional[int] = None

    def describe(self) -> str:
        return f"kubernetes: scales deployment {self._namespace}/{self._deployment}, one job per replica"

    def _call(self, what: str, method: Any, *args: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return method(self._deployment, self._namespace, *args)
        except ApiException as error:
            raise BackendError(
                f"{what} deployments/scale {self._namespace}/{self._deployment}: {error.status} {error.reason}"
                f"{_status_message(error.body)}"
            ) from error
        except Exception as error:  # the client raises urllib3's errors as they come: refused, reset, timed out
            raise BackendError(f"{what} deployments/scale {self._namespace}/{self._deployment}: {error}") from error

    def _read_replicas(self) -> int:
        scale = self._call("read", self._api.read_namespaced_deployment_scale)
        return int(scale.spec.replicas or 0)

    def _patch_replicas(self, replicas: int) -> None:
        # A JSON Patch (a list), which every version of the client sends as application/json-patch+json; a dict body
        # goes out as a JSON Patch too in older ones, which the API server refuses. "add" also sets a field that is
        # absent, as spec.replicas is when it is 0.
        patch = [{"op": "add", "path": "/spec/replicas", "value": replicas}]
        self._call("patch", self._api.patch_namespaced_deployment_scale, patch)

    def poll(self, now: float) -> List[Job]:
        replicas = self._read_replicas()
        if self._replicas is not None and replicas != self._replicas:
            logger.warning(
                "deployment %s: replicas changed from %d to %d by someone else",
                self._deployment,
                self._replicas,
                replicas,
            )
        elif self._replicas is None and replicas:
            logger.info("deployment %s: taking over its %d replica(s)", self._deployment, replicas)
        self._sync(replicas, now)
        return list(self._jobs)

    def _sync(self, replicas: int, now: float) -> None:
        """One job per replica: new ones appended, the newest dropped first."""
        self._replicas = replicas
        while len(self._jobs) < replicas:
            self._serial += 1
            self._jobs.append(Job(job_id=f"replica-{self._serial}", submitted_at=now, running=True))
        del self._jobs[replicas:]

    def start(self, count: int, now: float) -> List[str]:
        replicas = self._read_replicas() + count
        self._patch_replicas(replicas)
        self._sync(replicas, now)
        return [job.job_id for job in self._jobs[-count:]]

    def retire(self, job_id: str, now: float) -> None:
        replicas = max(0, self._read_replicas() - 1)
        self._patch_replicas(replicas)
        self._jobs = [job for job in self._jobs if job.job_id != job_id]
        self._replicas = replicas

    def close(self) -> None:
        logger.info("deployment %s: left at %s replica(s)", self._deployment, self._replicas)


def _status_message(body: object) -> str:
    """The message of the API server's Status answer, e.g. ': deployments.apps "x" not found', or ''."""
    try:
        message = json.loads(body)["message"]  # type: ignore[arg-type]
    except (TypeError, ValueError, KeyError):
        return ""
    return f": {message}" if isinstance(message, str) else ""
