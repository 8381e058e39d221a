"""The Kubernetes drain path through the official client over HTTP, against recorded API
exchanges (tests/kube_replay.py): the scheduler path (cordon and taint, this node's pods only,
evictions in parallel, a 429 retried inside the deadline and recorded per attempt, verified),
and the local path when the API answers slower than the 800 ms cap."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from agent.clock import WallClock
from agent.config import AgentConfig
from agent.drain.base import DrainPathImpl
from agent.drain.kubernetes import KubernetesDrain
from agent.drain.local import LocalDrain
from agent.drainer import Drainer
from agent.logind import go_duration_s, inhibit_delay_warning, logind_inhibit_delay_s
from agent.metrics import AgentMetrics
from agent.records import Recorder
from schemas.events import Envelope, EvictionAttempted
from tests.agent_support import bundle, config, notice, reap, workload
from tests.kube_replay import KubeReplay

NODE = "node-0412"


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


def _run(cfg: AgentConfig, replay: KubeReplay, deadline_s: float = 60.0) -> tuple[Any, Collected]:
    local = LocalDrain(cfg.local)
    path = KubernetesDrain(cfg.kubernetes, cfg.drain, local, kubelet_grace_s=go_duration_s("20s"))
    metrics = AgentMetrics()
    path.on_attempt = lambda outcome: metrics.evictions.labels(outcome).inc()
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
    import time

    outcome = drainer.run(request, path, time.monotonic())
    path.close()
    return outcome, events


def _config(tmp_path: Path, replay: KubeReplay, marker: str = "no-such-workload") -> AgentConfig:
    return config(
        tmp_path,
        kubernetes={"node_name": NODE, "api_url": replay.url, "eviction_parallelism": 4},
        local={"match_cmdline": [marker], "term_grace_s": 5.0},
        drain={"safety_margin_s": 1.0},
    )


def test_the_scheduler_path_taints_evicts_retries_a_429_and_verifies(tmp_path: Path) -> None:
    with KubeReplay("drain_node") as replay:
        outcome, events = _run(_config(tmp_path, replay), replay)
        replay.check()
    assert outcome.result.path == "kubernetes" and outcome.result.verified
    assert not outcome.result.fell_back_to_local and not outcome.overrun
    (patch,) = replay.requests("PATCH")
    assert patch.body["spec"]["unschedulable"] is True
    evictions = replay.requests("POST")
    evicted = {c.path.split("/")[6] for c in evictions}
    # DaemonSet, mirror and finished pods stay; only this node's workload pods are evicted.
    assert evicted == {"web-7d9f8c6b5-0", "web-7d9f8c6b5-1", "etl-worker-0"}
    assert all(c.body["deleteOptions"]["gracePeriodSeconds"] <= 59 for c in evictions)
    attempts: list[EvictionAttempted] = events.of("eviction_attempted")
    by_pod: dict[str, list[str]] = {}
    for a in sorted(attempts, key=lambda a: a.attempt):
        by_pod.setdefault(a.pod, []).append(a.outcome)
    assert by_pod == {
        "web/web-7d9f8c6b5-0": ["accepted"],
        "web/web-7d9f8c6b5-1": ["throttled", "throttled", "accepted"],
        "batch/etl-worker-0": ["accepted"],
    }
    assert {a.http_status for a in attempts} == {201, 429}
    assert len({e.event_id for e in events.events}) == len(events.events)
    (done,) = events.of("drain_completed")
    assert done.path == "kubernetes" and done.verified and not done.fell_back_to_local
    assert done.deadline_margin_s is not None and done.deadline_margin_s > 50


def test_an_api_slower_than_800_ms_hands_the_drain_to_the_local_path(tmp_path: Path) -> None:
    marker = f"spotcap-k8s-{tmp_path.name}"
    procs = [workload(marker, trap_term=True)]
    try:
        with KubeReplay("slow_api") as replay:
            outcome, events = _run(_config(tmp_path, replay, marker), replay)
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
            outcome, events = _run(_config(tmp_path, replay, marker), replay)
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
