"""What the tests on the real kube-apiserver share: clients, manifests, and the parts of a
cluster that do not run here.

The session's one kube-apiserver (the ``kubernetes`` fixture) runs without kubelet, scheduler or
controller-manager, so a test writes what they would, through the same API:

- a namespace's ``default`` ServiceAccount (the service-account controller), or pods are
  refused;
- a pod's Running and Ready status (the kubelet), or an eviction ignores its
  PodDisruptionBudget (a Pending pod is not counted as healthy);
- a PodDisruptionBudget's status (the disruption controller), which the Eviction API reads;
- the end of a pod being deleted (the kubelet: once the workload stopped, it removes the pod),
  which `Kubelet` does for the nodes it is given, recording the grace period each pod was given.

Each test works in namespaces and on nodes of its own (`unique`), since the server is shared.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as kube_config
from kubernetes import utils as kube_utils
from kubernetes.client.exceptions import ApiException

from infra import servers

REPO = Path(__file__).resolve().parent.parent
MANIFESTS = REPO / "infra" / "kubernetes"
ADMISSION = REPO / "infra" / "admission"
WORKLOAD_LABEL = "spotcap.io/workload"


def unique(prefix: str) -> str:
    """A name no other test of the session uses (DNS-1123)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def core(api: k8s.ApiClient) -> Any:
    """The core/v1 API (typed Any: the client's optional fields would need a check per
    attribute, where a test wants the AttributeError)."""
    return k8s.CoreV1Api(api)


def policy(api: k8s.ApiClient) -> Any:
    """The policy/v1 API (PodDisruptionBudgets), typed Any as `core`."""
    return k8s.PolicyV1Api(api)


def admin(server: servers.Server) -> k8s.ApiClient:
    """An ApiClient with the administrator's kubeconfig (group system:masters)."""
    made: k8s.ApiClient = kube_config.new_client_from_config(  # type: ignore[no-untyped-call]
        str(servers.kubeconfig(server))
    )
    return made


def client_with_token(server: servers.Server, token: str) -> k8s.ApiClient:
    """An ApiClient that authenticates with `token` (a service account's)."""
    configuration = k8s.Configuration()
    configuration.host = server.address
    configuration.ssl_ca_cert = str(server.data_dir / "pki" / "apiserver.crt")
    configuration.api_key["authorization"] = token
    configuration.api_key_prefix["authorization"] = "Bearer"
    return k8s.ApiClient(configuration)


def write_kubeconfig(path: Path, server: servers.Server, token: str) -> Path:
    """A kubeconfig (mode 0600) for the server with `token`: what an operator hands the intake."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {
            "server": server.address,
            "certificate-authority": str(server.data_dir / "pki" / "apiserver.crt")}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }  # fmt: skip
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config))
    return path


def apply(api: k8s.ApiClient, manifest: Path) -> None:
    """Create every object of a YAML manifest; an object that exists already is left as is
    (the session's server is shared: the first test to need a manifest applies it)."""
    for document in yaml.safe_load_all(manifest.read_text()):
        if not document:
            continue
        try:
            kube_utils.create_from_dict(api, document)  # type: ignore[no-untyped-call]
        except kube_utils.FailToCreateError as error:
            if any(e.status != 409 for e in error.api_exceptions):
                raise


def namespace(api: k8s.ApiClient, name: str, labels: Mapping[str, str] | None = None) -> str:
    """A namespace with its ``default`` ServiceAccount (what the controller-manager makes)."""
    v1 = core(api)
    v1.create_namespace({"metadata": {"name": name, "labels": dict(labels or {})}})
    v1.create_namespaced_service_account(name, {"metadata": {"name": "default"}})
    return name


def node(api: k8s.ApiClient, name: str) -> str:
    core(api).create_node({"metadata": {"name": name}})
    return name


def pod_body(
    name: str,
    *,
    node_name: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner_kind: str | None = None,
    cpu: str | None = None,
    init_cpu: str | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.invalid/work:1"}
    if cpu is not None:
        container["resources"] = {"requests": {"cpu": cpu}}
    spec: dict[str, Any] = {"containers": [container]}
    if init_cpu is not None:
        spec["initContainers"] = [
            {"name": "init", "image": "registry.invalid/init:1",
             "resources": {"requests": {"cpu": init_cpu}}}
        ]  # fmt: skip
    if node_name is not None:
        spec["nodeName"] = node_name
    metadata: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if owner_kind is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner_kind, "name": f"{name}-owner",
             "uid": str(uuid.uuid4()), "controller": True}
        ]  # fmt: skip
    return {"metadata": metadata, "spec": spec}


def set_phase(api: k8s.ApiClient, namespace_: str, name: str, phase: str) -> None:
    """Write the pod's status as its kubelet would (Running pods are Ready)."""
    ready = "True" if phase == "Running" else "False"
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}
    core(api).patch_namespaced_pod_status(name, namespace_, {"status": status})


def running_pod(api: k8s.ApiClient, namespace_: str, name: str, **fields: Any) -> str:
    """A pod bound to a node (``node_name``), Running and Ready."""
    core(api).create_namespaced_pod(namespace_, pod_body(name, **fields))
    set_phase(api, namespace_, name, "Running")
    return name


def disruption_budget(
    api: k8s.ApiClient, namespace_: str, name: str, selector: Mapping[str, str], min_available: int
) -> None:
    policy(api).create_namespaced_pod_disruption_budget(
        namespace_,
        {
            "metadata": {"name": name},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": dict(selector)}},
        },
    )


def budget_status(
    api: k8s.ApiClient, namespace_: str, name: str, *, healthy: int, desired: int, expected: int
) -> None:
    """Write the budget's status as the disruption controller would (which forgets the pods
    it has seen go, `disruptedPods`)."""
    v1 = policy(api)
    generation = v1.read_namespaced_pod_disruption_budget(name, namespace_).metadata.generation
    status = {
        "observedGeneration": generation,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "disruptionsAllowed": max(0, healthy - desired),
        "disruptedPods": None,
    }
    v1.patch_namespaced_pod_disruption_budget_status(name, namespace_, {"status": status})


def service_account_token(
    api: k8s.ApiClient, namespace_: str, account: str, *, node_name: str | None = None
) -> str:
    """A token of the service account (TokenRequest), bound to the Node `node_name` if given:
    what a node's agent is handed at launch."""
    spec: dict[str, Any] = {"audiences": [], "expirationSeconds": 3600}
    if node_name is not None:
        uid = core(api).read_node(node_name).metadata.uid
        spec["boundObjectRef"] = {"kind": "Node", "apiVersion": "v1", "name": node_name, "uid": uid}
    request = core(api).create_namespaced_service_account_token(account, namespace_, {"spec": spec})
    return str(request.status.token)


def status_of(error: ApiException) -> int:
    return int(error.status or 0)


def wait_until(predicate: Any, timeout_s: float, what: str, every_s: float = 0.1) -> Any:
    """Poll `predicate` until it returns something true; return it. Bounded."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(every_s)


class Kubelet:
    """Stands in for the kubelets of some nodes: a pod there that is being deleted (an eviction
    accepted) is removed once its workload has stopped, which here is at once. Records the
    grace period each pod was given (what the agent asked the Eviction API for)."""

    def __init__(self, api: k8s.ApiClient, nodes: set[str]) -> None:
        self._core = core(api)
        self._nodes = nodes
        self.grace_s: dict[str, int | None] = {}  # "namespace/name" -> deletion grace period
        self.removed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet", daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            for pod in self._terminating():
                meta = pod.metadata
                key = f"{meta.namespace}/{meta.name}"
                self.grace_s[key] = meta.deletion_grace_period_seconds
                try:
                    self._core.delete_namespaced_pod(
                        meta.name, meta.namespace, grace_period_seconds=0
                    )
                    self.removed.append(key)
                except ApiException as error:
                    if error.status != 404:
                        raise
            self._stop.wait(0.05)

    def _terminating(self) -> Iterator[Any]:
        for name in sorted(self._nodes):
            pods = self._core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}")
            yield from (p for p in pods.items if p.metadata.deletion_timestamp is not None)
