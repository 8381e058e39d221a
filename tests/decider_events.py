"""Builders of the real events the deciders read, with deterministic ids, for tests.

`Events` numbers what it builds, so the same calls give the same envelopes (ids included);
`fleet` registers a region's pools with rate cards, forward capacity and reservations.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from schemas.events import (
    Advisory,
    CapacityClaimOpened,
    CapacityReleased,
    ContractPublished,
    Envelope,
    FallbackReviewed,
    ForwardCapacity,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    LaunchFailed,
    NoticeReceived,
    Payload,
    PoolRegistered,
    PurchaseModel,
    RateCard,
    ReservationCommitted,
)
from schemas.ids import derived_event_id
from sim.approver import approver_key, approver_signer
from streams.deciders.approval import review_statement
from tests.factories import T0_US

S = 1_000_000
MIN = 60 * S
H = 3600 * S
REGION = "test"
OWNER = "spotcap"
GUARANTEED_PRICE = 40_000  # micro-EUR per vCPU-hour


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """A pool to register: shape, place, model, capacity and record."""

    family: str
    size_vcpu: int
    hall: str
    model: PurchaseModel
    capacity_vcpu: int
    expected_per_h: float = 0.01
    price: int = 10_000
    aggregate: str = ""

    @property
    def pool_id(self) -> str:
        return f"{self.family}.{self.size_vcpu}.{self.hall}.{self.model}"

    @property
    def group(self) -> str:
        return f"{self.hall}:{self.aggregate or self.family + '-' + self.model}"


class Events:
    """Builds envelopes in the test region; ids are derived from a running number."""

    def __init__(self, region: str = REGION) -> None:
        self.region = region
        self.seq = 0

    def env(
        self,
        payload: Payload,
        at_us: int,
        *,
        key: str | None = None,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        producer: str = "tests",
    ) -> Envelope:
        self.seq += 1
        event_type = payload.EVENT_TYPE
        if key is None:
            key = self.region if payload.KEY == "region" else str(getattr(payload, payload.KEY))
        return Envelope(
            event_id=derived_event_id(f"tests/{self.region}/{self.seq}", event_type),
            event_type=event_type,
            occurred_at=at_us,
            recorded_at=at_us,
            region=self.region,
            key=key,
            causation_id=causation_id,
            correlation_id=correlation_id,
            producer=producer,
            payload=payload,
        )

    # -- the market --------------------------------------------------------------------------

    def pool(self, spec: PoolSpec, at_us: int = T0_US) -> Envelope:
        return self.env(
            PoolRegistered(
                pool_id=spec.pool_id,
                sku_family=spec.family,
                instance_vcpu=spec.size_vcpu,
                hall=spec.hall,
                host_aggregate=spec.aggregate or f"{spec.family}-{spec.model}",
                purchase_model=spec.model,
                correlation_group=spec.group,
                capacity_vcpu=spec.capacity_vcpu,
                attributes={},
                expected_interruption_per_h=spec.expected_per_h
                if spec.model == "reclaimable"
                else 0.0,
            ),
            at_us,
        )

    def rate_card(self, spec: PoolSpec, at_us: int, price: int | None = None) -> Envelope:
        return self.env(
            RateCard(
                pool_id=spec.pool_id,
                purchase_model=spec.model,
                price_per_vcpu_h_eur_micros=spec.price if price is None else price,
                guaranteed_price_per_vcpu_h_eur_micros=GUARANTEED_PRICE,
                valid_from_at=at_us,
                valid_until_at=at_us + 5 * MIN,
            ),
            at_us,
        )

    def forward(self, spec: PoolSpec, at_us: int, available_vcpu: int | None = None) -> Envelope:
        available = spec.capacity_vcpu if available_vcpu is None else available_vcpu
        return self.env(ForwardCapacity(spec.pool_id, 3600, available), at_us)

    def reservation(self, spec: PoolSpec, at_us: int = T0_US) -> Envelope:
        return self.env(
            ReservationCommitted(
                reservation_id=f"lease-{spec.pool_id}",
                pool_id=spec.pool_id,
                reserved_vcpu=spec.capacity_vcpu,
                start_at=at_us,
                end_at=at_us + 30 * 24 * H,
                price_per_vcpu_h_eur_micros=spec.price,
            ),
            at_us,
        )

    # -- demand ------------------------------------------------------------------------------

    def contract(
        self,
        workload_id: str,
        at_us: int = T0_US,
        *,
        floor_vcpu: int = 0,
        target_vcpu: int = 256,
        spend_cap_eur_micros: int = 50_000_000,
        priority: int = 0,
        tolerated_per_h: float = 0.0,
        deadline_at: int | None = None,
        checkpoint_on_notice: bool = True,
        checkpoint_interval_s: int | None = 3600,
        approver: str | None = None,
        signed_approvals: bool = True,
    ) -> Envelope:
        approver = f"oncall-{workload_id}@example.org" if approver is None else approver
        return self.env(
            ContractPublished(
                workload_id=workload_id,
                contract_version=1,
                contract_sha256="0" * 64,
                owner="team-test",
                tier="t2",
                drain_budget_s=90,
                restart_semantics="resume",
                checkpoint_on_notice=checkpoint_on_notice,
                proactive_drain_on_advisory=False,
                tolerated_interruptions_per_h=tolerated_per_h,
                target_vcpu=target_vcpu,
                floor_vcpu=floor_vcpu,
                spend_cap_eur_micros=spend_cap_eur_micros,
                approver=approver,
                priority=priority,
                checkpoint_interval_s=checkpoint_interval_s,
                deadline_at=deadline_at,
                approver_key=approver_key(approver) if signed_approvals and approver else None,
            ),
            at_us,
        )

    def claim(
        self,
        workload_id: str,
        vcpu: int,
        at_us: int,
        *,
        claim_id: str | None = None,
        duration_s: int | None = None,
        families: tuple[str, ...] = (),
    ) -> Envelope:
        return self.env(
            CapacityClaimOpened(
                claim_id=claim_id or f"claim/{workload_id}/{self.seq}",
                workload_id=workload_id,
                scheduler="kubernetes",
                cluster="k8s-test",
                requested_vcpu=vcpu,
                reason="pending pods",
                sku_families=families,
                expected_duration_s=duration_s,
            ),
            at_us,
        )

    def released(self, workload_id: str, claim_id: str, vcpu: int, at_us: int) -> Envelope:
        return self.env(
            CapacityReleased(
                claim_id=claim_id,
                workload_id=workload_id,
                scheduler="kubernetes",
                released_vcpu=vcpu,
                reason="the work is done",
            ),
            at_us,
        )

    def reviewed(
        self,
        workload_id: str,
        at_us: int,
        *,
        vcpu: int,
        approved_eur_micros: int,
        escalation_event_id: str | None,
        approver: str | None = None,
        signed_by: str | None = None,
    ) -> Envelope:
        """A review signed by `signed_by`'s simulated key (default: the approver's own; "":
        unsigned)."""
        name = f"oncall-{workload_id}@example.org" if approver is None else approver
        review = FallbackReviewed(
            workload_id=workload_id,
            approver=name,
            outcome="approved" if approved_eur_micros else "rejected",
            vcpu=vcpu,
            approved_spend_eur_micros=approved_eur_micros,
            escalation_event_id=escalation_event_id,
        )
        signer = name if signed_by is None else signed_by
        if signer:
            signature = approver_signer(signer).sign(review_statement(review))
            review = replace(review, signature=base64.b64encode(signature).decode())
        return self.env(review, at_us)

    # -- lifecycle ---------------------------------------------------------------------------

    def launched(
        self,
        instance_id: str,
        spec: PoolSpec,
        workload_id: str,
        at_us: int,
        *,
        owner: str | None = OWNER,
        tags: Mapping[str, str] | None = None,
        causation_id: str | None = None,
    ) -> Envelope:
        all_tags = dict(tags or {})
        if owner is not None:
            all_tags["spotcap.io/owner"] = owner
        return self.env(
            InstanceLaunched(
                instance_id=instance_id,
                pool_id=spec.pool_id,
                workload_id=workload_id,
                vcpu=spec.size_vcpu,
                purchase_model=spec.model,
                tags=all_tags,
            ),
            at_us,
            causation_id=causation_id,
        )

    def notice(
        self,
        instance_id: str,
        spec: PoolSpec,
        workload_id: str,
        at_us: int,
        *,
        correlation_id: str | None = None,
    ) -> Envelope:
        return self.env(
            NoticeReceived(instance_id, spec.pool_id, workload_id, at_us + 120 * S, "nats"),
            at_us,
            correlation_id=correlation_id,
        )

    def advisory(self, instance_id: str, spec: PoolSpec, at_us: int) -> Envelope:
        return self.env(Advisory(instance_id, spec.pool_id, at_us + 300 * S), at_us)

    def lost(
        self,
        instance_id: str,
        spec: PoolSpec,
        workload_id: str,
        at_us: int,
        *,
        notice: Envelope | None = None,
        reason: str = "reclaimed",
        correlation_id: str | None = None,
    ) -> Envelope:
        return self.env(
            InstanceLost(
                instance_id=instance_id,
                pool_id=spec.pool_id,
                workload_id=workload_id,
                vcpu=spec.size_vcpu,
                purchase_model=spec.model,
                with_notice=notice is not None,
                reason=reason,  # type: ignore[arg-type]
                notice_event_id=notice.event_id if notice else None,
            ),
            at_us,
            correlation_id=correlation_id,
            causation_id=notice.event_id if notice else None,
        )

    def deleted(self, instance_id: str, spec: PoolSpec, workload_id: str, at_us: int) -> Envelope:
        return self.env(
            InstanceDeleted(
                instance_id, spec.pool_id, workload_id, "orchestrator", "appcred/test", "done"
            ),
            at_us,
        )

    def launch_failed(
        self, spec: PoolSpec, workload_id: str, at_us: int, *, retryable: bool = False
    ) -> Envelope:
        return self.env(
            LaunchFailed(
                workload_id=workload_id,
                pool_id=spec.pool_id,
                vcpu=spec.size_vcpu,
                purchase_model=spec.model,
                error_class="HttpException",
                reason="503 Service Unavailable",
                retryable=retryable,
            ),
            at_us,
        )


def spread_fleet(
    halls: int = 4,
    families: Iterable[str] = ("c7", "c8", "m6"),
    sizes: Iterable[int] = (4, 16),
    *,
    capacity_vcpu: int = 1024,
    committed_vcpu: int = 256,
    guaranteed_vcpu: int = 512,
) -> list[PoolSpec]:
    """Reclaimable pools (family x size x hall; one correlation group per family and hall),
    and a committed and a guaranteed 16-vCPU pool in every hall."""
    specs: list[PoolSpec] = []
    for h in range(halls):
        hall = f"hall-{chr(ord('a') + h)}"
        for family in families:
            for size in sizes:
                specs.append(PoolSpec(family, size, hall, "reclaimable", capacity_vcpu))
        specs.append(PoolSpec("c7", 16, hall, "committed", committed_vcpu, 0.0, 22_000))
        specs.append(PoolSpec("c7", 16, hall, "guaranteed", guaranteed_vcpu, 0.0, GUARANTEED_PRICE))
    return specs


def fleet(events: Events, specs: Iterable[PoolSpec], at_us: int = T0_US) -> list[Envelope]:
    """Registration, a rate card, forward capacity and (committed pools) a reservation each."""
    out: list[Envelope] = []
    for spec in specs:
        out += [events.pool(spec, at_us), events.rate_card(spec, at_us)]
        out.append(
            events.reservation(spec, at_us)
            if spec.model == "committed"
            else events.forward(spec, at_us)
        )
    return out
