"""Pods that carry a spotcap contract, from a watch on the Kubernetes API.

A pod carries a contract when its ``spotcap.io/workload`` label names a workload (the label
admission requires on reclaimable capacity: infra/admission/). The source lists those pods in
every namespace (a complete batch), then watches from the list's resourceVersion (updates);
when the server has compacted that version away (410 Gone) it lists again. A pod is `pending`
while its phase is Pending, `running` while Running (or Unknown), and `ended` once Succeeded or
Failed, once it is being deleted, or when the watch says it was deleted. Its claim asks for the
pod's CPU requests, rounded up to whole vCPU (at least 1), counted as the scheduler counts
them: the larger of the containers' sum and the largest init container.

The intake's service account needs only ``list`` and ``watch`` on pods
(infra/kubernetes/intake-rbac.yaml).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Generator, Iterator
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as kube_config
from kubernetes import watch as kube_watch
from kubernetes.client.exceptions import ApiException

from streams.intake.claims import Batch, Sighting, Stage

log = logging.getLogger(__name__)

WORKLOAD_LABEL = "spotcap.io/workload"
WATCH_WINDOW_S = 5
"""How long one watch request stays open: the longest a stop waits for the source."""
RETRY_S = 2.0
REFUSED_PATIENCE_S = 60.0
"""How long an intake that was served goes on trying when refused (HTTP 401 or 403) before it
stops: a restarted kube-apiserver refuses until its caches are filled. Refused at its first
list, it stops at once (the credentials or the roles are wrong)."""


class AccessRefusedError(Exception):
    """The API server will not let the intake list or watch pods."""


def claim_id(cluster: str, pod: Any) -> str:
    meta = pod.metadata
    return f"kubernetes/{cluster}/{meta.namespace}/{meta.name}/{meta.uid}"


def cpu_millis(quantity: str | None) -> int:
    """A CPU quantity in thousandths of a vCPU ('250m', '2', '1.5'); 0 when absent or
    unreadable."""
    if not quantity:
        return 0
    text = str(quantity).strip()
    try:
        if text.endswith("m"):
            return math.ceil(Decimal(text[:-1]))
        return math.ceil(Decimal(text) * 1000)
    except InvalidOperation:
        return 0


def requested_vcpu(pod: Any) -> int:
    def cpu(container: Any) -> int:
        requests = (container.resources.requests or {}) if container.resources else {}
        return cpu_millis(requests.get("cpu"))

    spec = pod.spec
    regular = sum(cpu(c) for c in spec.containers or ())
    init = max((cpu(c) for c in spec.init_containers or ()), default=0)
    return max(1, math.ceil(max(regular, init) / 1000))


def _us(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1_000_000)


def _finished_us(pod: Any) -> int | None:
    """When the pod's last container finished, if its status says."""
    statuses = (pod.status.container_statuses if pod.status is not None else None) or ()
    finished = [
        _us(s.state.terminated.finished_at)
        for s in statuses
        if s.state is not None and s.state.terminated is not None
    ]
    known = [f for f in finished if f is not None]
    return max(known) if known else None


def sighting(cluster: str, pod: Any, seen_at_us: int, *, deleted: bool = False) -> Sighting | None:
    """The pod as a claim's work, or None when it names no workload."""
    meta = pod.metadata
    workload = (meta.labels or {}).get(WORKLOAD_LABEL, "")
    if not workload:
        return None
    phase = pod.status.phase if pod.status is not None else None
    stage: Stage
    at_us: int | None
    if deleted or meta.deletion_timestamp is not None or phase in ("Succeeded", "Failed"):
        stage, at_us = "ended", _finished_us(pod)
    elif phase in ("Running", "Unknown"):
        stage, at_us = "running", None
    else:
        stage, at_us = "pending", _us(meta.creation_timestamp)
    return Sighting(
        claim_id=claim_id(cluster, pod),
        workload_id=workload,
        scheduler="kubernetes",
        cluster=cluster,
        stage=stage,
        requested_vcpu=requested_vcpu(pod),
        what=f"pod {meta.namespace}/{meta.name}",
        at_us=at_us or seen_at_us,
    )


def api_client(kubeconfig: Path) -> k8s.ApiClient:
    """A client from a kubeconfig file (the intake's service account, usually)."""
    made: k8s.ApiClient = kube_config.new_client_from_config(  # type: ignore[no-untyped-call]
        str(kubeconfig)
    )
    return made


class KubernetesSource:
    """Lists, then watches, the pods of one cluster that name a workload."""

    def __init__(
        self, api: k8s.ApiClient, cluster: str, clock_us: Callable[[], int] | None = None
    ) -> None:
        self.cluster = cluster
        self.prefix = f"kubernetes/{cluster}/"
        self._core: Any = k8s.CoreV1Api(api)
        self._now_us = clock_us or (lambda: time.time_ns() // 1000)

    def batches(self, stop: threading.Event) -> Iterator[Batch]:
        """Complete batches after every (re)list, updates from the watch in between, until
        `stop` is set; an API that cannot be reached is retried every couple of seconds."""
        version: str | None = None
        refused_since: float | None = None  # since when, once it had been served
        served = False
        while not stop.is_set():
            try:
                if version is None:
                    batch, version = self._list()
                    served, refused_since = True, None
                    yield batch
                version = yield from self._watch(version, stop)
            except ApiException as error:
                if error.status == 410:
                    log.info("kubernetes %s: the watch's version is gone (410); listing again",
                             self.cluster)  # fmt: skip
                    version = None  # compacted away, or older than a new server's cache
                    continue
                if error.status in (401, 403) and served:
                    # A kube-apiserver just started again refuses tokens and roles until its
                    # caches are filled (seen: a 403 right after a restart): wait a while.
                    refused_since = refused_since or time.monotonic()
                    if time.monotonic() - refused_since < REFUSED_PATIENCE_S:
                        log.warning("kubernetes %s: the API refused (HTTP %s); retrying",
                                    self.cluster, error.status)  # fmt: skip
                        version = None
                        stop.wait(RETRY_S)
                        continue
                if error.status in (401, 403):  # credentials or RBAC: waiting will not help
                    raise AccessRefusedError(
                        f"the Kubernetes API of {self.cluster} refused to list and watch pods "
                        f"(HTTP {error.status}): give the intake's service account "
                        "infra/kubernetes/intake-rbac.yaml"
                    ) from None
                log.warning("kubernetes %s: the API answered %s; retrying", self.cluster,
                            error.status)  # fmt: skip
                version = None
                stop.wait(RETRY_S)
            except (urllib3.exceptions.HTTPError, OSError) as error:
                log.warning("kubernetes %s: %s; retrying", self.cluster, type(error).__name__)
                version = None
                stop.wait(RETRY_S)

    def _list(self) -> tuple[Batch, str]:
        listed = self._core.list_pod_for_all_namespaces(
            label_selector=WORKLOAD_LABEL, _request_timeout=30
        )
        now_us = self._now_us()
        found = [sighting(self.cluster, pod, now_us) for pod in listed.items]
        sightings = [s for s in found if s is not None]
        return Batch(self.prefix, sightings, True, now_us), str(listed.metadata.resource_version)

    def _watch(self, version: str, stop: threading.Event) -> Generator[Batch, None, str]:
        stream = kube_watch.Watch()  # type: ignore[no-untyped-call]
        for event in stream.stream(  # type: ignore[no-untyped-call]
            self._core.list_pod_for_all_namespaces,
            label_selector=WORKLOAD_LABEL,
            resource_version=version,
            timeout_seconds=WATCH_WINDOW_S,
            allow_watch_bookmarks=True,
            _request_timeout=WATCH_WINDOW_S + 10,
        ):
            kind, pod = event["type"], event["object"]  # an ERROR event raises ApiException
            if kind == "BOOKMARK":
                # Not a pod: the client leaves a bookmark's object a dict (kubernetes 37);
                # only its version counts. One came after a restart of kube-apiserver.
                version = str(event["raw_object"]["metadata"]["resourceVersion"])
            else:
                version = str(pod.metadata.resource_version)
                now_us = self._now_us()
                seen = sighting(self.cluster, pod, now_us, deleted=kind == "DELETED")
                if seen is not None:
                    yield Batch(self.prefix, [seen], False, now_us)
            if stop.is_set():
                stream.stop()  # type: ignore[no-untyped-call]
        return version
