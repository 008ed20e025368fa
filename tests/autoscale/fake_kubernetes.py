"""A local HTTP server that speaks the two Kubernetes API calls the kubernetes backend makes, and nothing else:
GET and PATCH /apis/apps/v1/namespaces/NS/deployments/NAME/scale. It answers as the API server documents
(autoscaling/v1 Scale objects, 404 Status for an unknown deployment, 401 without the bearer token) and records every
request, so the test checks what the backend sent. Anything else gets 404 and is recorded as unexpected."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple

SCALE_PATH = re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/deployments/([^/?]+)/scale(\?.*)?$")
MERGE_PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


class FakeKubernetes:
    def __init__(self, token: str, deployments: Dict[Tuple[str, str], int]) -> None:
        self.token = token
        self.replicas = dict(deployments)  # (namespace, name) -> spec.replicas
        self.requests: List[Tuple[str, str, Optional[str], Optional[object]]] = []  # method, path, type, body
        self.unexpected: List[str] = []
        self.lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def kubeconfig(self) -> str:
        return json.dumps(  # JSON is YAML: the kubeconfig loader reads it
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                "users": [{"name": "autoscaler", "user": {"token": self.token}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "autoscaler"}}],
                "current-context": "fake",
            }
        )

    def __enter__(self) -> FakeKubernetes:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def _scale(namespace: str, name: str, replicas: int) -> dict:
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas} if replicas else {},  # ScaleSpec.replicas is omitempty: a zero is left out
        "status": {"replicas": replicas, "selector": f"app={name}"},  # ScaleStatus.replicas is required: always there
    }


def _status(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _patched_replicas(content_type: Optional[str], body: object) -> Optional[int]:
    """spec.replicas as the API server would set it from this patch, or None where it would refuse the patch."""
    if content_type == "application/json-patch+json":  # RFC 6902: a list of operations
        if not isinstance(body, list) or len(body) != 1 or not isinstance(body[0], dict):
            return None
        operation = body[0]
        if operation.get("op") not in ("add", "replace") or operation.get("path") != "/spec/replicas":
            return None
        value = operation.get("value")
    elif content_type in MERGE_PATCH_TYPES:  # RFC 7386: an object
        value = body.get("spec", {}).get("replicas") if isinstance(body, dict) else None
    else:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _handler(api: FakeKubernetes) -> type:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            content_type = self.headers.get("Content-Type")
            body = json.loads(raw) if raw else None
            with api.lock:
                api.requests.append((method, self.path, content_type, body))
            if self.headers.get("Authorization") != f"Bearer {api.token}":
                return self._answer(401, _status(401, "Unauthorized", "Unauthorized"))
            match = SCALE_PATH.match(self.path)
            if match is None or method not in ("GET", "PATCH"):
                with api.lock:
                    api.unexpected.append(f"{method} {self.path}")
                return self._answer(404, _status(404, "NotFound", "the server could not find the requested resource"))
            key = (match.group(1), match.group(2))
            with api.lock:
                if key not in api.replicas:
                    return self._answer(404, _status(404, "NotFound", f'deployments.apps "{key[1]}" not found'))
                if method == "PATCH":
                    replicas = _patched_replicas(content_type, body)
                    if replicas is None:
                        api.unexpected.append(f"PATCH {content_type} {body!r}")
                        return self._answer(422, _status(422, "Invalid", "the patch does not apply to a Scale"))
                    api.replicas[key] = replicas
                return self._answer(200, _scale(key[0], key[1], api.replicas[key]))

        def do_GET(self) -> None:
            self._handle("GET")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PUT(self) -> None:
            self._handle("PUT")

    return Handler
