"""The long-running agent: intake, bundle, drains, spool, usage samples and metrics together.

Nothing here waits for the control plane: notices come from the NATS relay or the metadata
poll, the contract from the signed bundle on disk, the drain from the node's own scheduler or
its processes (DESIGN.md §6). `Agent.start` returns once everything runs in the background;
`Agent.close` stops it within bounded waits.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from agent.bundle import BundleStore
from agent.clock import Clock, WallClock
from agent.config import AgentConfig
from agent.drain.base import DrainPathImpl
from agent.drain.local import LocalDrain
from agent.drainer import Drainer
from agent.identity import NodeIdentityClient, identity_round
from agent.intake import NoticeIntake, cancel_tasks
from agent.logind import inhibit_delay_warning, kubelet_grace_s
from agent.metrics import AgentMetrics
from agent.records import Recorder
from agent.spool import Spool
from agent.spool_writer import SpoolWriter
from agent.workloads import WorkloadChannel
from contracts.bundles import Bundle
from schemas.events import DrainPath, NoticeReceived, UsageInterval
from schemas.notices import Delivery, Notice

log = logging.getLogger(__name__)

BUNDLE_CHECK_S = 5.0


def build_paths(config: AgentConfig) -> dict[DrainPath, DrainPathImpl]:
    """The drain paths this node's configuration enables; ``local`` always."""
    local = LocalDrain(config.local)
    paths: dict[DrainPath, DrainPathImpl] = {"local": local}
    if config.kubernetes.node_name:
        from agent.drain.kubernetes import KubernetesDrain

        paths["kubernetes"] = KubernetesDrain(
            config.kubernetes,
            config.drain,
            local,
            kubelet_grace_s=kubelet_grace_s(config.kubernetes.kubelet_config),
        )
    if config.slurm.node_name:
        from agent.drain.slurm import SlurmDrain

        paths["slurm"] = SlurmDrain(config.slurm, config.drain, local)
    return paths


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        clock: Clock | None = None,
        paths: Mapping[DrainPath, DrainPathImpl] | None = None,
        metrics: AgentMetrics | None = None,
        serve_metrics: bool = True,
    ) -> None:
        self.config = config
        self.clock = clock or WallClock()
        self.metrics = metrics or AgentMetrics()
        self._serve_metrics = serve_metrics and bool(config.metrics_listen)
        self.metrics_port: int | None = None
        self.bundles = BundleStore(config.bundle, config.state_dir, self.metrics)
        self.paths = dict(paths) if paths is not None else build_paths(config)
        self.metrics.prepare({"local", *self.paths})  # a failing path falls back to local
        for path in self.paths.values():
            if hasattr(path, "on_attempt"):  # the Kubernetes path counts its eviction calls
                path.on_attempt = lambda outcome: self.metrics.evictions.labels(outcome).inc()
        self.spool = Spool(
            config.spool_dir,
            segment_bytes=config.spool.segment_bytes,
            max_bytes=config.spool.max_bytes,
        )
        self.writer = SpoolWriter(
            self.spool,
            on_error=lambda _: self.metrics.spool_errors.inc(),
            on_written=self._spool_written,
        )
        self.recorder = Recorder(config.region, config.producer, self.clock, self.writer.submit)
        self.channel = (
            WorkloadChannel(
                config.checkpoint.socket,
                self.recorder,
                config.instance_id,
                lambda: self.bundles.current,
            )
            if config.checkpoint.socket is not None
            else None
        )
        self.drainer = Drainer(
            config, self.paths, self.recorder, self.clock, self.metrics, channel=self.channel
        )
        self.intake = NoticeIntake(
            config.region,
            config.instance_id,
            nats_servers=config.notices.nats,
            metadata_url=config.notices.metadata_url,
            poll_interval_s=config.notices.poll_interval_s,
            http_timeout_s=config.notices.http_timeout_s,
            clock_us=self.clock.now_us,
            on_delivery=self._deliver,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._dropped_seen = 0
        self.deliveries = 0

    def _spool_written(self, spool: Spool, _lines: int) -> None:
        self.metrics.spool_bytes.set(spool.total_bytes)
        if spool.dropped_samples > self._dropped_seen:
            self.metrics.spool_dropped.inc(spool.dropped_samples - self._dropped_seen)
            self._dropped_seen = spool.dropped_samples

    async def start(self) -> None:
        if self._serve_metrics and self.config.metrics_listen:
            self.metrics_port = self.metrics.serve(self.config.metrics_listen)
        self.bundles.load()
        if "kubernetes" in self.paths:
            warning = inhibit_delay_warning(
                self.config.kubernetes.kubelet_config, self.config.kubernetes.logind_conf
            )
            if warning:
                log.warning(warning)
        self.metrics.spool_bytes.set(self.spool.total_bytes)
        if self.channel is not None:
            self.channel.start()
        self.drainer.start_thread()
        await self.intake.start()
        self._tasks = [
            *self._identity_task(),
            asyncio.create_task(self._bundle_refresh(), name="agent-bundle"),
        ]
        if self.config.vcpu > 0:
            self._tasks.append(asyncio.create_task(self._usage(), name="agent-usage"))
        log.info(
            "agent for %s in %s: NATS %s, metadata %s every %g s, paths %s, spool %s",
            self.config.instance_id,
            self.config.region,
            ",".join(self.config.notices.nats) or "off",
            self.config.notices.metadata_url or "off",
            self.config.notices.poll_interval_s,
            "/".join(sorted(self.paths)),
            self.config.spool_dir,
        )

    async def close(self, drain_wait_s: float = 10.0) -> None:
        await cancel_tasks(self._tasks)
        self._tasks.clear()
        await self.intake.close()
        await asyncio.to_thread(self.drainer.stop, drain_wait_s)
        if self.channel is not None:
            self.channel.close()
        await asyncio.to_thread(self.writer.flush, 5.0)
        self.writer.close()
        self.metrics.close()
        for path in self.paths.values():
            closer = getattr(path, "close", None)
            if callable(closer):
                closer()

    async def __aenter__(self) -> Agent:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- background work --------------------------------------------------------------------

    def _deliver(self, delivery: Delivery) -> None:
        """The intake's callback: a delivery is handled where it was read, on the event loop
        (a queue and a task between them cost a turn of a busy loop: tens of ms in a wave)."""
        try:
            self.handle(delivery)
        except Exception:  # logged; the intake must go on delivering
            log.exception("handling %s failed", delivery.message.event_id)

    def handle(self, delivery: Delivery) -> None:
        """Act on the first copy of a notice or advisory (synchronous: never waits on I/O)."""
        received_mono_s = time.monotonic()
        self.deliveries += 1
        message = delivery.message
        kind = "notice" if isinstance(message, Notice) else "advisory"
        self.metrics.notice_count[delivery.source, kind].inc()
        bundle = self.bundles.current
        if isinstance(message, Notice):
            self.recorder.record(
                NoticeReceived(
                    instance_id=message.instance_id,
                    pool_id=message.pool_id,
                    workload_id=message.workload_id,
                    deadline_at=message.deadline_at_us,
                    source=delivery.source,
                ),
                cause=message.event_id,
                event_id=message.event_id,
                occurred_at_us=delivery.received_at_us,
            )
            request = self.drainer.request_for(
                bundle,
                workload_id=message.workload_id,
                trigger="notice",
                cause_event_id=message.event_id,
                deadline_at_us=message.deadline_at_us,
                issued_at_us=message.issued_at_us,
            )
            self.drainer.start(request, self.drainer.path_for(bundle), received_mono_s)
            return
        if bundle is None or not bundle.proactive_drain_on_advisory:
            log.info(
                "advisory %s: not draining, the contract does not enable proactive drain (ADR-16)",
                message.event_id,
            )
            return
        request = self.drainer.request_for(
            bundle,
            workload_id=bundle.workload_id,
            trigger="advisory",
            cause_event_id=message.event_id,
            deadline_at_us=message.expected_reclaim_at_us,
        )
        self.drainer.start(request, self.drainer.path_for(bundle), received_mono_s)

    def _identity_task(self) -> list[asyncio.Task[None]]:
        if not self.config.bundle.service_url:
            return []
        client = NodeIdentityClient(self.config.bundle, self.config.region,
                                    self.config.instance_id)  # fmt: skip
        return [asyncio.create_task(self._identity(client), name="agent-identity")]

    async def _identity(self, client: NodeIdentityClient) -> None:
        """Renew the node certificate when due and fetch the bundle over mutual TLS (ADR-31),
        off the event loop: a slow service never delays a notice."""
        while True:
            said = await asyncio.to_thread(identity_round, client, self.config.bundle.path)
            log.debug("bundle service: %s", said)
            self.bundles.refresh()
            await asyncio.sleep(self.config.bundle.fetch_every_s)

    async def _bundle_refresh(self) -> None:
        while True:
            await asyncio.sleep(BUNDLE_CHECK_S)
            self.bundles.refresh()
            for source, count in list(self.intake.duplicates.items()):
                self.metrics.duplicates.labels(source).inc(count)
                self.intake.duplicates[source] -= count

    async def _usage(self) -> None:
        """A usage sample every `usage_sample_s` of (event) time: what the node ran on."""
        interval_s = self.config.spool.usage_sample_s
        start_us = self.clock.now_us()
        while True:
            await asyncio.sleep(interval_s / self.clock.speed)
            end_us = self.clock.now_us()
            bundle = self.bundles.current
            self.recorder.record(
                UsageInterval(
                    workload_id=bundle.workload_id if bundle else "unknown",
                    instance_id=self.config.instance_id,
                    pool_id=self.config.pool_id,
                    purchase_model=self.config.purchase_model,
                    start_at=start_us,
                    end_at=end_us,
                    vcpu=self.config.vcpu,
                    used_vcpu_h=self.config.vcpu * (end_us - start_us) / 3.6e9,
                ),
                cause=f"{self.config.instance_id}@{start_us}",
            )
            start_us = end_us


def check(config: AgentConfig) -> tuple[Bundle | None, dict[str, Any]]:
    """What the agent would do with `config`, as `run` would load it: the bundle that verifies
    (None: none does, and the node could not drain by its contract) and a report of it, its
    drain paths, notice channels, spool and warnings."""
    bundle = BundleStore(config.bundle, config.state_dir).load()
    k8s = config.kubernetes
    warning = inhibit_delay_warning(k8s.kubelet_config, k8s.logind_conf) if k8s.node_name else None
    paths = (("kubernetes", k8s.node_name), ("slurm", config.slurm.node_name), ("local", True))
    return bundle, {
        "instance_id": config.instance_id,
        "region": config.region,
        "bundle": bundle.model_dump(mode="json") if bundle else None,
        "paths": [p for p, on in paths if on],
        "nats": list(config.notices.nats),
        "metadata_url": config.notices.metadata_url,
        "poll_interval_s": config.notices.poll_interval_s,
        "spool_dir": str(config.spool_dir),
        "warnings": [warning] if warning else [],
    }


def describe_bundle(bundle: Bundle) -> str:
    """The bundle's drain-relevant fields in one line, as `spotcap agent check` shows them."""
    proactive = "on" if bundle.proactive_drain_on_advisory else "off"
    return (
        f"{bundle.workload_id} v{bundle.contract_version}: {bundle.scheduler}, drain budget "
        f"{bundle.drain_budget_s} s, checkpoint {bundle.checkpoint_method}, "
        f"proactive drain {proactive}"
    )


def no_bundle(config: AgentConfig) -> tuple[str, str]:
    """Why the node could not drain by its contract when no bundle verifies, and the fix."""
    return (
        f"no bundle verifies: neither {config.bundle.path} nor the last good one in "
        f"{config.state_dir}",
        "write this workload's signed bundle and its public key (spotcap contracts compile)",
    )


def settle_heap() -> None:
    """Once the agents of this process have started: collect, then move the start-up heap
    (modules, bundles, clients, metrics) out of the cyclic collector's reach for good.

    A full collection walks the whole heap, and one falling in a wave holds every notice of the
    process back (625 agents in one process, as in ``bench/agent.py``: 0.46 s a collection);
    after the freeze it walks only what was made since."""
    gc.collect()
    gc.freeze()


async def run_until_stopped(
    config: AgentConfig,
    beside: Callable[[threading.Event], None] | None = None,
    clock: Clock | None = None,
) -> None:
    """Run the agent until SIGTERM or SIGINT (SIGHUP reloads the bundle, as `systemctl reload`
    does); `beside`, if given, runs in a thread of its own until the agent stops and is told so
    by its event (the embedded shipper, `agent.ship.ship_beside`)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    beside_stop = threading.Event()
    thread = None
    async with Agent(config, clock=clock) as node:
        settle_heap()
        loop.add_signal_handler(signal.SIGHUP, node.bundles.load)
        if node.metrics_port is not None:
            host = config.metrics_listen.rpartition(":")[0] if config.metrics_listen else ""
            log.info("metrics on http://%s:%s/metrics", host, node.metrics_port)
        if beside is not None:
            thread = threading.Thread(
                target=beside, args=(beside_stop,), name="beside", daemon=True
            )
            thread.start()
        await stop.wait()
    beside_stop.set()
    if thread is not None:
        thread.join(10.0)
