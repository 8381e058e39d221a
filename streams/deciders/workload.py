"""What the workload-keyed deciders know of a workload: its contract and the instances it holds.

The planner, the replacement decider and the fallback arbiter are keyed by workload; each folds
the workload's `contract_published` and lifecycle events into a `WorkloadFacts`. Lifecycle
topics are keyed by instance, so a runtime repartitions those events by `workload_id` for them.

An instance is part of the **floor** when it runs on committed capacity (unless it is tagged
``spotcap.io/role = spare``: work placed on committed room nobody's floor needed), or on
guaranteed capacity with the role tag ``spotcap.io/role = floor``; guaranteed instances
launched for a fallback carry ``spotcap.io/role = fallback`` (the actuator tags what it launches
with the role of the decision it serves, ADR-11).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas.contracts.change import Authority
from schemas.events import (
    CapacityClaimOpened,
    CapacityReleased,
    ContractPublished,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    PurchaseModel,
)
from streams.deciders.authority import ChangeTrust, refusal
from streams.deciders.eligibility import Needs
from streams.deciders.maps import drop, put, replace

ROLE_TAG = "spotcap.io/role"
CLAIM_TAG = "spotcap.io/claim"  # the capacity claim an instance serves (its scheduler's)
FLOOR_ROLE = "floor"
FALLBACK_ROLE = "fallback"
SPREAD_ROLE = "spread"
SPARE_ROLE = "spare"  # beyond the floor, on committed room the floors left (already paid for)

LIFECYCLE_INPUTS = frozenset({"instance_launched", "instance_lost", "instance_deleted"})
# What the workload's schedulers ask for: a claim counts from its opening to its release.
DEMAND_INPUTS = frozenset({"capacity_claim_opened", "capacity_released"})


@dataclass(frozen=True, slots=True)
class Terms:
    """The contract terms the deciders act on (ADR-01: the contract is the only input)."""

    floor_vcpu: int = 0
    target_vcpu: int = 0
    tolerated_per_h: float = 0.0
    spend_cap_eur_micros: int = 0
    approver: str = ""  # "" when the contract names none: nothing beyond the cap is spent
    owner: str = ""
    approver_key: str | None = None
    """The approver's public key from the contract: approvals must verify against it."""
    priority: int = 0
    deadline_at: int | None = None
    checkpoint_on_notice: bool = False
    checkpoint_interval_s: int | None = None
    contract_version: int = 0

    @classmethod
    def of(cls, c: ContractPublished) -> Terms:
        return cls(
            floor_vcpu=c.floor_vcpu,
            target_vcpu=c.target_vcpu,
            tolerated_per_h=c.tolerated_interruptions_per_h,
            spend_cap_eur_micros=c.spend_cap_eur_micros,
            approver=c.approver,
            owner=c.owner,
            approver_key=c.approver_key,
            priority=c.priority,
            deadline_at=c.deadline_at,
            checkpoint_on_notice=c.checkpoint_on_notice,
            checkpoint_interval_s=c.checkpoint_interval_s,
            contract_version=c.contract_version,
        )


@dataclass(frozen=True, slots=True)
class Held:
    """One instance the workload holds."""

    pool_id: str
    vcpu: int
    purchase_model: PurchaseModel
    floor: bool
    launched_by: str | None  # the decision the launch served (its causation id)
    launched_at: int


@dataclass(frozen=True, slots=True)
class WorkloadFacts:
    """A workload's contract terms, live instances and what its work runs on, as of `now_us`.

    `families` and `sizes_vcpu` are the latest claim's (empty: anything): work placed for the
    workload without a claim of its own (a replacement, a fallback coming back) runs on the
    same shapes as its runs ask for."""

    workload_id: str
    now_us: int = 0
    terms: Terms | None = None
    instances: Mapping[str, Held] = field(default_factory=dict)
    families: frozenset[str] = frozenset()
    sizes_vcpu: frozenset[int] = frozenset()
    claims: Mapping[str, int] = field(default_factory=dict)  # open claim -> vCPU it asks for

    @property
    def asked_vcpu(self) -> int:
        """vCPU the workload's open claims ask for (opened, not yet released)."""
        return sum(self.claims.values())

    def vcpu(self, model: PurchaseModel | None = None, *, floor: bool | None = None) -> int:
        return sum(
            h.vcpu
            for h in self.instances.values()
            if (model is None or h.purchase_model == model) and (floor is None or h.floor == floor)
        )

    def needs(self) -> Needs:
        """What the workload's work runs on and the interruption it tolerates."""
        tolerated = self.terms.tolerated_per_h if self.terms else 0.0
        return Needs(self.families, self.sizes_vcpu, tolerated)

    def reclaimable_by_pool(self, without: str | None = None) -> dict[str, int]:
        """vCPU on reclaimable capacity per pool (leaving out instance `without`)."""
        by_pool: dict[str, int] = {}
        for instance_id, h in self.instances.items():
            if h.purchase_model == "reclaimable" and instance_id != without:
                by_pool[h.pool_id] = by_pool.get(h.pool_id, 0) + h.vcpu
        return by_pool

    def floor_by_pool(self, without: str | None = None) -> dict[str, int]:
        by_pool: dict[str, int] = {}
        for instance_id, h in self.instances.items():
            if h.floor and instance_id != without:
                by_pool[h.pool_id] = by_pool.get(h.pool_id, 0) + h.vcpu
        return by_pool

    @property
    def authority(self) -> Authority | None:
        """The authority of the contract in force (None: none yet)."""
        t = self.terms
        if t is None:
            return None
        return Authority(t.floor_vcpu, t.spend_cap_eur_micros, t.approver, t.approver_key)

    def refusal(self, p: ContractPublished, trust: ChangeTrust | None) -> str | None:
        """Why the published version `p` does not take effect (ADR-30; None: it does)."""
        return None if trust is None else refusal(trust, self.authority, p)

    def evolve(self, event: Envelope, trust: ChangeTrust | None = None) -> WorkloadFacts:
        """The facts after a contract or lifecycle event of this workload; with `trust`, a
        contract that changes authority without both signatures leaves the terms in force."""
        facts = (
            self if event.occurred_at <= self.now_us else replace(self, now_us=event.occurred_at)
        )
        p = event.payload
        if isinstance(p, ContractPublished):
            if facts.refusal(p, trust) is not None:
                return facts
            return replace(facts, terms=Terms.of(p))
        if isinstance(p, CapacityClaimOpened):
            facts = replace(facts, claims=put(facts.claims, p.claim_id, p.requested_vcpu))
            families, sizes = frozenset(p.sku_families), frozenset(p.sizes_vcpu)
            if families == facts.families and sizes == facts.sizes_vcpu:
                return facts
            return replace(facts, families=families, sizes_vcpu=sizes)
        if isinstance(p, CapacityReleased):
            return replace(facts, claims=drop(facts.claims, p.claim_id))
        if isinstance(p, InstanceLaunched):
            role = p.tags.get(ROLE_TAG)
            floor = role == FLOOR_ROLE or (p.purchase_model == "committed" and role != SPARE_ROLE)
            held = Held(
                p.pool_id,
                p.vcpu,
                p.purchase_model,
                floor,
                event.causation_id,
                event.occurred_at,
            )
            return replace(facts, instances=put(facts.instances, p.instance_id, held))
        if isinstance(p, InstanceLost | InstanceDeleted):
            return replace(facts, instances=drop(facts.instances, p.instance_id))
        return facts


def workload_of(event: Envelope) -> str | None:
    """The workload an event is about, if it names one."""
    workload_id = getattr(event.payload, "workload_id", None)
    return workload_id if isinstance(workload_id, str) and workload_id else None
