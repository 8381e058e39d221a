"""The Kubernetes drain path (ADR-14) on the session's real kube-apiserver, as the agent runs
it: with a token of the spotcap-agent service account bound to its own node, and exactly the
RBAC of infra/kubernetes/agent-rbac.yaml. Cordon and taint; this node's pods only (not
DaemonSet, mirror or finished ones); evictions under a PodDisruptionBudget (the server's 429
retried inside the deadline until the budget allows it, or the local path when it never does);
the grace period each pod is given; the node's own rate limit; a 403 for every other verb.

Recorded exchanges (tests/kube_replay.py) remain for one thing a real server cannot show here:
an API server that answers, but slower than the agent's 800 ms cap (before the taint; and on an
eviction, after a fast taint and list). This one answers in milliseconds, and stalling it
(SIGSTOP) would stall every other test of the session that shares it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from agent.clock import WallClock
from agent.config import AgentConfig
from agent.drain.base import DrainPathImpl
from agent.drain.kubernetes import TAINT_KEY, KubernetesDrain
from agent.drain.local import LocalDrain
from agent.drain.ratelimit import TokenBucket
from agent.drainer import Drainer, DrainOutcome
from agent.logind import go_duration_s, inhibit_delay_warning, logind_inhibit_delay_s
from agent.metrics import AgentMetrics
from agent.records import Recorder
from infra import servers
from schemas.events import Envelope, EvictionAttempted
from tests import kube_support as kube
from tests.agent_support import bundle, config, notice, reap, workload
from tests.kube_replay import KubeReplay


class Collected:
    """Events as the spool writer would receive them."""

    def __init__(self) -> None:
        self.events: list[Envelope] = []
        self._lock = threading.Lock()

    def __call__(self, envelope: Envelope) -> None:
        with self._lock:
            self.events.append(envelope)

    def of(self, event_type: str) -> list[Any]:
        return [e.payload for e in self.events if e.event_type == event_type]


def _run(
    cfg: AgentConfig,
    deadline_s: float = 60.0,
    on_attempt: Callable[[str], None] | None = None,
) -> tuple[DrainOutcome, Collected]:
    local = LocalDrain(cfg.local)
    path = KubernetesDrain(cfg.kubernetes, cfg.drain, local, kubelet_grace_s=go_duration_s("20s"))
    metrics = AgentMetrics()

    def attempted(outcome: str) -> None:
        metrics.evictions.labels(outcome).inc()
        if on_attempt is not None:
            on_attempt(outcome)

    path.on_attempt = attempted
    events = Collected()
    clock = WallClock()
    recorder = Recorder(cfg.region, cfg.producer, clock, events)
    paths: dict[str, DrainPathImpl] = {"local": local, "kubernetes": path}
    drainer = Drainer(cfg, paths, recorder, clock, metrics)  # type: ignore[arg-type]
    note = notice(cfg.instance_id, deadline_s=deadline_s)
    request = drainer.request_for(
        bundle(scheduler="kubernetes", checkpoint_method="none"),
        workload_id="etl",
        trigger="notice",
        cause_event_id=note.event_id,
        deadline_at_us=note.deadline_at_us,
    )
    try:
        return drainer.run(request, path, time.monotonic()), events
    finally:
        path.close()


def _attempts(events: Collected) -> dict[str, list[str]]:
    attempts: list[EvictionAttempted] = events.of("eviction_attempted")
    by_pod: dict[str, list[str]] = {}
    for a in sorted(attempts, key=lambda a: a.attempt):
        by_pod.setdefault(a.pod, []).append(a.outcome)
    return by_pod


# -- the cluster's side -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(kubernetes: servers.Server) -> Iterator[k8s.ApiClient]:
    """The administrator's client, with the agent's RBAC and own-node policy applied and in
    force (an admission policy takes effect a moment after it is created)."""
    api = kube.admin(kubernetes)
    kube.apply(api, kube.MANIFESTS / "agent-rbac.yaml")
    probe, other = kube.node(api, kube.unique("probe")), kube.node(api, kube.unique("probe"))
    token = kube.service_account_token(api, "spotcap-system", "spotcap-agent", node_name=probe)
    agent = kube.client_with_token(kubernetes, token)

    def policy_in_force() -> bool:
        try:
            kube.core(agent).patch_node(other, {"spec": {"unschedulable": True}})
        except ApiException as error:
            return error.status == 403 and "only the node its token is bound to" in str(error.body)
        return False

    kube.wait_until(policy_in_force, 60, "the agent's own-node admission policy to be in force")
    agent.close()  # type: ignore[no-untyped-call]
    try:
        yield api
    finally:
        api.close()  # type: ignore[no-untyped-call]


def _agent_config(
    tmp_path: Path, server: servers.Server, api: k8s.ApiClient, node_name: str, **tables: Any
) -> AgentConfig:
    """The agent's configuration: its API server, CA, and a token bound to its node."""
    token = tmp_path / "token"
    token.touch(mode=0o600)
    token.write_text(
        kube.service_account_token(api, "spotcap-system", "spotcap-agent", node_name=node_name)
    )
    kubernetes = {
        "node_name": node_name,
        "api_url": server.address,
        "ca_file": str(server.data_dir / "pki" / "apiserver.crt"),
        "token_file": str(token),
        "eviction_parallelism": 4,
        **tables.pop("kubernetes", {}),
    }
    return config(
        tmp_path,
        kubernetes=kubernetes,
        local=tables.pop("local", {"match_cmdline": ["no-such-workload"], "term_grace_s": 5.0}),
        # The 800 ms cap is the recordings' to show (below); here a loaded machine must not
        # turn a slow answer into the local path.
        drain={"safety_margin_s": 1.0, "scheduler_call_timeout_s": 5.0},
    )


def _pods(api: k8s.ApiClient, node_name: str) -> set[str]:
    listed = kube.core(api).list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node_name}")
    return {f"{p.metadata.namespace}/{p.metadata.name}" for p in listed.items}


# -- the scheduler path -------------------------------------------------------------------------


def test_the_agent_cordons_and_evicts_its_own_pods_under_a_disruption_budget(
    tmp_path: Path, kubernetes: servers.Server, cluster: k8s.ApiClient
) -> None:
    api = cluster
    web, batch = kube.namespace(api, kube.unique("web")), kube.namespace(api, kube.unique("batch"))
    here, there = kube.node(api, kube.unique("node")), kube.node(api, kube.unique("node"))
    app = {"app": "web"}
    for name, node_name in (("web-0", here), ("web-1", here), ("web-2", there)):
        kube.running_pod(api, web, name, node_name=node_name, labels=app)
    kube.running_pod(api, batch, "etl-worker-0", node_name=here)
    kube.running_pod(api, batch, "log-agent", node_name=here, owner_kind="DaemonSet")
    kube.running_pod(api, batch, "static", node_name=here,
                     annotations={"kubernetes.io/config.mirror": "a1b2"})  # fmt: skip
    kube.running_pod(api, batch, "finished", node_name=here)
    kube.set_phase(api, batch, "finished", "Succeeded")
    kube.running_pod(api, batch, "elsewhere", node_name=there)
    # Three healthy web pods, at least two must stay: one disruption at a time.
    kube.disruption_budget(api, web, "web", app, min_available=2)
    kube.budget_status(api, web, "web", healthy=3, desired=2, expected=3)

    throttled = threading.Event()

    def controllers(kubelet: kube.Kubelet) -> None:
        """The ReplicaSet and disruption controllers: once the agent has met the budget's 429
        and the first web pod is gone, a replacement runs on the other node and the budget
        allows one more disruption."""
        throttled.wait(timeout=60)
        kube.wait_until(
            lambda: any(k.startswith(f"{web}/web-") for k in kubelet.removed), 60,
            "the first web pod to be removed",
        )  # fmt: skip
        kube.running_pod(api, web, "web-3", node_name=there, labels=app)
        kube.budget_status(api, web, "web", healthy=3, desired=2, expected=3)

    cfg = _agent_config(tmp_path, kubernetes, api, here)
    with kube.Kubelet(api, {here}) as kubelet:
        helper = threading.Thread(target=controllers, args=(kubelet,), daemon=True)
        helper.start()
        outcome, events = _run(
            cfg, on_attempt=lambda outcome: throttled.set() if outcome == "throttled" else None
        )
        helper.join(timeout=60)

    assert outcome.result.path == "kubernetes" and outcome.result.verified
    assert not outcome.result.fell_back_to_local and not outcome.overrun
    node = kube.core(api).read_node(here)
    assert node.spec.unschedulable is True
    # Added beside the taint the server put on the new node (TaintNodesByCondition), kept.
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [
        ("node.kubernetes.io/not-ready", None, "NoSchedule"),
        (TAINT_KEY, "notice", "NoSchedule"),
    ]
    assert not kube.core(api).read_node(there).spec.unschedulable
    evicted = {f"{web}/web-0", f"{web}/web-1", f"{batch}/etl-worker-0"}
    assert set(kubelet.removed) == evicted
    # DaemonSet, mirror and finished pods stay, and so does everything on the other node.
    assert _pods(api, here) == {f"{batch}/log-agent", f"{batch}/static", f"{batch}/finished"}
    assert {f"{web}/web-2", f"{web}/web-3", f"{batch}/elsewhere"} <= _pods(api, there)
    # Each pod was given a grace period that ends before the deadline (60 s less the margin).
    assert all(grace is not None and 1 <= grace <= 59 for grace in kubelet.grace_s.values())
    by_pod = _attempts(events)
    assert by_pod[f"{batch}/etl-worker-0"] == ["accepted"]
    first, second = sorted((by_pod[f"{web}/web-0"], by_pod[f"{web}/web-1"]), key=len)
    assert first == ["accepted"]
    assert second[-1] == "accepted" and set(second[:-1]) == {"throttled"} and len(second) >= 2
    statuses = {a.http_status for a in events.of("eviction_attempted")}
    assert statuses == {201, 429}
    assert len({e.event_id for e in events.events}) == len(events.events)
    (done,) = events.of("drain_completed")
    assert done.path == "kubernetes" and done.verified and not done.fell_back_to_local


def test_a_budget_that_never_allows_the_eviction_leaves_the_pod_to_the_local_path(
    tmp_path: Path, kubernetes: servers.Server, cluster: k8s.ApiClient
) -> None:
    api = cluster
    ns = kube.namespace(api, kube.unique("db"))
    here = kube.node(api, kube.unique("node"))
    kube.running_pod(api, ns, "db-0", node_name=here, labels={"app": "db"})
    kube.disruption_budget(api, ns, "db", {"app": "db"}, min_available=1)
    kube.budget_status(api, ns, "db", healthy=1, desired=1, expected=1)
    marker = f"spotcap-k8s-{tmp_path.name}"
    procs = [workload(marker, trap_term=True)]
    local = {"match_cmdline": [marker], "term_grace_s": 2.0}
    cfg = _agent_config(tmp_path, kubernetes, api, here, local=local)
    try:
        # 14 s: 13 s after the margin, of which the local path keeps 4 (2 s grace, 2 s kill).
        outcome, events = _run(cfg, deadline_s=14.0)
        assert procs[0].wait(timeout=10) == 0  # the local path's SIGTERM, handled
    finally:
        reap(procs)
    assert outcome.result.path == "local" and outcome.result.fell_back_to_local
    assert outcome.result.verified and not outcome.overrun
    assert f"{ns}/db-0" in outcome.result.detail
    (tries,) = _attempts(events).values()
    assert len(tries) >= 2 and set(tries) == {"throttled"}
    pod = kube.core(api).read_namespaced_pod("db-0", ns)
    assert pod.metadata.deletion_timestamp is None  # the budget held: nothing was evicted
    (done,) = events.of("drain_completed")
    assert done.path == "local" and done.fell_back_to_local and done.verified


class _TimedBucket(TokenBucket):
    """The node's token bucket, noting when each token was asked for and when it came."""

    taken: ClassVar[list[tuple[float, float]]] = []

    def acquire(self, timeout_s: float) -> bool:
        asked = time.monotonic()
        got = super().acquire(timeout_s)
        if got:
            self.taken.append((asked, time.monotonic()))
        return got


def test_evictions_keep_to_the_nodes_own_rate_limit(
    tmp_path: Path,
    kubernetes: servers.Server,
    cluster: k8s.ApiClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = cluster
    ns = kube.namespace(api, kube.unique("ci"))
    here = kube.node(api, kube.unique("node"))
    count, rate_per_s, burst = 12, 4.0, 2
    for n in range(count):
        kube.running_pod(api, ns, f"job-{n}", node_name=here)
    limits = {"eviction_rate_per_s": rate_per_s, "eviction_burst": burst,
              "eviction_parallelism": 8}  # fmt: skip
    cfg = _agent_config(tmp_path, kubernetes, api, here, kubernetes=limits)
    _TimedBucket.taken.clear()
    monkeypatch.setattr("agent.drain.kubernetes.TokenBucket", _TimedBucket)
    with kube.Kubelet(api, {here}):
        outcome, events = _run(cfg)
    assert outcome.result.path == "kubernetes" and outcome.result.verified
    assert {o for tries in _attempts(events).values() for o in tries} == {"accepted"}
    assert len(_TimedBucket.taken) == count
    # A bucket of `burst` refilled at `rate_per_s` gives at most burst + rate * t tokens in t
    # seconds. t is measured from when the first token was asked for to when the last came, so
    # it is never shorter than the true span: a loaded machine cannot fail this, a bucket that
    # let the evictions through faster would (12 in about 0.2 s where 2.5 s are due).
    span_s = max(came for _, came in _TimedBucket.taken) - min(a for a, _ in _TimedBucket.taken)
    assert count <= burst + rate_per_s * span_s, f"{count} evictions in {span_s:.2f} s"


def test_the_agents_token_can_do_its_drain_and_nothing_else(
    kubernetes: servers.Server, cluster: k8s.ApiClient
) -> None:
    api = cluster
    ns = kube.namespace(api, kube.unique("rbac"))
    here, there = kube.node(api, kube.unique("node")), kube.node(api, kube.unique("node"))
    kube.running_pod(api, ns, "app-0", node_name=here)
    token = kube.service_account_token(api, "spotcap-system", "spotcap-agent", node_name=here)
    agent = kube.client_with_token(kubernetes, token)
    core = kube.core(agent)

    def refused(call: Callable[[], object]) -> str:
        with pytest.raises(ApiException) as error:
            call()
        assert error.value.status == 403, error.value.body
        return str(error.value.body)

    try:
        # What the drain needs: read, cordon and taint its own node, list pods, evict.
        core.read_node(here)
        core.patch_node(here, {"spec": {"unschedulable": True}})
        core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={here}")
        eviction = {"metadata": {"name": "app-0", "namespace": ns}}
        core.create_namespaced_pod_eviction("app-0", ns, eviction)
        # RBAC refuses every other verb.
        refused(lambda: core.delete_namespaced_pod("app-0", ns))
        refused(lambda: core.read_namespaced_pod("app-0", ns))
        refused(lambda: core.create_namespaced_pod(ns, kube.pod_body("more", node_name=here)))
        refused(
            lambda: core.patch_namespaced_pod("app-0", ns, {"metadata": {"labels": {"a": "b"}}})
        )
        refused(lambda: core.list_namespaced_secret(ns))
        refused(lambda: core.delete_node(here))
        refused(lambda: core.patch_node_status(here, {"status": {"phase": "Terminated"}}))
        # The admission policy: its own node only, and only cordon and taints.
        assert "only the node its token is bound to" in refused(
            lambda: core.patch_node(there, {"spec": {"unschedulable": True}})
        )
        assert "not change its labels" in refused(
            lambda: core.patch_node(here, {"metadata": {"labels": {"spotcap.io/x": "y"}}})
        )
    finally:
        agent.close()  # type: ignore[no-untyped-call]
    # A token of the same account bound to no node may change no node at all.
    unbound = kube.client_with_token(
        kubernetes, kube.service_account_token(api, "spotcap-system", "spotcap-agent")
    )
    try:
        with pytest.raises(ApiException) as error:
            kube.core(unbound).patch_node(here, {"spec": {"unschedulable": True}})
        assert error.value.status == 403
    finally:
        unbound.close()  # type: ignore[no-untyped-call]
    assert not kube.core(api).read_node(there).spec.unschedulable


# -- what only recorded exchanges can show ------------------------------------------------------


def _replayed(tmp_path: Path, replay: KubeReplay, marker: str) -> AgentConfig:
    return config(
        tmp_path,
        kubernetes={"node_name": "node-0412", "api_url": replay.url, "eviction_parallelism": 4},
        local={"match_cmdline": [marker], "term_grace_s": 5.0},
        drain={"safety_margin_s": 1.0},
    )


def test_an_api_slower_than_800_ms_hands_the_drain_to_the_local_path(tmp_path: Path) -> None:
    marker = f"spotcap-k8s-{tmp_path.name}"
    procs = [workload(marker, trap_term=True)]
    try:
        with KubeReplay("slow_api") as replay:
            outcome, events = _run(_replayed(tmp_path, replay, marker))
            replay.check()
        assert procs[0].wait(timeout=5) == 0  # the local path's SIGTERM
    finally:
        reap(procs)
    assert outcome.result.path == "local" and outcome.result.fell_back_to_local
    assert outcome.result.verified
    assert replay.requests("PATCH") == [] and replay.requests("POST") == []
    (done,) = events.of("drain_completed")
    assert done.path == "local" and done.fell_back_to_local and done.verified


def test_an_eviction_slower_than_800_ms_is_recorded_and_the_local_path_finishes(
    tmp_path: Path,
) -> None:
    marker = f"spotcap-k8s-{tmp_path.name}"
    procs = [workload(marker)]
    try:
        with KubeReplay("slow_eviction") as replay:
            outcome, events = _run(_replayed(tmp_path, replay, marker))
            replay.check()
        assert procs[0].wait(timeout=5) != 0
    finally:
        reap(procs)
    (attempt,) = events.of("eviction_attempted")
    assert attempt.outcome == "timed_out" and attempt.http_status is None
    assert outcome.result.path == "local" and outcome.result.fell_back_to_local
    assert outcome.result.verified


def test_a_logind_inhibit_delay_shorter_than_the_kubelet_grace_period_is_warned(
    tmp_path: Path,
) -> None:
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "shutdownGracePeriod: 1m30s\nshutdownGracePeriodCriticalPods: 10s\n"
    )
    logind = tmp_path / "logind.conf"
    logind.write_text("[Login]\n#InhibitDelayMaxSec=5\n")
    assert logind_inhibit_delay_s(logind) == 5.0
    warning = inhibit_delay_warning(kubelet, logind)
    assert warning is not None and "90 s" in warning and "5 s" in warning
    drop_in = tmp_path / "logind.conf.d"
    drop_in.mkdir()
    (drop_in / "90-kubelet.conf").write_text("[Login]\nInhibitDelayMaxSec=2min\n")
    assert logind_inhibit_delay_s(logind) == 120.0
    assert inhibit_delay_warning(kubelet, logind) is None
