"""The deciders in the loop: they drive the simulated region through its orchestrator seam.

`DecidersOrchestrator` implements `sim.orchestration.Orchestrator`. It feeds what the
region publishes to the deciders through the shared per-event core (`streams.runtime.core`,
the same core the embedded runner and replay use), publishes their decisions into the region's
log at sim time, and carries out the provider calls the actuator guard allows:

* **Settling an instant.** Events are gathered as they are observed; once an instant is
  complete (a wake-up after everything the region does in that microsecond,
  ``wake_at(..., last=True)``), its events go to the core (`DeciderCore.process`, which keeps
  the input facts) in the merged history's order: by topic and partition (the log's order of
  one instant across partitions, `streams.merged`), and within a partition as published (its
  offsets). The loop therefore needs the partition counts of the log the run is written to
  (`topics`). The decisions are published at that instant, and so are in the log with the
  region's events. The loop runs the core with a clock of one microsecond (`LOOP_RUNTIME`):
  a timer fires at its due time exactly, and its decisions (stamped with that time) are
  published then; the loop settles that instant even when nothing happens in it. A replay of
  the log with the same runtime settings puts the same clock before the next fact
  (`streams.runtime.core.Sequence`). (With the 1 s clock of the partitioned runtime a timer's
  decision would be made up to a second after the time it carries, which a simulated region,
  where sim time is event time, cannot publish.)
* **Acting.** The guard judges every call a decision implies (token budget of 10 calls/s of
  event time, termination breaker, ownership): an allowed call goes out one microsecond after
  the decision, or at the guard's ``not_before`` when it was throttled; a refused one never (the
  refusal is a decision in the log). Launches carry the orchestrator's tags (owner, workload,
  pool), the role (`spotcap.io/role` = floor, fallback or spread) and the claim they serve
  (`spotcap.io/claim`, which the region's schedulers count and whose release scales it down).
  A launch the provider refuses becomes `launch_failed` (not retryable: the fallback arbiter
  covers it).
* **What comes back.** The provider's answers (launched, deleted, failed) are facts of the
  instant of the call, observed and settled like any other: nothing a decision causes lands in
  the instant it was made, so a replay of the log puts every instant's inputs in the same order
  and makes the same decisions: the embedded runner over the recorded log makes them byte for
byte (tests/test_loop_replay.py).

Escalations wait for the region's approvers (`sim.approver`); returns delete the
fallback's instances; a released claim's instances are deleted at an orderly pace.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from provider.base import (
    POOL_TAG,
    CapacityProvider,
    CapacityUnavailableError,
    DeleteRequest,
    LaunchRequest,
    ProviderError,
    UnknownInstanceError,
    owned_tags,
)
from schemas.events import (
    CapacityClaimOpened,
    CapacityReleased,
    Envelope,
    FallbackDecided,
    FallbackReturned,
    FallbackReviewed,
    InstanceLaunched,
    InstanceLost,
    LaunchFailed,
    NoticeReceived,
    PlacementDecided,
    ReplacementRequested,
)
from sim.orchestration import OrchestratorHost
from streams.deciders.actuator import Call, Verdict
from streams.deciders.settings import DeciderSettings
from streams.deciders.workload import (
    CLAIM_TAG,
    FALLBACK_ROLE,
    FLOOR_ROLE,
    ROLE_TAG,
    SPARE_ROLE,
    SPREAD_ROLE,
)
from streams.log import TopicSpec
from streams.partitioner import partition_for
from streams.runtime.core import DERIVED_PREFIX, DeciderCore, RuntimeSettings
from streams.topics import LOGICAL_NAMES, region_topics, topic_name

ACTUATOR = "spotcap/actuator"  # the I/O side's producer (its launch_failed events)
SETTLE = "settle"
CALLS = "calls"
NEXT_US = 1  # calls go out one microsecond after the decision at the earliest
# The core's clock in the loop: timers fire at their due time, to the microsecond.
LOOP_RUNTIME = RuntimeSettings(clock_interval_s=1e-6, every_boundary=True)


def owned_by(orchestrator_id: str, settings: DeciderSettings | None = None) -> DeciderSettings:
    """`settings` (the defaults) for an orchestrator whose instances carry `orchestrator_id`
    as their owner tag: what the loop runs with, and what a replay of its log must use."""
    settings = settings or DeciderSettings()
    return replace(settings, actuator=replace(settings.actuator, orchestrator_id=orchestrator_id))


@dataclass(frozen=True, slots=True)
class _Pending:
    """A call the guard allowed, waiting for its time."""

    call: Call
    cause: Envelope  # the decision (or fact) the call carries out


class DecidersOrchestrator:
    """The deciders and the actuator as the simulated region's orchestrator."""

    def __init__(
        self,
        orchestrator_id: str,
        settings: DeciderSettings | None = None,
        *,
        topics: Sequence[TopicSpec] | None = None,
        runtime: RuntimeSettings | None = None,
    ) -> None:
        """`runtime`: the core's clock (`LOOP_RUNTIME` by default; a replay must use the
        same). `topics`: the region's topics as the log the run is written to has them (their
        partition counts order an instant's events as a replay of the log will); the default
        is `region_topics` of the host's region at full scale."""
        self.settings = owned_by(orchestrator_id, settings)
        self.runtime = runtime or LOOP_RUNTIME
        self.core = DeciderCore(self.settings, self.runtime)
        self.core.actuator_stage.collect_verdicts()
        self.orchestrator_id = orchestrator_id
        self._topics = topics
        self._partitions: dict[str, tuple[str, int]] = {}  # logical topic -> (name, partitions)
        self._host: OrchestratorHost | None = None
        self._inputs: list[Envelope] = []  # observed in the instant not settled yet
        self._settles: set[int] = set()  # instants with a settle asked for
        self._call_wakes: set[int] = set()
        self._calls: list[tuple[int, int, _Pending]] = []  # (not before, seq, call), a heap
        self._seq = 0
        self._claim_of: dict[str, str] = {}  # event or instance id -> the claim it serves
        self.counts: Counter[str] = Counter()  # what the I/O side did, for the summary

    # -- the seam ----------------------------------------------------------------------------

    def start(self, host: OrchestratorHost) -> None:
        self._host = host
        specs = self._topics if self._topics is not None else region_topics(host.region)
        counts = {spec.name: spec.partitions for spec in specs}
        for logical in LOGICAL_NAMES:
            name = topic_name(host.region, logical)
            if name in counts:
                self._partitions[logical] = (name, counts[name])

    def observe(self, event: Envelope) -> None:
        if event.producer.startswith(DERIVED_PREFIX):
            return  # its own, made by the core: not an input
        self._inputs.append(event)
        self._learn_claim(event)

    def act(self, now_us: int, provider: CapacityProvider, due: Sequence[str]) -> None:
        self._make_calls(now_us, provider)
        if SETTLE in due and now_us in self._settles:
            self._settles.discard(now_us)
            self._settle(now_us)
        elif self._inputs:
            self._settle_at(now_us)

    # -- settling an instant -----------------------------------------------------------------

    def _settle(self, now_us: int) -> None:
        inputs, self._inputs = sorted(self._inputs, key=self._merged_place), []
        core = self.core
        decisions = core.advance_to(now_us)  # the clocks up to now (those a fact would bring)
        for event in inputs:
            decisions += core.process(event)
        host = self._ready()
        for decision in decisions:
            self._learn_claim(decision)
            host.publish(decision)
        by_id = {d.event_id: d for d in decisions}
        for verdict in core.actuator_stage.take_verdicts():
            self._queue(verdict, by_id, inputs, now_us)
        due = core.next_due_us()
        if due is not None:  # a quiet key's timer: settle at the clock that fires it
            self._settle_at(core.next_clock_us(due))

    def _merged_place(self, event: Envelope) -> tuple[str, int]:
        """Where the merged history puts `event` among the events of its instant (a stable
        sort keeps the publication order, which is the offset order, within a partition)."""
        name, partitions = self._partitions[event.payload.TOPIC]
        return name, partition_for(event.key.encode(), partitions)

    def _settle_at(self, at_us: int) -> None:
        if at_us not in self._settles:
            self._settles.add(at_us)
            self._ready().wake_at(at_us, SETTLE, last=True)

    def _queue(
        self,
        verdict: Verdict,
        decisions: dict[str, Envelope],
        inputs: list[Envelope],
        now_us: int,
    ) -> None:
        if verdict.not_before_us is None:
            self.counts[f"{verdict.call.kind} refused"] += 1
            return
        cause_id = verdict.call.cause.event_id
        cause = decisions.get(cause_id) or next(e for e in inputs if e.event_id == cause_id)
        at_us = max(verdict.not_before_us, now_us + NEXT_US)
        self._seq += 1
        heapq.heappush(self._calls, (at_us, self._seq, _Pending(verdict.call, cause)))
        if at_us not in self._call_wakes:
            self._call_wakes.add(at_us)
            self._ready().wake_at(at_us, CALLS)

    # -- acting ------------------------------------------------------------------------------

    def _make_calls(self, now_us: int, provider: CapacityProvider) -> None:
        self._call_wakes.discard(now_us)
        calls = self._calls
        while calls and calls[0][0] <= now_us:
            _, _, pending = heapq.heappop(calls)
            if pending.call.kind == "launch":
                self._launch(pending, provider)
            else:
                self._delete(pending, provider)

    def _launch(self, pending: _Pending, provider: CapacityProvider) -> None:
        call, cause = pending.call, pending.cause
        host = self._ready()
        pool_id, workload_id = call.pool_id or "", call.workload_id or ""
        extra = {POOL_TAG: pool_id, ROLE_TAG: self._role(cause, pool_id)}
        claim = self._claim_of.get(cause.event_id)
        if claim is not None:
            extra[CLAIM_TAG] = claim
        request = LaunchRequest(
            pool_id,
            workload_id,
            owned_tags(self.orchestrator_id, workload_id, extra),
            causation_id=cause.event_id,
            correlation_id=cause.correlation_id,
        )
        try:
            provider.launch(request)
        except ProviderError as error:
            pool = host.catalogue.get(pool_id) if pool_id in host.catalogue else None
            host.emit(
                LaunchFailed(
                    workload_id=workload_id,
                    pool_id=pool_id,
                    vcpu=pool.size_vcpu if pool else 0,
                    purchase_model=pool.purchase_model if pool else "reclaimable",
                    error_class=type(error).__name__,
                    reason=str(error),
                    retryable=False,
                ),
                ACTUATOR,
                causation_id=cause.event_id,
                correlation_id=cause.correlation_id,
                discriminator=f"{call.index}",
            )
            reason = "no room" if isinstance(error, CapacityUnavailableError) else "error"
            self.counts[f"launch failed ({reason})"] += 1
        else:
            self.counts["launched"] += 1

    def _delete(self, pending: _Pending, provider: CapacityProvider) -> None:
        call, cause = pending.call, pending.cause
        payload = cause.payload
        if isinstance(payload, FallbackReturned):
            reason = "fallback returned to reclaimable capacity"
        elif isinstance(payload, CapacityReleased):
            reason = f"claim {payload.claim_id} released: its work is done"
        else:
            reason = "landed after its claim was released"
        request = DeleteRequest(
            call.instance_id or "",
            reason,
            causation_id=cause.event_id,
            correlation_id=cause.correlation_id,
        )
        try:
            provider.delete(request)
        except UnknownInstanceError:
            self.counts["delete of an instance already gone"] += 1
        else:
            self.counts["deleted"] += 1

    def _role(self, cause: Envelope, pool_id: str) -> str:
        """The role tag of an instance launched for `cause` in `pool_id` (ADR-11)."""
        host = self._ready()
        model = host.catalogue.get(pool_id).purchase_model if pool_id in host.catalogue else ""
        p = cause.payload
        if model == "reclaimable":
            return SPREAD_ROLE
        if model == "committed":
            # A placement without floor on committed capacity: work on room the floors left.
            spare = isinstance(p, PlacementDecided) and p.floor_vcpu == 0
            return SPARE_ROLE if spare else FLOOR_ROLE
        if isinstance(p, ReplacementRequested):
            return FLOOR_ROLE if p.floor else FALLBACK_ROLE
        if isinstance(p, FallbackDecided):
            return FLOOR_ROLE if p.kind == "floor_restore" else FALLBACK_ROLE
        return FLOOR_ROLE  # the planner places only the floor on guaranteed capacity

    # -- which claim an instance serves ------------------------------------------------------

    def _learn_claim(self, event: Envelope) -> None:
        """Remember the claim an event serves, from its own fields or its cause's."""
        p = event.payload
        claims = self._claim_of
        claim: str | None = None
        if isinstance(p, CapacityClaimOpened):
            claim = p.claim_id
        elif isinstance(p, PlacementDecided):
            claim = p.claim_id or claims.get(event.causation_id or "")
        elif isinstance(p, ReplacementRequested):
            claim = claims.get(p.replaces_instance_id)
        elif isinstance(p, InstanceLaunched):
            claim = p.tags.get(CLAIM_TAG)
            if claim is not None:
                claims[p.instance_id] = claim
        elif isinstance(p, NoticeReceived | InstanceLost):
            claim = claims.get(p.instance_id)
        elif isinstance(p, FallbackDecided | FallbackReturned | FallbackReviewed):
            claim = claims.get(event.causation_id or "")
        if claim is not None:
            claims[event.event_id] = claim

    def _ready(self) -> OrchestratorHost:
        if self._host is None:
            raise RuntimeError("the deciders' orchestrator was used before start(host)")
        return self._host
