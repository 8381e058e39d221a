"""The Kubernetes path (ADR-14): taint, evict this node's own pods in parallel, verify.

Every API call is capped at 800 ms (``scheduler_call_timeout_s``). The node is cordoned and
tainted ``spotcap.io/reclaim=notice:NoSchedule``; then each pod on it (DaemonSet and mirror
pods excepted, as ``kubectl drain`` does) is evicted through the Eviction API by a pool of
workers under this node's own token bucket, so 800 agents evicting their own pods do not queue
behind one central drainer at client-go's default 5 requests/s. The eviction asks for a grace
period that ends before the notice deadline: the agent owns the deadline.

A 429 (a PodDisruptionBudget or API priority and fairness) or a 5xx is retried, after its
Retry-After or a short back-off, for as long as the deadline allows less what the local path
needs (its grace, and the SIGKILL after it); every attempt is an ``eviction_attempted`` event.
A pod still refused then (or refused for good: 403, 400, 422) is left to the local path, which
signals the workload's processes, so a budget that never allows the disruption delays the drain
but does not stop it: the node goes at the deadline anyway. When the API does not answer within
the cap (taint, list or an eviction), the agent stops waiting for it and drains locally (the
kubelet's graceful-shutdown period as the grace if it is shorter than the local path's own).
Verification lists the node's pods until none of the evicted ones is left.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from agent.config import DrainConfig, KubernetesConfig
from agent.drain.base import DrainContext, DrainResult
from agent.drain.local import LocalDrain
from agent.drain.ratelimit import TokenBucket
from schemas.events import DrainPath, EvictionAttempted, EvictionOutcome

log = logging.getLogger(__name__)

TAINT_KEY = "spotcap.io/reclaim"
_MAX_BACKOFF_S = 2.0
_LOCAL_KILL_S = 2.0  # the local path's wait after SIGKILL (LocalDrain)


class ApiUnresponsiveError(Exception):
    """The API server did not answer within the cap (or could not be reached)."""


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def make_api_client(config: KubernetesConfig, parallelism: int) -> k8s.ApiClient:
    """An ApiClient from the agent's configuration: a kubeconfig, or a URL and a node-bound
    token file (ADR-31: the node holds no other credential)."""
    configuration = k8s.Configuration()
    if config.kubeconfig is not None:
        from kubernetes import config as kube_config

        kube_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(config.kubeconfig), client_configuration=configuration
        )
    if config.api_url:
        configuration.host = config.api_url
    if config.ca_file is not None:
        configuration.ssl_ca_cert = str(config.ca_file)
    if config.token_file is not None:
        token_file = config.token_file

        # Node-bound tokens rotate: read the file on every request, never cache it.
        def refresh(conf: k8s.Configuration) -> None:
            conf.api_key["authorization"] = Path(token_file).read_text().strip()

        configuration.api_key_prefix["authorization"] = "Bearer"
        configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]
        # The client sends the header only for a key it already holds (then refreshes it).
        refresh(configuration)
    configuration.retries = False  # one try per call: the 800 ms cap is the whole budget
    configuration.connection_pool_maxsize = parallelism + 2
    return k8s.ApiClient(configuration)


def _evictable(pod: Any) -> bool:
    meta = pod.metadata
    if meta is None:
        return False
    if (meta.annotations or {}).get("kubernetes.io/config.mirror"):
        return False
    if any(ref.kind == "DaemonSet" for ref in meta.owner_references or ()):
        return False
    phase = pod.status.phase if pod.status is not None else None
    return phase not in ("Succeeded", "Failed")


class KubernetesDrain:
    name: DrainPath = "kubernetes"

    def __init__(
        self,
        config: KubernetesConfig,
        drain: DrainConfig,
        local: LocalDrain,
        *,
        api_client: k8s.ApiClient | None = None,
        kubelet_grace_s: float | None = None,
    ) -> None:
        if not config.node_name:
            raise ValueError("[kubernetes] node_name is required for the Kubernetes drain path")
        self.node = config.node_name
        self._config = config
        self._cap_s = drain.scheduler_call_timeout_s
        self._local = local
        self._kubelet_grace_s = kubelet_grace_s
        self._client = api_client or make_api_client(config, config.eviction_parallelism)
        self._api = k8s.CoreV1Api(self._client)

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]

    # -- the path ---------------------------------------------------------------------------

    def drain(self, ctx: DrainContext) -> DrainResult:
        try:
            self._taint(ctx)
            ctx.mark_signal()
            pods = self._pods()
        except ApiUnresponsiveError as why:
            return self._fall_back(ctx, f"API unresponsive before eviction: {why}")
        bucket = TokenBucket(self._config.eviction_rate_per_s, self._config.eviction_burst)
        unresponsive = threading.Event()
        workers = max(1, min(self._config.eviction_parallelism, len(pods)))
        with ThreadPoolExecutor(workers, thread_name_prefix="evict") as pool:
            outcomes = list(pool.map(lambda p: self._evict(ctx, p, bucket, unresponsive), pods))
        evicted = [p for p, ok in zip(pods, outcomes, strict=True) if ok]
        if unresponsive.is_set():
            return self._fall_back(ctx, "API stopped answering within the cap during eviction")
        refused = sorted(str(p) for p, ok in zip(pods, outcomes, strict=True) if not ok)
        if refused and self._local.configured:
            return self._fall_back(
                ctx,
                f"{len(evicted)} of {len(pods)} pods evicted; not evicted in time: "
                + ", ".join(refused[:5]),
            )
        verified, left = self._verify(ctx, {str(p) for p in pods})
        detail = f"{len(evicted)} of {len(pods)} pods evicted"
        if left:
            detail += f"; still on the node: {', '.join(sorted(left)[:5])}"
        return DrainResult("kubernetes", verified, False, detail, len(evicted))

    def _local_grace_s(self) -> float:
        grace = self._local.term_grace_s
        if self._kubelet_grace_s is not None:
            grace = min(grace, self._kubelet_grace_s)
        return grace

    def _eviction_window_s(self, ctx: DrainContext) -> float:
        """Seconds left for evictions: the deadline's, less what the local path needs after
        them (nothing when it has no processes to look for)."""
        reserve_s = self._local_grace_s() + _LOCAL_KILL_S if self._local.configured else 0.0
        return ctx.deadline.left_s() - reserve_s

    def _fall_back(self, ctx: DrainContext, why: str) -> DrainResult:
        log.warning("node %s: %s; draining locally", self.node, why)
        result = self._local.drain(ctx, grace_s=self._local_grace_s())
        return DrainResult("local", result.verified, True, f"{why}; {result.detail}", 0)

    # -- API calls, each capped -------------------------------------------------------------

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, _request_timeout=self._cap_s, **kwargs)
        except ApiException:
            raise
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise ApiUnresponsiveError(f"{what}: {type(error).__name__}") from error

    def _taint(self, ctx: DrainContext) -> None:
        try:
            node = self._call("read node", self._api.read_node, self.node)
            taints = [t.to_dict() for t in (node.spec.taints or ())] if node.spec else []
            if not any(t.get("key") == TAINT_KEY for t in taints):
                taints.append(
                    {"key": TAINT_KEY, "value": ctx.request.trigger, "effect": "NoSchedule"}
                )
            body = {"spec": {"unschedulable": True, "taints": taints}}
            self._call("taint node", self._api.patch_node, self.node, body)
        except ApiException as error:
            raise ApiUnresponsiveError(f"taint refused with HTTP {error.status}") from error

    def _pods(self) -> list[PodRef]:
        try:
            listed = self._call(
                "list pods",
                self._api.list_pod_for_all_namespaces,
                field_selector=f"spec.nodeName={self.node}",
            )
        except ApiException as error:
            raise ApiUnresponsiveError(f"pod list refused with HTTP {error.status}") from error
        return [
            PodRef(p.metadata.namespace or "default", p.metadata.name)
            for p in listed.items
            if _evictable(p)
        ]

    def _evict(
        self, ctx: DrainContext, pod: PodRef, bucket: TokenBucket, unresponsive: threading.Event
    ) -> bool:
        attempt = 0
        while not unresponsive.is_set():
            window_s = self._eviction_window_s(ctx)
            if window_s <= 0 or not bucket.acquire(ctx.deadline.cap(window_s)):
                return False
            attempt += 1
            grace_s = max(1, int(min(ctx.request.drain_budget_s, ctx.deadline.left_s())))
            body = k8s.V1Eviction(
                metadata=k8s.V1ObjectMeta(name=pod.name, namespace=pod.namespace),
                delete_options=k8s.V1DeleteOptions(grace_period_seconds=grace_s),
            )
            started = time.monotonic()
            status: int | None = None
            retry_after_s: float | None = None
            outcome: EvictionOutcome
            try:
                self._call(
                    "evict",
                    self._api.create_namespaced_pod_eviction,
                    pod.name,
                    pod.namespace,
                    body,
                )
                outcome, status = "accepted", 201
            except ApiException as error:
                status = error.status
                outcome = {404: "gone", 429: "throttled"}.get(status or 0, "failed")  # type: ignore[assignment]
                retry_after_s = _retry_after(error)
            except ApiUnresponsiveError:
                outcome = "timed_out"
            duration_s = time.monotonic() - started
            ctx.recorder.record(
                EvictionAttempted(
                    instance_id=ctx.request.instance_id,
                    workload_id=ctx.request.workload_id,
                    pod=str(pod),
                    attempt=attempt,
                    outcome=outcome,
                    http_status=status,
                    duration_s=round(duration_s, 6),
                ),
                cause=ctx.drain_started_id,
                discriminator=f"{pod}#{attempt}",
                causation_id=ctx.drain_started_id,
            )
            if self.on_attempt is not None:
                self.on_attempt(outcome)
            if outcome in ("accepted", "gone"):
                return True
            if outcome == "timed_out":
                unresponsive.set()
                return False
            if status is not None and status != 429 and status < 500:
                return False  # refused for good (403, 400, 422): retrying cannot help
            backoff_s = retry_after_s if retry_after_s is not None else 0.1 * 2 ** (attempt - 1)
            time.sleep(max(0.0, min(backoff_s, _MAX_BACKOFF_S, self._eviction_window_s(ctx))))
        return False

    on_attempt: Any = None
    """Called with each attempt's outcome (the agent counts them in its metrics)."""

    def _verify(self, ctx: DrainContext, evicted: set[str]) -> tuple[bool, set[str]]:
        left = set(evicted)
        while True:
            try:
                left = {str(p) for p in self._pods()} & evicted
            except ApiUnresponsiveError as why:
                log.warning("node %s: cannot verify the drain: %s", self.node, why)
                return False, left
            if not left:
                return True, left
            if ctx.deadline.left_s() <= 0.2:
                return False, left
            time.sleep(0.2)


def _retry_after(error: ApiException) -> float | None:
    headers = error.headers or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
