"""Event payload classes, generated from ``schemas/*.avsc`` by ``python -m schemas.generate``.

DO NOT EDIT: change the .avsc files and regenerate. One frozen dataclass per event
record and per shared record; enums are ``Literal`` aliases. ``to_avro``/``from_avro``
convert to and from what fastavro writes and reads (logical types stripped: timestamps
are int microseconds since the epoch, UTC; uuids are str).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Literal, Self, TypeAlias

from schemas.frozen import FrozenMap, frozen_map

PurchaseModel: TypeAlias = Literal["reclaimable", "guaranteed", "committed"]
"""How a vCPU is bought from the private cloud: reclaimable (lent headroom the cloud can take
back on a 120 s notice), guaranteed (on-demand, never reclaimed) or committed (a Blazar
reservation already paid for, used first for guaranteed floors).
"""

DrainPath: TypeAlias = Literal["kubernetes", "slurm", "local"]
"""How a node is drained: through the Kubernetes Eviction API, through Slurm (scontrol drain,
requeue, USR1), or locally by the agent when the scheduler does not answer within 800 ms
(ADR-14).
"""

Scheduler: TypeAlias = Literal["kubernetes", "slurm"]
"""The scheduler whose pending work a capacity claim normalises."""

NoticeSource: TypeAlias = Literal["nats", "metadata"]
"""Where the agent first learned of a notice: the per-hall NATS relay, or the metadata poll
behind it (ADR-17).
"""

Tier: TypeAlias = Literal["t1", "t2", "t3", "t4", "t5", "bespoke"]
"""The contract tier a workload declared: t1 (strictest, guaranteed floor) to t5 (no floor,
tolerates anything), or bespoke for a reviewed contract outside the tiers (ADR-02).
"""

RestartSemantics: TypeAlias = Literal["resume", "requeue", "restart"]
"""What a workload does after losing an instance (ADR-21): resume from its last checkpoint,
requeue the interrupted unit to run again from its start (Slurm requeue, a CI job retried), or
restart the whole workload from scratch.
"""

ClaimOutcome: TypeAlias = Literal["fulfilled", "withdrawn", "expired", "refused"]
"""How a capacity claim ended: fulfilled (capacity placed), withdrawn (the pending work went
away), expired (not placed before its deadline) or refused (no contract or infeasible).
"""

ExclusionReason: TypeAlias = Literal["burst", "rate"]
"""Why a pool was excluded: burst (many reclamations at once inside the 60 s window) or rate
(sustained reclamation above what its record and price suggest) (ADR-07).
"""

DrainTrigger: TypeAlias = Literal["notice", "advisory", "operator"]
"""What started a drain: the hard notice, an advisory where the contract opts in to proactive
drain (ADR-16), or an operator.
"""

LossReason: TypeAlias = Literal["reclaimed", "hardware_failure", "deleted_outside", "unknown"]
"""Why an instance was lost: reclaimed by the private cloud, failed hardware, deleted by someone
other than the orchestrator, or unknown (found missing on reconciliation).
"""

DeletionInitiator: TypeAlias = Literal["orchestrator", "operator", "owner"]
"""Who asked for an instance to be deleted: the orchestrator (scale-down, return from fallback,
replacement of a lost node), an operator, or the owning workload.
"""

FallbackKind: TypeAlias = Literal["floor_restore", "within_cap", "escalated"]
"""The authority a fallback to guaranteed capacity runs under (ADR-23): floor_restore (restores
the declared floor, never asks), within_cap (spends inside the workload's declared cap),
escalated (would exceed the cap; the named approver is paged).
"""

ApprovalOutcome: TypeAlias = Literal["approved", "rejected"]
"""The named approver's answer to an escalated fallback."""

ActuationCall: TypeAlias = Literal["launch", "delete", "reserve"]
"""The kind of mutating provider call the actuator makes under the regional token budget
(ADR-12).
"""

EvictionOutcome: TypeAlias = Literal["accepted", "gone", "throttled", "timed_out", "failed"]
"""How one Eviction API call for a pod ended: accepted (201), gone (404: the pod had already
left), throttled (429: a disruption budget or API overload; retried inside the deadline),
timed_out (no answer within the 800 ms cap; the local path takes over) or failed (any other
answer).
"""

CheckpointOutcome: TypeAlias = Literal["written", "signalled", "failed", "timed_out"]
"""How the final checkpoint the agent triggered on a drain ended: written (the workload reported
it written), signalled (the trigger was delivered, e.g. USR1 to a Slurm job, and the workload
reports nothing back), failed (the trigger failed or reported an error) or timed_out (no
answer before the notice deadline).
"""


@dataclass(frozen=True, slots=True)
class Allocation:
    """A share of a workload's capacity placed in one pool under one purchase model."""

    pool_id: str
    """The pool the vCPU are placed in."""
    vcpu: int
    """vCPU placed in this pool."""
    purchase_model: PurchaseModel
    """How these vCPU are bought."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "pool_id": self.pool_id,
            "vcpu": self.vcpu,
            "purchase_model": self.purchase_model,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            pool_id=d["pool_id"],
            vcpu=d["vcpu"],
            purchase_model=d["purchase_model"],
        )


@dataclass(frozen=True, slots=True)
class ContractPublished:
    """A workload's interruption contract was compiled, checked for feasibility and signed; from
    now on it is the only input to this workload's placement, drain, checkpoint and fallback
    (ADR-01, ADR-03).
    """

    EVENT_TYPE: ClassVar[str] = "contract_published"
    RECORD_NAME: ClassVar[str] = "spotcap.events.ContractPublished"
    TOPIC: ClassVar[str] = "demand"
    KEY: ClassVar[str] = "workload_id"

    workload_id: str
    """The workload, as named in its contract."""
    contract_version: int
    """Version of the contract, increasing with every published change."""
    contract_sha256: str
    """Hex SHA-256 of the signed contract bundle the nodes verify."""
    owner: str
    """The team that owns the workload and reads its showback."""
    tier: Tier
    """The declared tier."""
    drain_budget_s: int
    """Seconds the workload needs to drain after a notice."""
    restart_semantics: RestartSemantics
    """What the workload does after a loss."""
    checkpoint_on_notice: bool
    """Whether the workload writes a final checkpoint when a notice arrives."""
    proactive_drain_on_advisory: bool
    """Whether an advisory starts a drain before the notice; false positives are charged to this
    contract (ADR-16).
    """
    tolerated_interruptions_per_h: float
    """Interruptions per instance-hour the workload declares it tolerates; the breach threshold.
    Records of release 1 carry it in tolerated_interruption_per_h instead (this field is then
    null; the generated class reads either).
    """
    target_vcpu: int
    """vCPU the workload aims to run on."""
    floor_vcpu: int
    """Guaranteed floor: vCPU kept on committed or guaranteed capacity whatever happens (ADR-22)."""
    spend_cap_eur_micros: int
    """Fallback spend the arbiter may commit automatically per day (UTC), in micro-euros; beyond
    it the approver is paged (ADR-23).
    """
    approver: str
    """The named person paged to approve fallback spend beyond the cap."""
    priority: int
    """Fallback priority, 0 first; fallback waves are staggered in this order (ADR-24)."""
    checkpoint_interval_s: int | None = None
    """Periodic checkpoint interval derived from the loss budget (ADR-20); null if none."""
    deadline_at: int | None = None
    """When the workload's work must be done, if it has a deadline."""
    source_commit: str | None = None
    """Commit in the contract repository the bundle was built from."""
    scheduler: Scheduler | None = None
    """The scheduler that places the workload's work and whose admission refuses it without this
    contract (ADR-04); null in events written before this field.
    """
    checkpoint_method: str | None = None
    """How the workload checkpoints (ADR-18): none, application, spark, pytorch or slurm-requeue;
    null in events written before this field.
    """
    checkpoint_size_bytes: int | None = None
    """Size of the final checkpoint one instance writes on a notice, in bytes; the compiler
    checked that it fits the drain budget.
    """
    effects_on_completion_only: bool | None = None
    """Whether the workload publishes externally visible effects only when a unit completes, so a
    resumed or requeued unit does nothing twice (ADR-21).
    """
    source_path: str | None = None
    """Path of the contract file in the contract repository, as given to the compiler."""
    source_sha256: str | None = None
    """Hex SHA-256 of the contract file as written; the signed bundle carries it too."""
    approver_key: str | None = None
    """The approver's Ed25519 public key (base64 of its 32 raw bytes), as the contract names it:
    an approval of spend beyond the cap is accepted only when signed by this key (ADR-30);
    null: no approval is accepted.
    """
    signatures: Mapping[str, str] = FrozenMap()
    """Signer name -> base64 Ed25519 signature of this version's change statement
    (schemas.contracts.change: workload, version, source_sha256 and the authority it holds),
    from the contract file's .signatures.json. A version that raises the floor or the daily
    cap, or changes the approver, takes effect in the deciders only with the owner's and a
    higher authority's valid signatures when they are given a keyring (ADR-30); empty in
    events written before this field.
    """

    def __post_init__(self) -> None:
        object.__setattr__(self, "signatures", frozen_map(self.signatures))

    def to_avro(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "contract_version": self.contract_version,
            "contract_sha256": self.contract_sha256,
            "owner": self.owner,
            "tier": self.tier,
            "drain_budget_s": self.drain_budget_s,
            "restart_semantics": self.restart_semantics,
            "checkpoint_on_notice": self.checkpoint_on_notice,
            "proactive_drain_on_advisory": self.proactive_drain_on_advisory,
            "tolerated_interruption_per_h": self.tolerated_interruptions_per_h,
            "target_vcpu": self.target_vcpu,
            "floor_vcpu": self.floor_vcpu,
            "spend_cap_eur_micros": self.spend_cap_eur_micros,
            "approver": self.approver,
            "priority": self.priority,
            "checkpoint_interval_s": self.checkpoint_interval_s,
            "deadline_at": self.deadline_at,
            "source_commit": self.source_commit,
            "scheduler": self.scheduler,
            "checkpoint_method": self.checkpoint_method,
            "checkpoint_size_bytes": self.checkpoint_size_bytes,
            "effects_on_completion_only": self.effects_on_completion_only,
            "source_path": self.source_path,
            "source_sha256": self.source_sha256,
            "tolerated_interruptions_per_h": self.tolerated_interruptions_per_h,
            "approver_key": self.approver_key,
            "signatures": dict(self.signatures),
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            workload_id=d["workload_id"],
            contract_version=d["contract_version"],
            contract_sha256=d["contract_sha256"],
            owner=d["owner"],
            tier=d["tier"],
            drain_budget_s=d["drain_budget_s"],
            restart_semantics=d["restart_semantics"],
            checkpoint_on_notice=d["checkpoint_on_notice"],
            proactive_drain_on_advisory=d["proactive_drain_on_advisory"],
            tolerated_interruptions_per_h=(
                d["tolerated_interruption_per_h"]
                if d.get("tolerated_interruptions_per_h") is None
                else d["tolerated_interruptions_per_h"]
            ),
            target_vcpu=d["target_vcpu"],
            floor_vcpu=d["floor_vcpu"],
            spend_cap_eur_micros=d["spend_cap_eur_micros"],
            approver=d["approver"],
            priority=d["priority"],
            checkpoint_interval_s=d["checkpoint_interval_s"],
            deadline_at=d["deadline_at"],
            source_commit=d["source_commit"],
            scheduler=d["scheduler"],
            checkpoint_method=d["checkpoint_method"],
            checkpoint_size_bytes=d["checkpoint_size_bytes"],
            effects_on_completion_only=d["effects_on_completion_only"],
            source_path=d["source_path"],
            source_sha256=d["source_sha256"],
            approver_key=d["approver_key"],
            signatures=FrozenMap(d["signatures"]),
        )


@dataclass(frozen=True, slots=True)
class RateCard:
    """The private cloud's price for a pool, published every 5 minutes (provider commitment),
    with the guaranteed rate it is a discount on.
    """

    EVENT_TYPE: ClassVar[str] = "rate_card"
    RECORD_NAME: ClassVar[str] = "spotcap.events.RateCard"
    TOPIC: ClassVar[str] = "market"
    KEY: ClassVar[str] = "pool_id"

    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    purchase_model: PurchaseModel
    """The purchase model the price is for."""
    price_per_vcpu_h_eur_micros: int
    """Price of one vCPU-hour, in micro-euros."""
    guaranteed_price_per_vcpu_h_eur_micros: int
    """Price of the same vCPU-hour on guaranteed capacity: the counterfactual the net saving is
    measured against (ADR-26).
    """
    valid_from_at: int
    """Start of the validity window (inclusive)."""
    valid_until_at: int
    """End of the validity window (exclusive)."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "pool_id": self.pool_id,
            "purchase_model": self.purchase_model,
            "price_per_vcpu_h_eur_micros": self.price_per_vcpu_h_eur_micros,
            "guaranteed_price_per_vcpu_h_eur_micros": self.guaranteed_price_per_vcpu_h_eur_micros,
            "valid_from_at": self.valid_from_at,
            "valid_until_at": self.valid_until_at,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            pool_id=d["pool_id"],
            purchase_model=d["purchase_model"],
            price_per_vcpu_h_eur_micros=d["price_per_vcpu_h_eur_micros"],
            guaranteed_price_per_vcpu_h_eur_micros=d["guaranteed_price_per_vcpu_h_eur_micros"],
            valid_from_at=d["valid_from_at"],
            valid_until_at=d["valid_until_at"],
        )


@dataclass(frozen=True, slots=True)
class ForwardCapacity:
    """The provider's forecast of how much reclaimable capacity a pool can lend over a horizon
    (provider commitment); an input to the scorer.
    """

    EVENT_TYPE: ClassVar[str] = "forward_capacity"
    RECORD_NAME: ClassVar[str] = "spotcap.events.ForwardCapacity"
    TOPIC: ClassVar[str] = "market"
    KEY: ClassVar[str] = "pool_id"

    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    horizon_s: int
    """How far ahead of occurred_at the forecast holds."""
    available_vcpu: int
    """vCPU the provider expects to be able to lend throughout the horizon."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "pool_id": self.pool_id,
            "horizon_s": self.horizon_s,
            "available_vcpu": self.available_vcpu,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            pool_id=d["pool_id"],
            horizon_s=d["horizon_s"],
            available_vcpu=d["available_vcpu"],
        )


@dataclass(frozen=True, slots=True)
class ReservationCommitted:
    """A committed reservation (an OpenStack Blazar lease) was made: capacity already paid for,
    used first to fill guaranteed floors (ADR-22).
    """

    EVENT_TYPE: ClassVar[str] = "reservation_committed"
    RECORD_NAME: ClassVar[str] = "spotcap.events.ReservationCommitted"
    TOPIC: ClassVar[str] = "market"
    KEY: ClassVar[str] = "pool_id"

    reservation_id: str
    """The provider's reservation (Blazar lease) id."""
    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    reserved_vcpu: int
    """vCPU reserved."""
    start_at: int
    """When the reservation starts."""
    end_at: int
    """When the reservation ends."""
    price_per_vcpu_h_eur_micros: int
    """Committed price of one reserved vCPU-hour, in micro-euros, whether used or not."""
    workload_id: str | None = None
    """The workload the reservation is held for, or null for a shared floor pool."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "reservation_id": self.reservation_id,
            "pool_id": self.pool_id,
            "reserved_vcpu": self.reserved_vcpu,
            "start_at": self.start_at,
            "end_at": self.end_at,
            "price_per_vcpu_h_eur_micros": self.price_per_vcpu_h_eur_micros,
            "workload_id": self.workload_id,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            reservation_id=d["reservation_id"],
            pool_id=d["pool_id"],
            reserved_vcpu=d["reserved_vcpu"],
            start_at=d["start_at"],
            end_at=d["end_at"],
            price_per_vcpu_h_eur_micros=d["price_per_vcpu_h_eur_micros"],
            workload_id=d["workload_id"],
        )


@dataclass(frozen=True, slots=True)
class CapacityClaimOpened:
    """Pending work in a scheduler was normalised into a claim for capacity."""

    EVENT_TYPE: ClassVar[str] = "capacity_claim_opened"
    RECORD_NAME: ClassVar[str] = "spotcap.events.CapacityClaimOpened"
    TOPIC: ClassVar[str] = "demand"
    KEY: ClassVar[str] = "workload_id"

    claim_id: str
    """Identifies the claim until it closes."""
    workload_id: str
    """The workload, as named in its contract."""
    scheduler: Scheduler
    """The scheduler holding the pending work."""
    cluster: str
    """The scheduler cluster (Kubernetes cluster or Slurm cluster name)."""
    requested_vcpu: int
    """vCPU the pending work needs."""
    reason: str
    """Why capacity is needed, in words (e.g. '48 pending pods in ns/etl')."""
    sku_families: tuple[str, ...] = ()
    """SKU families the pending work can run on; empty: any family."""
    sizes_vcpu: tuple[int, ...] = ()
    """Instance sizes (vCPU) the pending work can use on reclaimable capacity; empty: any size."""
    expected_duration_s: int | None = None
    """How long the pending work runs on the requested vCPU without interruption, if the
    scheduler knows; with the contract's deadline it drives the deadline rule (ADR-23).
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "claim_id": self.claim_id,
            "workload_id": self.workload_id,
            "scheduler": self.scheduler,
            "cluster": self.cluster,
            "requested_vcpu": self.requested_vcpu,
            "reason": self.reason,
            "sku_families": list(self.sku_families),
            "sizes_vcpu": list(self.sizes_vcpu),
            "expected_duration_s": self.expected_duration_s,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            claim_id=d["claim_id"],
            workload_id=d["workload_id"],
            scheduler=d["scheduler"],
            cluster=d["cluster"],
            requested_vcpu=d["requested_vcpu"],
            reason=d["reason"],
            sku_families=tuple(d["sku_families"]),
            sizes_vcpu=tuple(d["sizes_vcpu"]),
            expected_duration_s=d["expected_duration_s"],
        )


@dataclass(frozen=True, slots=True)
class CapacityClaimClosed:
    """A capacity claim ended: placed, withdrawn, expired or refused."""

    EVENT_TYPE: ClassVar[str] = "capacity_claim_closed"
    RECORD_NAME: ClassVar[str] = "spotcap.events.CapacityClaimClosed"
    TOPIC: ClassVar[str] = "demand"
    KEY: ClassVar[str] = "workload_id"

    claim_id: str
    """The claim that closed."""
    workload_id: str
    """The workload, as named in its contract."""
    scheduler: Scheduler
    """The scheduler that held the pending work."""
    requested_vcpu: int
    """vCPU the claim asked for."""
    fulfilled_vcpu: int
    """vCPU placed for the claim before it closed."""
    outcome: ClaimOutcome
    """How the claim ended."""
    reason: str
    """Why it ended, in words."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "claim_id": self.claim_id,
            "workload_id": self.workload_id,
            "scheduler": self.scheduler,
            "requested_vcpu": self.requested_vcpu,
            "fulfilled_vcpu": self.fulfilled_vcpu,
            "outcome": self.outcome,
            "reason": self.reason,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            claim_id=d["claim_id"],
            workload_id=d["workload_id"],
            scheduler=d["scheduler"],
            requested_vcpu=d["requested_vcpu"],
            fulfilled_vcpu=d["fulfilled_vcpu"],
            outcome=d["outcome"],
            reason=d["reason"],
        )


@dataclass(frozen=True, slots=True)
class PoolRanked:
    """The scorer ranked a pool in a 5-minute ranking round, and kept the inputs it ranked on
    (ADR-07).
    """

    EVENT_TYPE: ClassVar[str] = "pool_ranked"
    RECORD_NAME: ClassVar[str] = "spotcap.events.PoolRanked"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "pool_id"

    ranking_id: str
    """The ranking round; every pool ranked in the round carries the same id."""
    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    rank: int
    """Position in the round, 1 being the pool placement prefers most."""
    pool_count: int
    """How many pools the round ranked."""
    score: float
    """The score the rank was sorted on (higher is better)."""
    available_vcpu: int
    """Input: the forward capacity the scorer used."""
    observed_interruption_per_h: float
    """Input: reclamations per instance-hour observed over the scoring window."""
    price_per_vcpu_h_eur_micros: int
    """Input: the rate card price the scorer used."""
    correlation_group: str
    """Input: the correlation group the pool belongs to (ADR-06)."""
    window_s: int
    """Length of the window the interruption rate was observed over."""
    input_event_ids: tuple[str, ...]
    """The rate card and forward capacity events the inputs were read from."""
    guaranteed_price_per_vcpu_h_eur_micros: int | None = None
    """Input: the same rate card's guaranteed rate; the score weighs the saving, it less the
    price (null in rankings made before the saving was scored).
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "ranking_id": self.ranking_id,
            "pool_id": self.pool_id,
            "rank": self.rank,
            "pool_count": self.pool_count,
            "score": self.score,
            "available_vcpu": self.available_vcpu,
            "observed_interruption_per_h": self.observed_interruption_per_h,
            "price_per_vcpu_h_eur_micros": self.price_per_vcpu_h_eur_micros,
            "correlation_group": self.correlation_group,
            "window_s": self.window_s,
            "input_event_ids": list(self.input_event_ids),
            "guaranteed_price_per_vcpu_h_eur_micros": self.guaranteed_price_per_vcpu_h_eur_micros,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            ranking_id=d["ranking_id"],
            pool_id=d["pool_id"],
            rank=d["rank"],
            pool_count=d["pool_count"],
            score=d["score"],
            available_vcpu=d["available_vcpu"],
            observed_interruption_per_h=d["observed_interruption_per_h"],
            price_per_vcpu_h_eur_micros=d["price_per_vcpu_h_eur_micros"],
            correlation_group=d["correlation_group"],
            window_s=d["window_s"],
            input_event_ids=tuple(d["input_event_ids"]),
            guaranteed_price_per_vcpu_h_eur_micros=d["guaranteed_price_per_vcpu_h_eur_micros"],
        )


@dataclass(frozen=True, slots=True)
class PoolExcluded:
    """The exclusion watcher took a pool out of placement because it was reclaimed more than its
    record and price suggest; decided within 60 s of event time and naming its evidence
    (ADR-07).
    """

    EVENT_TYPE: ClassVar[str] = "pool_excluded"
    RECORD_NAME: ClassVar[str] = "spotcap.events.PoolExcluded"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "pool_id"

    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    reason: ExclusionReason
    """Which rule fired."""
    observed_interruption_per_h: float
    """Reclamations per instance-hour observed in the window."""
    expected_interruption_per_h: float
    """Reclamations per instance-hour the pool's record and price suggest."""
    reclaimed_instances: int
    """Instances of the pool reclaimed inside the window."""
    window_start_at: int
    """Start of the event-time window the rule evaluated."""
    window_end_at: int
    """End of the event-time window the rule evaluated."""
    evidence_event_ids: tuple[str, ...]
    """The event ids of the lifecycle events this judgement rests on, so it can be explained."""
    threshold_per_h: float = 0.0
    """The rate the observed reclamation had to reach to exclude: the expected rate times the
    rule's factor.
    """
    exposure_instance_h: float = 0.0
    """Instance-hours the pool held in the window: the denominator of the observed rate."""
    expected_reclaims: float = 0.0
    """Reclamations the expected rate predicts for that exposure (the Poisson mean the count was
    compared with).
    """
    tail_probability: float = 1.0
    """Probability of seeing at least reclaimed_instances reclamations if the pool behaved as
    expected (Poisson tail); the rule fires below its significance.
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "pool_id": self.pool_id,
            "reason": self.reason,
            "observed_interruption_per_h": self.observed_interruption_per_h,
            "expected_interruption_per_h": self.expected_interruption_per_h,
            "reclaimed_instances": self.reclaimed_instances,
            "window_start_at": self.window_start_at,
            "window_end_at": self.window_end_at,
            "evidence_event_ids": list(self.evidence_event_ids),
            "threshold_per_h": self.threshold_per_h,
            "exposure_instance_h": self.exposure_instance_h,
            "expected_reclaims": self.expected_reclaims,
            "tail_probability": self.tail_probability,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            pool_id=d["pool_id"],
            reason=d["reason"],
            observed_interruption_per_h=d["observed_interruption_per_h"],
            expected_interruption_per_h=d["expected_interruption_per_h"],
            reclaimed_instances=d["reclaimed_instances"],
            window_start_at=d["window_start_at"],
            window_end_at=d["window_end_at"],
            evidence_event_ids=tuple(d["evidence_event_ids"]),
            threshold_per_h=d["threshold_per_h"],
            exposure_instance_h=d["exposure_instance_h"],
            expected_reclaims=d["expected_reclaims"],
            tail_probability=d["tail_probability"],
        )


@dataclass(frozen=True, slots=True)
class PoolReadmitted:
    """An excluded pool was readmitted to placement after sustained health (hysteresis, ADR-07)."""

    EVENT_TYPE: ClassVar[str] = "pool_readmitted"
    RECORD_NAME: ClassVar[str] = "spotcap.events.PoolReadmitted"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "pool_id"

    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    healthy_s: int
    """How long the pool has been healthy before readmission."""
    observed_interruption_per_h: float
    """Reclamations per instance-hour observed over the healthy period."""
    expected_interruption_per_h: float
    """Reclamations per instance-hour the pool's record and price suggest."""
    evidence_event_ids: tuple[str, ...]
    """The event ids of the lifecycle events this judgement rests on, so it can be explained."""
    exclusion_event_id: str | None = None
    """The pool_excluded event this readmission ends."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "pool_id": self.pool_id,
            "healthy_s": self.healthy_s,
            "observed_interruption_per_h": self.observed_interruption_per_h,
            "expected_interruption_per_h": self.expected_interruption_per_h,
            "evidence_event_ids": list(self.evidence_event_ids),
            "exclusion_event_id": self.exclusion_event_id,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            pool_id=d["pool_id"],
            healthy_s=d["healthy_s"],
            observed_interruption_per_h=d["observed_interruption_per_h"],
            expected_interruption_per_h=d["expected_interruption_per_h"],
            evidence_event_ids=tuple(d["evidence_event_ids"]),
            exclusion_event_id=d["exclusion_event_id"],
        )


@dataclass(frozen=True, slots=True)
class PlacementDecided:
    """The planner placed a workload: floor first on committed capacity, the rest spread depth-
    first over at least 8 pools within the pool and correlation-group caps; records what
    preferring depth over price costs (ADR-08, ADR-22).
    """

    EVENT_TYPE: ClassVar[str] = "placement_decided"
    RECORD_NAME: ClassVar[str] = "spotcap.events.PlacementDecided"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "workload_id"

    workload_id: str
    """The workload, as named in its contract."""
    requested_vcpu: int
    """vCPU the placement serves."""
    floor_vcpu: int
    """Of those, vCPU placed as the guaranteed floor."""
    allocations: tuple[Allocation, ...]
    """Where the vCPU go, per pool and purchase model."""
    cost_per_h_eur_micros: int
    """Hourly price of this plan at current rate cards."""
    price_first_cost_per_h_eur_micros: int
    """Hourly price of the cheapest plan a price-first planner would have chosen."""
    premium_per_h_eur_micros: int
    """Hourly premium paid for depth and diversification over the price-first plan."""
    excluded_pool_ids: tuple[str, ...]
    """Pools that were excluded when the decision was taken, and so never chosen."""
    claim_id: str | None = None
    """The capacity claim this placement serves, if any."""
    ranking_id: str | None = None
    """The ranking round the planner used."""
    caps_held: bool = True
    """Whether every reclaimable allocation is within the caps: at least 8 pools, no pool above
    15% and no correlation group above 30% of the workload's reclaimable capacity (ADR-08).
    """
    caps_reason: str | None = None
    """When the caps could not hold or part of the request stayed unplaced, why, in words (e.g.
    fewer than 8 eligible pools and what made the others ineligible); null otherwise.
    """
    eligible_pool_count: int = 0
    """Reclaimable pools that were eligible for this workload: not excluded, with forward
    capacity, of a family and size it can use, no more interrupted than it tolerates, and with
    instances no larger than the pool cap of the plan (a larger instance cannot take part in a
    capped spread).
    """
    pool_cap_vcpu: int = 0
    """The most vCPU of the workload one pool could hold under the pool cap for this plan."""
    group_cap_vcpu: int = 0
    """The most vCPU of the workload one correlation group could hold under the group cap for
    this plan.
    """
    unplaced_vcpu: int = 0
    """vCPU of the request the plan could not place within the caps and the pools' room; the
    fallback arbiter decides whether guaranteed capacity covers them (ADR-23).
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "requested_vcpu": self.requested_vcpu,
            "floor_vcpu": self.floor_vcpu,
            "allocations": [x0.to_avro() for x0 in self.allocations],
            "cost_per_h_eur_micros": self.cost_per_h_eur_micros,
            "price_first_cost_per_h_eur_micros": self.price_first_cost_per_h_eur_micros,
            "premium_per_h_eur_micros": self.premium_per_h_eur_micros,
            "excluded_pool_ids": list(self.excluded_pool_ids),
            "claim_id": self.claim_id,
            "ranking_id": self.ranking_id,
            "caps_held": self.caps_held,
            "caps_reason": self.caps_reason,
            "eligible_pool_count": self.eligible_pool_count,
            "pool_cap_vcpu": self.pool_cap_vcpu,
            "group_cap_vcpu": self.group_cap_vcpu,
            "unplaced_vcpu": self.unplaced_vcpu,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            workload_id=d["workload_id"],
            requested_vcpu=d["requested_vcpu"],
            floor_vcpu=d["floor_vcpu"],
            allocations=tuple([Allocation.from_avro(x0) for x0 in d["allocations"]]),
            cost_per_h_eur_micros=d["cost_per_h_eur_micros"],
            price_first_cost_per_h_eur_micros=d["price_first_cost_per_h_eur_micros"],
            premium_per_h_eur_micros=d["premium_per_h_eur_micros"],
            excluded_pool_ids=tuple(d["excluded_pool_ids"]),
            claim_id=d["claim_id"],
            ranking_id=d["ranking_id"],
            caps_held=d["caps_held"],
            caps_reason=d["caps_reason"],
            eligible_pool_count=d["eligible_pool_count"],
            pool_cap_vcpu=d["pool_cap_vcpu"],
            group_cap_vcpu=d["group_cap_vcpu"],
            unplaced_vcpu=d["unplaced_vcpu"],
        )


@dataclass(frozen=True, slots=True)
class InstanceLaunched:
    """The provider launched an instance for a workload."""

    EVENT_TYPE: ClassVar[str] = "instance_launched"
    RECORD_NAME: ClassVar[str] = "spotcap.events.InstanceLaunched"
    TOPIC: ClassVar[str] = "lifecycle"
    KEY: ClassVar[str] = "instance_id"

    instance_id: str
    """The provider's instance id (a Nova server UUID on OpenStack)."""
    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    workload_id: str
    """The workload, as named in its contract."""
    vcpu: int
    """vCPU of the instance."""
    purchase_model: PurchaseModel
    """How the instance is bought."""
    tags: Mapping[str, str]
    """Provider tags on the instance; they mark it as the orchestrator's own and rebuild fleet
    state when PostgreSQL is lost (ADR-11).
    """

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", frozen_map(self.tags))

    def to_avro(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "pool_id": self.pool_id,
            "workload_id": self.workload_id,
            "vcpu": self.vcpu,
            "purchase_model": self.purchase_model,
            "tags": dict(self.tags),
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            instance_id=d["instance_id"],
            pool_id=d["pool_id"],
            workload_id=d["workload_id"],
            vcpu=d["vcpu"],
            purchase_model=d["purchase_model"],
            tags=FrozenMap(d["tags"]),
        )


@dataclass(frozen=True, slots=True)
class InstanceDeleted:
    """An instance was deleted on purpose (not reclaimed): by the orchestrator, an operator or
    its owner.
    """

    EVENT_TYPE: ClassVar[str] = "instance_deleted"
    RECORD_NAME: ClassVar[str] = "spotcap.events.InstanceDeleted"
    TOPIC: ClassVar[str] = "lifecycle"
    KEY: ClassVar[str] = "instance_id"

    instance_id: str
    """The provider's instance id (a Nova server UUID on OpenStack)."""
    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    workload_id: str
    """The workload, as named in its contract."""
    deleted_by: DeletionInitiator
    """Who asked for the deletion."""
    principal: str
    """The identity that made the call (application credential or OIDC subject)."""
    reason: str
    """Why, in words."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "pool_id": self.pool_id,
            "workload_id": self.workload_id,
            "deleted_by": self.deleted_by,
            "principal": self.principal,
            "reason": self.reason,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            instance_id=d["instance_id"],
            pool_id=d["pool_id"],
            workload_id=d["workload_id"],
            deleted_by=d["deleted_by"],
            principal=d["principal"],
            reason=d["reason"],
        )


@dataclass(frozen=True, slots=True)
class Advisory:
    """The provider warned that an instance is likely to be reclaimed soon (provider commitment);
    drains early only where the contract opts in (ADR-16).
    """

    EVENT_TYPE: ClassVar[str] = "advisory"
    RECORD_NAME: ClassVar[str] = "spotcap.events.Advisory"
    TOPIC: ClassVar[str] = "lifecycle"
    KEY: ClassVar[str] = "instance_id"

    instance_id: str
    """The provider's instance id (a Nova server UUID on OpenStack)."""
    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    expected_reclaim_at: int
    """When the provider expects to reclaim the instance."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "pool_id": self.pool_id,
            "expected_reclaim_at": self.expected_reclaim_at,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            instance_id=d["instance_id"],
            pool_id=d["pool_id"],
            expected_reclaim_at=d["expected_reclaim_at"],
        )


@dataclass(frozen=True, slots=True)
class NoticeReceived:
    """The node agent received a hard reclaim notice (at least 120 s before deletion); duplicates
    are ignored by the agent, so there is one per notice.
    """

    EVENT_TYPE: ClassVar[str] = "notice_received"
    RECORD_NAME: ClassVar[str] = "spotcap.events.NoticeReceived"
    TOPIC: ClassVar[str] = "lifecycle"
    KEY: ClassVar[str] = "instance_id"

    instance_id: str
    """The provider's instance id (a Nova server UUID on OpenStack)."""
    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    workload_id: str
    """The workload, as named in its contract."""
    deadline_at: int
    """When the provider will delete the instance."""
    source: NoticeSource
    """Which channel delivered the notice first."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "pool_id": self.pool_id,
            "workload_id": self.workload_id,
            "deadline_at": self.deadline_at,
            "source": self.source,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            instance_id=d["instance_id"],
            pool_id=d["pool_id"],
            workload_id=d["workload_id"],
            deadline_at=d["deadline_at"],
            source=d["source"],
        )


@dataclass(frozen=True, slots=True)
class DrainStarted:
    """The node agent began draining an instance."""

    EVENT_TYPE: ClassVar[str] = "drain_started"
    RECORD_NAME: ClassVar[str] = "spotcap.events.DrainStarted"
    TOPIC: ClassVar[str] = "lifecycle"
    KEY: ClassVar[str] = "instance_id"

    instance_id: str
    """The provider's instance id (a Nova server UUID on OpenStack)."""
    workload_id: str
    """The workload, as named in its contract."""
    path: DrainPath
    """The drain path taken."""
    drain_budget_s: int
    """The contract's drain budget for this drain."""
    trigger: DrainTrigger
    """What started the drain."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "workload_id": self.workload_id,
            "path": self.path,
            "drain_budget_s": self.drain_budget_s,
            "trigger": self.trigger,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            instance_id=d["instance_id"],
            workload_id=d["workload_id"],
            path=d["path"],
            drain_budget_s=d["drain_budget_s"],
            trigger=d["trigger"],
        )


@dataclass(frozen=True, slots=True)
class DrainCompleted:
    """The node agent finished a drain and verified (or failed to verify) that the node is empty."""

    EVENT_TYPE: ClassVar[str] = "drain_completed"
    RECORD_NAME: ClassVar[str] = "spotcap.events.DrainCompleted"
    TOPIC: ClassVar[str] = "lifecycle"
    KEY: ClassVar[str] = "instance_id"

    instance_id: str
    """The provider's instance id (a Nova server UUID on OpenStack)."""
    workload_id: str
    """The workload, as named in its contract."""
    path: DrainPath
    """The drain path that completed the drain."""
    duration_s: float
    """Seconds from drain start to completion."""
    verified: bool
    """Whether the agent verified the node was empty of the workload."""
    overrun: bool
    """Whether the drain took longer than its budget."""
    fell_back_to_local: bool
    """Whether the scheduler did not answer within 800 ms and the local path took over."""
    deadline_margin_s: float | None = None
    """Seconds left before the notice deadline at completion; negative if past it."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "workload_id": self.workload_id,
            "path": self.path,
            "duration_s": self.duration_s,
            "verified": self.verified,
            "overrun": self.overrun,
            "fell_back_to_local": self.fell_back_to_local,
            "deadline_margin_s": self.deadline_margin_s,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            instance_id=d["instance_id"],
            workload_id=d["workload_id"],
            path=d["path"],
            duration_s=d["duration_s"],
            verified=d["verified"],
            overrun=d["overrun"],
            fell_back_to_local=d["fell_back_to_local"],
            deadline_margin_s=d["deadline_margin_s"],
        )


@dataclass(frozen=True, slots=True)
class CheckpointWritten:
    """A workload on an instance wrote a checkpoint through the platform client (ADR-18)."""

    EVENT_TYPE: ClassVar[str] = "checkpoint_written"
    RECORD_NAME: ClassVar[str] = "spotcap.events.CheckpointWritten"
    TOPIC: ClassVar[str] = "lifecycle"
    KEY: ClassVar[str] = "instance_id"

    instance_id: str
    """The provider's instance id (a Nova server UUID on OpenStack)."""
    workload_id: str
    """The workload, as named in its contract."""
    generation: int
    """Checkpoint generation, increasing per workload unit."""
    written_bytes: int
    """Size of the checkpoint written."""
    duration_s: float
    """Seconds the write took, manifest included."""
    final: bool
    """Whether this was the final checkpoint written on a notice."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "workload_id": self.workload_id,
            "generation": self.generation,
            "written_bytes": self.written_bytes,
            "duration_s": self.duration_s,
            "final": self.final,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            instance_id=d["instance_id"],
            workload_id=d["workload_id"],
            generation=d["generation"],
            written_bytes=d["written_bytes"],
            duration_s=d["duration_s"],
            final=d["final"],
        )


@dataclass(frozen=True, slots=True)
class InstanceLost:
    """An instance went away without the orchestrator asking: reclaimed, with or without a
    notice, or failed.
    """

    EVENT_TYPE: ClassVar[str] = "instance_lost"
    RECORD_NAME: ClassVar[str] = "spotcap.events.InstanceLost"
    TOPIC: ClassVar[str] = "lifecycle"
    KEY: ClassVar[str] = "instance_id"

    instance_id: str
    """The provider's instance id (a Nova server UUID on OpenStack)."""
    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    workload_id: str
    """The workload, as named in its contract."""
    vcpu: int
    """vCPU lost."""
    purchase_model: PurchaseModel
    """How the instance was bought."""
    with_notice: bool
    """Whether a notice was received before the loss."""
    reason: LossReason
    """Why the instance was lost."""
    notice_event_id: str | None = None
    """The notice_received event, when there was one."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "pool_id": self.pool_id,
            "workload_id": self.workload_id,
            "vcpu": self.vcpu,
            "purchase_model": self.purchase_model,
            "with_notice": self.with_notice,
            "reason": self.reason,
            "notice_event_id": self.notice_event_id,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            instance_id=d["instance_id"],
            pool_id=d["pool_id"],
            workload_id=d["workload_id"],
            vcpu=d["vcpu"],
            purchase_model=d["purchase_model"],
            with_notice=d["with_notice"],
            reason=d["reason"],
            notice_event_id=d["notice_event_id"],
        )


@dataclass(frozen=True, slots=True)
class WorkWasted:
    """Work a loss destroyed: the vCPU-seconds since the last checkpoint, charged to the workload
    (ADR-26).
    """

    EVENT_TYPE: ClassVar[str] = "work_wasted"
    RECORD_NAME: ClassVar[str] = "spotcap.events.WorkWasted"
    TOPIC: ClassVar[str] = "usage"
    KEY: ClassVar[str] = "workload_id"

    workload_id: str
    """The workload, as named in its contract."""
    instance_id: str
    """The provider's instance id (a Nova server UUID on OpenStack)."""
    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    wasted_vcpu_s: float
    """vCPU-seconds of work since the last checkpoint."""
    last_checkpoint_at: int | None = None
    """When the last checkpoint was written; null if none was."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "instance_id": self.instance_id,
            "pool_id": self.pool_id,
            "wasted_vcpu_s": self.wasted_vcpu_s,
            "last_checkpoint_at": self.last_checkpoint_at,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            workload_id=d["workload_id"],
            instance_id=d["instance_id"],
            pool_id=d["pool_id"],
            wasted_vcpu_s=d["wasted_vcpu_s"],
            last_checkpoint_at=d["last_checkpoint_at"],
        )


@dataclass(frozen=True, slots=True)
class ReplacementRequested:
    """On a notice or a loss, replacement capacity was requested elsewhere, in parallel with the
    drain and inside the same caps (ADR-09).
    """

    EVENT_TYPE: ClassVar[str] = "replacement_requested"
    RECORD_NAME: ClassVar[str] = "spotcap.events.ReplacementRequested"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "workload_id"

    workload_id: str
    """The workload, as named in its contract."""
    replaces_instance_id: str
    """The instance being replaced."""
    vcpu: int
    """vCPU requested."""
    purchase_model: PurchaseModel
    """How the replacement is to be bought."""
    excluded_pool_ids: tuple[str, ...]
    """Pools the replacement must not go to: the lost pool's correlation group and excluded
    pools.
    """
    allocations: tuple[Allocation, ...] = ()
    """Where the replacement goes, per pool and purchase model."""
    replaces_pool_id: str | None = None
    """The pool of the instance being replaced."""
    floor: bool = False
    """Whether the replaced instance held part of the guaranteed floor; a floor replacement goes
    to committed capacity in another hall first (ADR-22).
    """
    caps_held: bool = True
    """Whether the replacement keeps the workload within the pool and correlation-group caps
    (ADR-08).
    """
    caps_reason: str | None = None
    """When the caps could not hold or the lost pool's group could not be avoided, why, in words."""
    unplaced_vcpu: int = 0
    """vCPU the replacement could not place; the fallback arbiter decides whether guaranteed
    capacity covers them (ADR-23).
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "replaces_instance_id": self.replaces_instance_id,
            "vcpu": self.vcpu,
            "purchase_model": self.purchase_model,
            "excluded_pool_ids": list(self.excluded_pool_ids),
            "allocations": [x0.to_avro() for x0 in self.allocations],
            "replaces_pool_id": self.replaces_pool_id,
            "floor": self.floor,
            "caps_held": self.caps_held,
            "caps_reason": self.caps_reason,
            "unplaced_vcpu": self.unplaced_vcpu,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            workload_id=d["workload_id"],
            replaces_instance_id=d["replaces_instance_id"],
            vcpu=d["vcpu"],
            purchase_model=d["purchase_model"],
            excluded_pool_ids=tuple(d["excluded_pool_ids"]),
            allocations=tuple([Allocation.from_avro(x0) for x0 in d["allocations"]]),
            replaces_pool_id=d["replaces_pool_id"],
            floor=d["floor"],
            caps_held=d["caps_held"],
            caps_reason=d["caps_reason"],
            unplaced_vcpu=d["unplaced_vcpu"],
        )


@dataclass(frozen=True, slots=True)
class FallbackDecided:
    """The fallback arbiter or floor keeper moved work to guaranteed capacity, under the
    authority named by kind (ADR-23, ADR-24).
    """

    EVENT_TYPE: ClassVar[str] = "fallback_decided"
    RECORD_NAME: ClassVar[str] = "spotcap.events.FallbackDecided"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "workload_id"

    workload_id: str
    """The workload, as named in its contract."""
    kind: FallbackKind
    """The authority the fallback runs under."""
    vcpu: int
    """vCPU moved to guaranteed capacity."""
    spend_eur_micros: int
    """Fallback spend of the workload this day (UTC), including this decision's projected cost."""
    cap_eur_micros: int
    """The workload's declared daily (UTC) fallback cap."""
    approver: str
    """The named approver (paged when kind is escalated)."""
    priority: int
    """The workload's fallback priority, which staggered this decision."""
    reason: str
    """Why fallback was needed, in words."""
    allocations: tuple[Allocation, ...] = ()
    """Where the guaranteed capacity goes, per pool and purchase model."""
    awaiting_approval: bool = False
    """True for an escalation that pages the approver: nothing is launched or spent until a
    fallback_reviewed approves it (ADR-23).
    """
    projected_eur_micros: int = 0
    """This decision's own projected spend, counted against the day's cap; 0 while awaiting
    approval.
    """
    deadline_slack_s: int | None = None
    """For a deadline fallback: seconds of slack left before the deadline after the remaining
    work.
    """
    expected_loss_s: int | None = None
    """For a deadline fallback: seconds of progress the expected interruptions until the deadline
    would cost on reclaimable capacity.
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "kind": self.kind,
            "vcpu": self.vcpu,
            "spend_eur_micros": self.spend_eur_micros,
            "cap_eur_micros": self.cap_eur_micros,
            "approver": self.approver,
            "priority": self.priority,
            "reason": self.reason,
            "allocations": [x0.to_avro() for x0 in self.allocations],
            "awaiting_approval": self.awaiting_approval,
            "projected_eur_micros": self.projected_eur_micros,
            "deadline_slack_s": self.deadline_slack_s,
            "expected_loss_s": self.expected_loss_s,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            workload_id=d["workload_id"],
            kind=d["kind"],
            vcpu=d["vcpu"],
            spend_eur_micros=d["spend_eur_micros"],
            cap_eur_micros=d["cap_eur_micros"],
            approver=d["approver"],
            priority=d["priority"],
            reason=d["reason"],
            allocations=tuple([Allocation.from_avro(x0) for x0 in d["allocations"]]),
            awaiting_approval=d["awaiting_approval"],
            projected_eur_micros=d["projected_eur_micros"],
            deadline_slack_s=d["deadline_slack_s"],
            expected_loss_s=d["expected_loss_s"],
        )


@dataclass(frozen=True, slots=True)
class FallbackReturned:
    """Work returned from guaranteed to reclaimable capacity after sustained health and the
    minimum dwell (ADR-24).
    """

    EVENT_TYPE: ClassVar[str] = "fallback_returned"
    RECORD_NAME: ClassVar[str] = "spotcap.events.FallbackReturned"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "workload_id"

    workload_id: str
    """The workload, as named in its contract."""
    vcpu: int
    """vCPU returned to reclaimable capacity."""
    dwell_s: int
    """How long the work stayed on guaranteed capacity."""
    fallback_event_id: str | None = None
    """The fallback_decided event this return ends."""
    instance_ids: tuple[str, ...] = ()
    """The guaranteed instances the fallback launched, to be released once the work is back on
    reclaimable capacity.
    """
    healthy_s: int = 0
    """How long the workload had seen no notice or loss before the return (sustained health,
    ADR-24).
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "vcpu": self.vcpu,
            "dwell_s": self.dwell_s,
            "fallback_event_id": self.fallback_event_id,
            "instance_ids": list(self.instance_ids),
            "healthy_s": self.healthy_s,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            workload_id=d["workload_id"],
            vcpu=d["vcpu"],
            dwell_s=d["dwell_s"],
            fallback_event_id=d["fallback_event_id"],
            instance_ids=tuple(d["instance_ids"]),
            healthy_s=d["healthy_s"],
        )


@dataclass(frozen=True, slots=True)
class UsageInterval:
    """Capacity a workload used over an interval, by purchase model; the quantity the ledger
    prices.
    """

    EVENT_TYPE: ClassVar[str] = "usage_interval"
    RECORD_NAME: ClassVar[str] = "spotcap.events.UsageInterval"
    TOPIC: ClassVar[str] = "usage"
    KEY: ClassVar[str] = "workload_id"

    workload_id: str
    """The workload, as named in its contract."""
    instance_id: str
    """The provider's instance id (a Nova server UUID on OpenStack)."""
    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    purchase_model: PurchaseModel
    """How the capacity was bought."""
    start_at: int
    """Start of the interval (inclusive)."""
    end_at: int
    """End of the interval (exclusive)."""
    vcpu: int
    """vCPU in use throughout the interval."""
    used_vcpu_h: float
    """vCPU-hours used in the interval (a quantity, not money; priced by the ledger)."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "instance_id": self.instance_id,
            "pool_id": self.pool_id,
            "purchase_model": self.purchase_model,
            "start_at": self.start_at,
            "end_at": self.end_at,
            "vcpu": self.vcpu,
            "used_vcpu_h": self.used_vcpu_h,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            workload_id=d["workload_id"],
            instance_id=d["instance_id"],
            pool_id=d["pool_id"],
            purchase_model=d["purchase_model"],
            start_at=d["start_at"],
            end_at=d["end_at"],
            vcpu=d["vcpu"],
            used_vcpu_h=d["used_vcpu_h"],
        )


@dataclass(frozen=True, slots=True)
class ActuationThrottled:
    """The actuator delayed a mutating provider call because the regional token budget was spent
    (ADR-12).
    """

    EVENT_TYPE: ClassVar[str] = "actuation_throttled"
    RECORD_NAME: ClassVar[str] = "spotcap.events.ActuationThrottled"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "region"

    call: ActuationCall
    """The kind of call delayed."""
    tokens_available: float
    """Tokens left in the bucket when the call was made."""
    budget_per_s: float
    """The token budget, in mutating calls per second."""
    queued_calls: int
    """Calls waiting behind this one."""
    delay_ms: int
    """How long the call is delayed."""
    operation: str | None = None
    """The provider operation when it is not one of the actuator's own calls (e.g. 'reclaim', the
    exercise job's call, drawn as a delete); null otherwise.
    """
    not_before_at: int | None = None
    """Event time at which the delayed call may go out."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "call": self.call,
            "tokens_available": self.tokens_available,
            "budget_per_s": self.budget_per_s,
            "queued_calls": self.queued_calls,
            "delay_ms": self.delay_ms,
            "operation": self.operation,
            "not_before_at": self.not_before_at,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            call=d["call"],
            tokens_available=d["tokens_available"],
            budget_per_s=d["budget_per_s"],
            queued_calls=d["queued_calls"],
            delay_ms=d["delay_ms"],
            operation=d["operation"],
            not_before_at=d["not_before_at"],
        )


@dataclass(frozen=True, slots=True)
class BreakerTripped:
    """A termination breaker opened: more terminations were observed in the window than the
    threshold allows, so the actuator stops deleting (ADR-12).
    """

    EVENT_TYPE: ClassVar[str] = "breaker_tripped"
    RECORD_NAME: ClassVar[str] = "spotcap.events.BreakerTripped"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "region"

    breaker: str
    """The breaker's name."""
    terminations_observed: int
    """Terminations observed in the window."""
    window_s: int
    """Length of the window."""
    threshold: int
    """Terminations the window allows."""
    reason: str | None = None
    """What opened the breaker, in words: mass termination (the termination breaker) or failing
    launches (the provider breaker, whose outage drops the budget to a trickle until a launch
    succeeds).
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "breaker": self.breaker,
            "terminations_observed": self.terminations_observed,
            "window_s": self.window_s,
            "threshold": self.threshold,
            "reason": self.reason,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            breaker=d["breaker"],
            terminations_observed=d["terminations_observed"],
            window_s=d["window_s"],
            threshold=d["threshold"],
            reason=d["reason"],
        )


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """An input record could not be processed; it is kept whole with the reason, delivered here
    before its offset was committed.
    """

    EVENT_TYPE: ClassVar[str] = "dead_lettered"
    RECORD_NAME: ClassVar[str] = "spotcap.events.DeadLettered"
    TOPIC: ClassVar[str] = "deadletter"
    KEY: ClassVar[str] = "origin_topic"

    origin_topic: str
    """Topic the record was read from."""
    origin_partition: int
    """Partition the record was read from."""
    origin_offset: int
    """Offset of the record in that partition."""
    processor: str
    """The processing step that rejected the record."""
    error_class: str
    """The error's class, e.g. 'schemas.codec.DecodeError'."""
    reason: str
    """Why the record was rejected, in words."""
    raw_value: bytes
    """The record's value, exactly as read."""
    raw_key: bytes | None = None
    """The record's key, exactly as read; null if it had none."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "origin_topic": self.origin_topic,
            "origin_partition": self.origin_partition,
            "origin_offset": self.origin_offset,
            "processor": self.processor,
            "error_class": self.error_class,
            "reason": self.reason,
            "raw_value": self.raw_value,
            "raw_key": self.raw_key,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            origin_topic=d["origin_topic"],
            origin_partition=d["origin_partition"],
            origin_offset=d["origin_offset"],
            processor=d["processor"],
            error_class=d["error_class"],
            reason=d["reason"],
            raw_value=d["raw_value"],
            raw_key=d["raw_key"],
        )


@dataclass(frozen=True, slots=True)
class PoolRegistered:
    """A pool entered or changed in the pool catalogue, with the attributes placement filters and
    diversifies on (ADR-06); the market topic compacts to the current catalogue.
    """

    EVENT_TYPE: ClassVar[str] = "pool_registered"
    RECORD_NAME: ClassVar[str] = "spotcap.events.PoolRegistered"
    TOPIC: ClassVar[str] = "market"
    KEY: ClassVar[str] = "pool_id"

    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    sku_family: str
    """Hardware family, e.g. 'c7-amd'."""
    instance_vcpu: int
    """vCPU of one instance of the pool's size."""
    hall: str
    """The data hall the pool's hosts stand in."""
    host_aggregate: str
    """The OpenStack host aggregate the pool is drawn from."""
    purchase_model: PurchaseModel
    """How capacity in the pool is bought."""
    correlation_group: str
    """Pools that are reclaimed together; placement caps each group at 30% (ADR-06)."""
    capacity_vcpu: int
    """Total vCPU the pool holds."""
    attributes: Mapping[str, str]
    """Further attributes the eligibility filter reads (accelerator, memory per vCPU, ...)."""
    expected_interruption_per_h: float | None = None
    """Reclamations per instance-hour the pool's record (the catalogue) leads one to expect; the
    exclusion watcher compares what it observes with it (ADR-07). Null when the pool has no
    record.
    """

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", frozen_map(self.attributes))

    def to_avro(self) -> dict[str, Any]:
        return {
            "pool_id": self.pool_id,
            "sku_family": self.sku_family,
            "instance_vcpu": self.instance_vcpu,
            "hall": self.hall,
            "host_aggregate": self.host_aggregate,
            "purchase_model": self.purchase_model,
            "correlation_group": self.correlation_group,
            "capacity_vcpu": self.capacity_vcpu,
            "attributes": dict(self.attributes),
            "expected_interruption_per_h": self.expected_interruption_per_h,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            pool_id=d["pool_id"],
            sku_family=d["sku_family"],
            instance_vcpu=d["instance_vcpu"],
            hall=d["hall"],
            host_aggregate=d["host_aggregate"],
            purchase_model=d["purchase_model"],
            correlation_group=d["correlation_group"],
            capacity_vcpu=d["capacity_vcpu"],
            attributes=FrozenMap(d["attributes"]),
            expected_interruption_per_h=d["expected_interruption_per_h"],
        )


@dataclass(frozen=True, slots=True)
class BreakerReset:
    """A tripped breaker began closing again; the actuator resumes at a fraction of its budget
    and raises it stepwise (gradual recovery, ADR-12).
    """

    EVENT_TYPE: ClassVar[str] = "breaker_reset"
    RECORD_NAME: ClassVar[str] = "spotcap.events.BreakerReset"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "region"

    breaker: str
    """The breaker's name."""
    open_s: int
    """How long the breaker was open."""
    budget_ratio: float
    """Share of the normal token budget the actuator resumes at."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "breaker": self.breaker,
            "open_s": self.open_s,
            "budget_ratio": self.budget_ratio,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            breaker=d["breaker"],
            open_s=d["open_s"],
            budget_ratio=d["budget_ratio"],
        )


@dataclass(frozen=True, slots=True)
class FallbackReviewed:
    """The named approver answered an escalated fallback (ADR-23, ADR-30)."""

    EVENT_TYPE: ClassVar[str] = "fallback_reviewed"
    RECORD_NAME: ClassVar[str] = "spotcap.events.FallbackReviewed"
    TOPIC: ClassVar[str] = "demand"
    KEY: ClassVar[str] = "workload_id"

    workload_id: str
    """The workload, as named in its contract."""
    approver: str
    """Who answered (OIDC subject)."""
    outcome: ApprovalOutcome
    """The answer."""
    vcpu: int
    """vCPU the answer covers."""
    approved_spend_eur_micros: int
    """Spend approved beyond the cap, in micro-euros; 0 when rejected."""
    valid_until_at: int | None = None
    """Until when the approval holds; null for this incident only."""
    note: str | None = None
    """The approver's note."""
    escalation_event_id: str | None = None
    """The escalated fallback_decided this answers; an answer to another escalation is not this
    one's.
    """
    signature: str | None = None
    """The approver's Ed25519 signature (base64) of the review's canonical statement
    (streams.deciders.approval); the arbiter accepts an approval only when it verifies against
    the approver_key of the workload's contract (ADR-30).
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "approver": self.approver,
            "outcome": self.outcome,
            "vcpu": self.vcpu,
            "approved_spend_eur_micros": self.approved_spend_eur_micros,
            "valid_until_at": self.valid_until_at,
            "note": self.note,
            "escalation_event_id": self.escalation_event_id,
            "signature": self.signature,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            workload_id=d["workload_id"],
            approver=d["approver"],
            outcome=d["outcome"],
            vcpu=d["vcpu"],
            approved_spend_eur_micros=d["approved_spend_eur_micros"],
            valid_until_at=d["valid_until_at"],
            note=d["note"],
            escalation_event_id=d["escalation_event_id"],
            signature=d["signature"],
        )


@dataclass(frozen=True, slots=True)
class LaunchFailed:
    """The provider refused or failed a launch the actuator made for a decision (quota, no
    capacity, API error); without it a missing instance would be silent.
    """

    EVENT_TYPE: ClassVar[str] = "launch_failed"
    RECORD_NAME: ClassVar[str] = "spotcap.events.LaunchFailed"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "workload_id"

    workload_id: str
    """The workload, as named in its contract."""
    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    vcpu: int
    """vCPU the launch asked for."""
    purchase_model: PurchaseModel
    """How the capacity was to be bought."""
    error_class: str
    """The provider error's class or code."""
    reason: str
    """The provider's message, in words."""
    retryable: bool
    """Whether the actuator will retry the launch."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "pool_id": self.pool_id,
            "vcpu": self.vcpu,
            "purchase_model": self.purchase_model,
            "error_class": self.error_class,
            "reason": self.reason,
            "retryable": self.retryable,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            workload_id=d["workload_id"],
            pool_id=d["pool_id"],
            vcpu=d["vcpu"],
            purchase_model=d["purchase_model"],
            error_class=d["error_class"],
            reason=d["reason"],
            retryable=d["retryable"],
        )


@dataclass(frozen=True, slots=True)
class ActuationRefused:
    """The actuator refused a mutating provider call: a termination of an instance not tagged as
    the orchestrator's own, or a termination while the termination breaker is open (ADR-11,
    ADR-12). Nothing is sent to the provider.
    """

    EVENT_TYPE: ClassVar[str] = "actuation_refused"
    RECORD_NAME: ClassVar[str] = "spotcap.events.ActuationRefused"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "region"

    call: ActuationCall
    """The kind of call refused."""
    rule: str
    """The rule that refused it: not_owned (the instance lacks the orchestrator's owner tag) or
    termination (the termination breaker is open: mass termination stopped).
    """
    reason: str
    """Why, in words, with the figures the rule compared."""
    instance_id: str | None = None
    """The instance the call was about, for a delete."""
    pool_id: str | None = None
    """The pool the call was about, for a launch or reserve."""
    workload_id: str | None = None
    """The workload the call was for, when known."""
    owner_tag: str | None = None
    """The owner tag found on the instance (null: none, or the instance is unknown to the
    orchestrator).
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "call": self.call,
            "rule": self.rule,
            "reason": self.reason,
            "instance_id": self.instance_id,
            "pool_id": self.pool_id,
            "workload_id": self.workload_id,
            "owner_tag": self.owner_tag,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            call=d["call"],
            rule=d["rule"],
            reason=d["reason"],
            instance_id=d["instance_id"],
            pool_id=d["pool_id"],
            workload_id=d["workload_id"],
            owner_tag=d["owner_tag"],
        )


@dataclass(frozen=True, slots=True)
class CapacityReleased:
    """The work behind a capacity claim finished: its scheduler no longer needs the capacity
    placed for the claim, which the orchestrator may now scale down (delete the instances
    serving the claim).
    """

    EVENT_TYPE: ClassVar[str] = "capacity_released"
    RECORD_NAME: ClassVar[str] = "spotcap.events.CapacityReleased"
    TOPIC: ClassVar[str] = "demand"
    KEY: ClassVar[str] = "workload_id"

    claim_id: str
    """The claim whose work finished."""
    workload_id: str
    """The workload, as named in its contract."""
    scheduler: Scheduler
    """The scheduler that ran the work."""
    released_vcpu: int
    """vCPU the claim asked for, no longer needed."""
    reason: str
    """Why the capacity is no longer needed, in words (e.g. 'daily pipeline finished')."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "claim_id": self.claim_id,
            "workload_id": self.workload_id,
            "scheduler": self.scheduler,
            "released_vcpu": self.released_vcpu,
            "reason": self.reason,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            claim_id=d["claim_id"],
            workload_id=d["workload_id"],
            scheduler=d["scheduler"],
            released_vcpu=d["released_vcpu"],
            reason=d["reason"],
        )


@dataclass(frozen=True, slots=True)
class EvictionAttempted:
    """The node agent called the Kubernetes Eviction API for one pod during a drain; one event
    per attempt, so retries after a 429 are visible (ADR-14).
    """

    EVENT_TYPE: ClassVar[str] = "eviction_attempted"
    RECORD_NAME: ClassVar[str] = "spotcap.events.EvictionAttempted"
    TOPIC: ClassVar[str] = "lifecycle"
    KEY: ClassVar[str] = "instance_id"

    instance_id: str
    """The provider's instance id (a Nova server UUID on OpenStack)."""
    workload_id: str
    """The workload, as named in its contract."""
    pod: str
    """The pod evicted, as namespace/name."""
    attempt: int
    """1 for the first call for this pod, then 2, 3, ... for each retry."""
    outcome: EvictionOutcome
    """How the call ended."""
    http_status: int | None
    """The API server's HTTP status, if it answered."""
    duration_s: float
    """Seconds the call took (at most the 800 ms cap, plus scheduling)."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "workload_id": self.workload_id,
            "pod": self.pod,
            "attempt": self.attempt,
            "outcome": self.outcome,
            "http_status": self.http_status,
            "duration_s": self.duration_s,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            instance_id=d["instance_id"],
            workload_id=d["workload_id"],
            pod=d["pod"],
            attempt=d["attempt"],
            outcome=d["outcome"],
            http_status=d["http_status"],
            duration_s=d["duration_s"],
        )


@dataclass(frozen=True, slots=True)
class CheckpointTriggered:
    """The node agent triggered a workload's final checkpoint on a drain through the method its
    contract declares, and records how that ended; a written checkpoint is also recorded as
    checkpoint_written.
    """

    EVENT_TYPE: ClassVar[str] = "checkpoint_triggered"
    RECORD_NAME: ClassVar[str] = "spotcap.events.CheckpointTriggered"
    TOPIC: ClassVar[str] = "lifecycle"
    KEY: ClassVar[str] = "instance_id"

    instance_id: str
    """The provider's instance id (a Nova server UUID on OpenStack)."""
    workload_id: str
    """The workload, as named in its contract."""
    method: str
    """The contract's checkpoint method: application, spark, pytorch or slurm-requeue."""
    outcome: CheckpointOutcome
    """How the trigger ended."""
    duration_s: float
    """Seconds from the trigger to its outcome."""
    detail: str | None = None
    """Why it failed, or what the workload reported, in a few words."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "workload_id": self.workload_id,
            "method": self.method,
            "outcome": self.outcome,
            "duration_s": self.duration_s,
            "detail": self.detail,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            instance_id=d["instance_id"],
            workload_id=d["workload_id"],
            method=d["method"],
            outcome=d["outcome"],
            duration_s=d["duration_s"],
            detail=d["detail"],
        )


@dataclass(frozen=True, slots=True)
class ActuationOrdered:
    """The actuator guard allowed one mutating provider call that a decision implies, and says
    when it may go out (ADR-11, ADR-12). The actuator carries out each order once: a launch is
    tagged with this event's id (spotcap.io/call), which finds it again after a crash. Its
    cause is the decision (or the fact) the call carries out.
    """

    EVENT_TYPE: ClassVar[str] = "actuation_ordered"
    RECORD_NAME: ClassVar[str] = "spotcap.events.ActuationOrdered"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "region"

    call: ActuationCall
    """The kind of call ordered."""
    call_index: int
    """The call's place among the calls its cause implies, from 0."""
    not_before_at: int
    """Event time at which the call may go out: the cause's own time, or later when the token
    budget delayed it (then an actuation_throttled says why).
    """
    pool_id: str | None = None
    """The pool to launch in, for a launch."""
    instance_id: str | None = None
    """The instance to delete, for a delete."""
    workload_id: str | None = None
    """The workload the call is for."""
    orderly: bool = False
    """A scale-down delete (a released claim's instance): paced under the termination breaker
    instead of tripping it.
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "call": self.call,
            "call_index": self.call_index,
            "not_before_at": self.not_before_at,
            "pool_id": self.pool_id,
            "instance_id": self.instance_id,
            "workload_id": self.workload_id,
            "orderly": self.orderly,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            call=d["call"],
            call_index=d["call_index"],
            not_before_at=d["not_before_at"],
            pool_id=d["pool_id"],
            instance_id=d["instance_id"],
            workload_id=d["workload_id"],
            orderly=d["orderly"],
        )


@dataclass(frozen=True, slots=True)
class DriftDetected:
    """The reconciler found the provider and the fleet state disagreeing about an instance
    (ADR-10, ADR-11): the provider's tags are the truth, the state is brought to them, and
    nothing that is not tagged as the orchestrator's own is ever deleted.
    """

    EVENT_TYPE: ClassVar[str] = "drift_detected"
    RECORD_NAME: ClassVar[str] = "spotcap.events.DriftDetected"
    TOPIC: ClassVar[str] = "lifecycle"
    KEY: ClassVar[str] = "instance_id"

    kind: str
    """unknown_instance (the provider runs an instance tagged as the orchestrator's own that the
    state does not know), missing_instance (the state has a live instance the provider no
    longer lists) or owner_changed (an instance the state knows as the orchestrator's own is
    now tagged with another owner).
    """
    instance_id: str
    """The instance."""
    pool_id: str | None
    """Its pool, from the state or the provider's tags."""
    workload_id: str | None
    """Its workload, from the state or the provider's tags."""
    state_says: str
    """What the fleet state holds about it (its state and owner tag, or that it does not know
    it).
    """
    provider_says: str
    """What the provider lists (its owner tag, or that it does not list it)."""
    action: str
    """What the reconciler did about it: adopted (an instance_launched for it follows), lost (an
    instance_lost follows), or left alone (and why).
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "instance_id": self.instance_id,
            "pool_id": self.pool_id,
            "workload_id": self.workload_id,
            "state_says": self.state_says,
            "provider_says": self.provider_says,
            "action": self.action,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            kind=d["kind"],
            instance_id=d["instance_id"],
            pool_id=d["pool_id"],
            workload_id=d["workload_id"],
            state_says=d["state_says"],
            provider_says=d["provider_says"],
            action=d["action"],
        )


@dataclass(frozen=True, slots=True)
class FallbackWithheld:
    """The fallback arbiter withheld spend no named authority allows (ADR-23, ADR-30): guaranteed
    capacity beyond the workload's daily cap when its contract names no approver (the work
    waits, unspent, and the owner is told), or an approval from someone other than the
    approver the contract names (refused).
    """

    EVENT_TYPE: ClassVar[str] = "fallback_withheld"
    RECORD_NAME: ClassVar[str] = "spotcap.events.FallbackWithheld"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "workload_id"

    workload_id: str
    """The workload, as named in its contract."""
    vcpu: int
    """vCPU left waiting on reclaimable capacity (or that the refused approval covered)."""
    spend_eur_micros: int
    """Fallback spend of the workload this day (UTC) so far, in micro-euros."""
    cap_eur_micros: int
    """The workload's declared daily (UTC) fallback cap, in micro-euros."""
    would_cost_eur_micros: int
    """What the withheld guaranteed capacity would have cost beyond the cap (projected to the end
    of the UTC day), in micro-euros.
    """
    owner: str
    """The team that owns the workload, told that its work waits."""
    reason: str
    """Why, in words."""
    approver: str | None = None
    """The approver the contract names; null when it names none."""
    refused_approver: str | None = None
    """Who answered when an approval from someone other than the named approver was refused; null
    otherwise.
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "vcpu": self.vcpu,
            "spend_eur_micros": self.spend_eur_micros,
            "cap_eur_micros": self.cap_eur_micros,
            "would_cost_eur_micros": self.would_cost_eur_micros,
            "owner": self.owner,
            "reason": self.reason,
            "approver": self.approver,
            "refused_approver": self.refused_approver,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            workload_id=d["workload_id"],
            vcpu=d["vcpu"],
            spend_eur_micros=d["spend_eur_micros"],
            cap_eur_micros=d["cap_eur_micros"],
            would_cost_eur_micros=d["would_cost_eur_micros"],
            owner=d["owner"],
            reason=d["reason"],
            approver=d["approver"],
            refused_approver=d["refused_approver"],
        )


@dataclass(frozen=True, slots=True)
class DrillStarted:
    """The daily drill reclaimed a share of a pool through the provider's own reclaim path, so
    the real notice, drain and replacement path is exercised on an ordinary day (ADR-33).
    Every notice, drain and replacement it causes carries the drill's id as correlation id.
    """

    EVENT_TYPE: ClassVar[str] = "drill_started"
    RECORD_NAME: ClassVar[str] = "spotcap.events.DrillStarted"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "pool_id"

    drill_id: str
    """The drill's id: the correlation id of everything it causes."""
    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    share_ratio: float
    """The share of the pool's running instances the drill asked to reclaim."""
    pool_instance_count: int
    """The orchestrator's instances running in the pool when the drill chose."""
    instance_ids: tuple[str, ...]
    """The instances the drill asked the provider to reclaim."""
    notice_s: int
    """The notice the drill asked the provider to give (at least the contract's 120 s)."""
    plan: str
    """Where the drill came from: 'manual' (spotcap drill run --pool) or the schedule entry it
    ran.
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "drill_id": self.drill_id,
            "pool_id": self.pool_id,
            "share_ratio": self.share_ratio,
            "pool_instance_count": self.pool_instance_count,
            "instance_ids": list(self.instance_ids),
            "notice_s": self.notice_s,
            "plan": self.plan,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            drill_id=d["drill_id"],
            pool_id=d["pool_id"],
            share_ratio=d["share_ratio"],
            pool_instance_count=d["pool_instance_count"],
            instance_ids=tuple(d["instance_ids"]),
            notice_s=d["notice_s"],
            plan=d["plan"],
        )


@dataclass(frozen=True, slots=True)
class DrillRefused:
    """The daily drill did not run: a real wave is in progress, a breaker is open, another drill
    is still running or the pool has nothing to reclaim (ADR-33). Nothing was sent to the
    provider.
    """

    EVENT_TYPE: ClassVar[str] = "drill_refused"
    RECORD_NAME: ClassVar[str] = "spotcap.events.DrillRefused"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "pool_id"

    drill_id: str
    """The id the drill would have had."""
    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    share_ratio: float
    """The share of the pool the drill asked to reclaim."""
    rule: str
    """The rule that refused it: wave (real notices in the window), breaker (an actuator breaker
    is open), drill_running (another drill has not finished) or no_instances (the pool has no
    instance of ours to reclaim).
    """
    reason: str
    """Why, in words, with the figures the rule compared."""
    evidence_event_ids: tuple[str, ...]
    """The events the refusal rests on (the wave's notices, the breaker's trip, the running
    drill's start).
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "drill_id": self.drill_id,
            "pool_id": self.pool_id,
            "share_ratio": self.share_ratio,
            "rule": self.rule,
            "reason": self.reason,
            "evidence_event_ids": list(self.evidence_event_ids),
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            drill_id=d["drill_id"],
            pool_id=d["pool_id"],
            share_ratio=d["share_ratio"],
            rule=d["rule"],
            reason=d["reason"],
            evidence_event_ids=tuple(d["evidence_event_ids"]),
        )


@dataclass(frozen=True, slots=True)
class DrillFinished:
    """What a drill measured once its notices' deadlines had passed: notice to drain, drains
    verified, replacements launched before the deadline, and what it cost (ADR-33). It passes
    when every reclaimed instance was noticed, drained and verified and replaced in time.
    """

    EVENT_TYPE: ClassVar[str] = "drill_finished"
    RECORD_NAME: ClassVar[str] = "spotcap.events.DrillFinished"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "pool_id"

    drill_id: str
    """The drill's id (its drill_started)."""
    pool_id: str
    """The pool: SKU family x size x hall x purchase model (ADR-06)."""
    reclaimed_count: int
    """Instances the drill asked to reclaim."""
    noticed_count: int
    """Of those, instances whose notice reached the log."""
    drained_count: int
    """Of those, instances whose drain started."""
    drain_verified_count: int
    """Of those, drains completed and verified, without overrun."""
    notice_to_drain_p99_ms: int | None
    """p99 (nearest rank) of notice to drain start over the drained instances; null when none
    drained.
    """
    notice_to_drain_max_ms: int | None
    """The slowest notice to drain start; null when none drained."""
    replacements_requested_count: int
    """Replacements the deciders requested for the drilled instances."""
    replaced_in_time_count: int
    """Drilled instances whose replacement was launched before their deadline."""
    work_wasted_vcpu_s: float
    """Work lost on the drilled instances (since their last checkpoint)."""
    cost_eur_micros: int
    """What the drill cost: the wasted work priced at the pool's latest rate card."""
    passed: bool
    """Every drilled instance noticed, drained and verified, and replaced in time."""
    failures: tuple[str, ...]
    """What failed, one line each (empty when passed)."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "drill_id": self.drill_id,
            "pool_id": self.pool_id,
            "reclaimed_count": self.reclaimed_count,
            "noticed_count": self.noticed_count,
            "drained_count": self.drained_count,
            "drain_verified_count": self.drain_verified_count,
            "notice_to_drain_p99_ms": self.notice_to_drain_p99_ms,
            "notice_to_drain_max_ms": self.notice_to_drain_max_ms,
            "replacements_requested_count": self.replacements_requested_count,
            "replaced_in_time_count": self.replaced_in_time_count,
            "work_wasted_vcpu_s": self.work_wasted_vcpu_s,
            "cost_eur_micros": self.cost_eur_micros,
            "passed": self.passed,
            "failures": list(self.failures),
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            drill_id=d["drill_id"],
            pool_id=d["pool_id"],
            reclaimed_count=d["reclaimed_count"],
            noticed_count=d["noticed_count"],
            drained_count=d["drained_count"],
            drain_verified_count=d["drain_verified_count"],
            notice_to_drain_p99_ms=d["notice_to_drain_p99_ms"],
            notice_to_drain_max_ms=d["notice_to_drain_max_ms"],
            replacements_requested_count=d["replacements_requested_count"],
            replaced_in_time_count=d["replaced_in_time_count"],
            work_wasted_vcpu_s=d["work_wasted_vcpu_s"],
            cost_eur_micros=d["cost_eur_micros"],
            passed=d["passed"],
            failures=tuple(d["failures"]),
        )


@dataclass(frozen=True, slots=True)
class BundleCanaried:
    """A new contract bundle went to the canary partition of the region first: the nodes of the
    workload in a declared share of its pools hold it, the others keep the previous bundle
    until it is promoted (ADR-32).
    """

    EVENT_TYPE: ClassVar[str] = "bundle_canaried"
    RECORD_NAME: ClassVar[str] = "spotcap.events.BundleCanaried"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "workload_id"

    workload_id: str
    """The workload, as named in its contract."""
    contract_version: int
    """The contract version whose bundle is canaried."""
    contract_sha256: str
    """SHA-256 of the new bundle (the contract_published's contract_sha256)."""
    previous_contract_sha256: str
    """SHA-256 of the bundle the other nodes keep, and the canary returns to on a rollback."""
    canary_pool_ids: tuple[str, ...]
    """The canary partition: the pools whose nodes of the workload get the new bundle."""
    canary_share_ratio: float
    """The declared share of the workload's pools in the canary partition."""
    hold_s: int
    """How long the health figures must hold before the bundle is promoted."""
    max_notice_to_drain_p99_ms: int
    """Rolled back when notice to drain start (p99, nearest rank) in the partition exceeds this."""
    max_drain_failures: int
    """Rolled back when more drains than this complete unverified or overrun."""
    max_losses_without_drain: int
    """Rolled back when more instances than this are lost without a verified drain."""
    max_dead_letters: int
    """Rolled back when more records than this are dead-lettered in the region during the hold."""
    min_drains: int
    """Promoted only when at least this many drains in the partition proved the bundle; else
    rolled back as unproven.
    """

    def to_avro(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "contract_version": self.contract_version,
            "contract_sha256": self.contract_sha256,
            "previous_contract_sha256": self.previous_contract_sha256,
            "canary_pool_ids": list(self.canary_pool_ids),
            "canary_share_ratio": self.canary_share_ratio,
            "hold_s": self.hold_s,
            "max_notice_to_drain_p99_ms": self.max_notice_to_drain_p99_ms,
            "max_drain_failures": self.max_drain_failures,
            "max_losses_without_drain": self.max_losses_without_drain,
            "max_dead_letters": self.max_dead_letters,
            "min_drains": self.min_drains,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            workload_id=d["workload_id"],
            contract_version=d["contract_version"],
            contract_sha256=d["contract_sha256"],
            previous_contract_sha256=d["previous_contract_sha256"],
            canary_pool_ids=tuple(d["canary_pool_ids"]),
            canary_share_ratio=d["canary_share_ratio"],
            hold_s=d["hold_s"],
            max_notice_to_drain_p99_ms=d["max_notice_to_drain_p99_ms"],
            max_drain_failures=d["max_drain_failures"],
            max_losses_without_drain=d["max_losses_without_drain"],
            max_dead_letters=d["max_dead_letters"],
            min_drains=d["min_drains"],
        )


@dataclass(frozen=True, slots=True)
class BundlePromoted:
    """The canaried bundle's health figures held for the declared time: it goes to every node of
    the workload (ADR-32).
    """

    EVENT_TYPE: ClassVar[str] = "bundle_promoted"
    RECORD_NAME: ClassVar[str] = "spotcap.events.BundlePromoted"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "workload_id"

    workload_id: str
    """The workload, as named in its contract."""
    contract_version: int
    """The contract version promoted."""
    contract_sha256: str
    """SHA-256 of the promoted bundle."""
    held_s: int
    """How long the figures held (the declared hold, or 0 when nothing ran to canary)."""
    drains: int
    """Drains started in the canary partition during the hold."""
    notice_to_drain_p99_ms: int | None
    """p99 (nearest rank) of notice to drain start in the partition; null when none drained."""
    drain_failures: int
    """Drains completed unverified or overrun."""
    losses_without_drain: int
    """Instances lost without a verified drain."""
    dead_letters: int
    """Records dead-lettered in the region during the hold."""
    reason: str
    """Why, in words, with the figures against their limits."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "contract_version": self.contract_version,
            "contract_sha256": self.contract_sha256,
            "held_s": self.held_s,
            "drains": self.drains,
            "notice_to_drain_p99_ms": self.notice_to_drain_p99_ms,
            "drain_failures": self.drain_failures,
            "losses_without_drain": self.losses_without_drain,
            "dead_letters": self.dead_letters,
            "reason": self.reason,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            workload_id=d["workload_id"],
            contract_version=d["contract_version"],
            contract_sha256=d["contract_sha256"],
            held_s=d["held_s"],
            drains=d["drains"],
            notice_to_drain_p99_ms=d["notice_to_drain_p99_ms"],
            drain_failures=d["drain_failures"],
            losses_without_drain=d["losses_without_drain"],
            dead_letters=d["dead_letters"],
            reason=d["reason"],
        )


@dataclass(frozen=True, slots=True)
class BundleRolledBack:
    """The canaried bundle broke a health limit in its canary partition, or was not proven in its
    hold: the canary nodes return to the previous bundle (ADR-32).
    """

    EVENT_TYPE: ClassVar[str] = "bundle_rolled_back"
    RECORD_NAME: ClassVar[str] = "spotcap.events.BundleRolledBack"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "workload_id"

    workload_id: str
    """The workload, as named in its contract."""
    contract_version: int
    """The contract version rolled back."""
    contract_sha256: str
    """SHA-256 of the bundle rolled back."""
    previous_contract_sha256: str
    """SHA-256 of the bundle the canary nodes return to."""
    rule: str
    """The limit broken: notice_to_drain_p99, drain_failures, losses_without_drain, dead_letters,
    or unproven (fewer drains than min_drains in the hold).
    """
    reason: str
    """Why, in words, with the figure against its limit."""
    drains: int
    """Drains started in the canary partition so far."""
    notice_to_drain_p99_ms: int | None
    """p99 (nearest rank) of notice to drain start so far; null when none drained."""
    evidence_event_ids: tuple[str, ...]
    """The events that broke the limit (the last one first)."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "contract_version": self.contract_version,
            "contract_sha256": self.contract_sha256,
            "previous_contract_sha256": self.previous_contract_sha256,
            "rule": self.rule,
            "reason": self.reason,
            "drains": self.drains,
            "notice_to_drain_p99_ms": self.notice_to_drain_p99_ms,
            "evidence_event_ids": list(self.evidence_event_ids),
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            workload_id=d["workload_id"],
            contract_version=d["contract_version"],
            contract_sha256=d["contract_sha256"],
            previous_contract_sha256=d["previous_contract_sha256"],
            rule=d["rule"],
            reason=d["reason"],
            drains=d["drains"],
            notice_to_drain_p99_ms=d["notice_to_drain_p99_ms"],
            evidence_event_ids=tuple(d["evidence_event_ids"]),
        )


@dataclass(frozen=True, slots=True)
class ContractRefused:
    """The deciders refused a published contract version that raises the floor or the daily spend
    cap, or changes the fallback policy's approver, without valid signatures of the owner and
    of a higher authority (ADR-30): the workload keeps the version in force, and nothing is
    placed, kept or spent on the refused one's authority.
    """

    EVENT_TYPE: ClassVar[str] = "contract_refused"
    RECORD_NAME: ClassVar[str] = "spotcap.events.ContractRefused"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "workload_id"

    workload_id: str
    """The workload, as named in its contract."""
    contract_version: int
    """The refused version."""
    contract_sha256: str
    """Hex SHA-256 of the refused version's bundle."""
    owner: str
    """The team that owns the workload, told that its change was refused."""
    in_force_version: int | None
    """The version that stays in force; null when the workload has none yet."""
    signers: tuple[str, ...]
    """The names the refused event carried signatures for (verified or not), sorted."""
    reason: str
    """Why, in words: what the version changes and whose signature is missing or does not verify."""

    def to_avro(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "contract_version": self.contract_version,
            "contract_sha256": self.contract_sha256,
            "owner": self.owner,
            "in_force_version": self.in_force_version,
            "signers": list(self.signers),
            "reason": self.reason,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            workload_id=d["workload_id"],
            contract_version=d["contract_version"],
            contract_sha256=d["contract_sha256"],
            owner=d["owner"],
            in_force_version=d["in_force_version"],
            signers=tuple(d["signers"]),
            reason=d["reason"],
        )


@dataclass(frozen=True, slots=True)
class KeyringTrusted:
    """The keys the deciders trust, from here on, for changes of authority (ADR-30): a published
    contract version that raises the floor or the daily cap, or changes the approver, takes
    effect only with valid signatures by the owner's key and by a higher authority's. Recorded
    by the region's sequencer in the deciders' journal (the recorded inputs) when it starts
    with a keyring other than the one in force, so that a replay of the journal decides with
    the keys the run trusted, with no keyring given. Public keys only; empty maps: no keyring
    (every version takes effect).
    """

    EVENT_TYPE: ClassVar[str] = "keyring_trusted"
    RECORD_NAME: ClassVar[str] = "spotcap.events.KeyringTrusted"
    TOPIC: ClassVar[str] = "decisions"
    KEY: ClassVar[str] = "region"

    keyring_sha256: str
    """Hex SHA-256 of the keys' canonical JSON ({"authorities": ..., "owners": ...}, keys
    sorted): which keyring this is, to compare.
    """
    owners: Mapping[str, str]
    """Owner (team) name -> base64 of the 32 raw bytes of its Ed25519 public key."""
    authorities: Mapping[str, str]
    """Higher authority name -> base64 of the 32 raw bytes of its Ed25519 public key."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "owners", frozen_map(self.owners))
        object.__setattr__(self, "authorities", frozen_map(self.authorities))

    def to_avro(self) -> dict[str, Any]:
        return {
            "keyring_sha256": self.keyring_sha256,
            "owners": dict(self.owners),
            "authorities": dict(self.authorities),
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            keyring_sha256=d["keyring_sha256"],
            owners=FrozenMap(d["owners"]),
            authorities=FrozenMap(d["authorities"]),
        )


Payload: TypeAlias = (
    ContractPublished
    | RateCard
    | ForwardCapacity
    | ReservationCommitted
    | CapacityClaimOpened
    | CapacityClaimClosed
    | PoolRanked
    | PoolExcluded
    | PoolReadmitted
    | PlacementDecided
    | InstanceLaunched
    | InstanceDeleted
    | Advisory
    | NoticeReceived
    | DrainStarted
    | DrainCompleted
    | CheckpointWritten
    | InstanceLost
    | WorkWasted
    | ReplacementRequested
    | FallbackDecided
    | FallbackReturned
    | UsageInterval
    | ActuationThrottled
    | BreakerTripped
    | DeadLettered
    | PoolRegistered
    | BreakerReset
    | FallbackReviewed
    | LaunchFailed
    | ActuationRefused
    | CapacityReleased
    | EvictionAttempted
    | CheckpointTriggered
    | ActuationOrdered
    | DriftDetected
    | FallbackWithheld
    | DrillStarted
    | DrillRefused
    | DrillFinished
    | BundleCanaried
    | BundlePromoted
    | BundleRolledBack
    | ContractRefused
    | KeyringTrusted
)
"""Any event payload: one of the event record classes."""

PAYLOAD_TYPES: Mapping[str, type[Payload]] = MappingProxyType(
    {
        "spotcap.events.ContractPublished": ContractPublished,
        "spotcap.events.RateCard": RateCard,
        "spotcap.events.ForwardCapacity": ForwardCapacity,
        "spotcap.events.ReservationCommitted": ReservationCommitted,
        "spotcap.events.CapacityClaimOpened": CapacityClaimOpened,
        "spotcap.events.CapacityClaimClosed": CapacityClaimClosed,
        "spotcap.events.PoolRanked": PoolRanked,
        "spotcap.events.PoolExcluded": PoolExcluded,
        "spotcap.events.PoolReadmitted": PoolReadmitted,
        "spotcap.events.PlacementDecided": PlacementDecided,
        "spotcap.events.InstanceLaunched": InstanceLaunched,
        "spotcap.events.InstanceDeleted": InstanceDeleted,
        "spotcap.events.Advisory": Advisory,
        "spotcap.events.NoticeReceived": NoticeReceived,
        "spotcap.events.DrainStarted": DrainStarted,
        "spotcap.events.DrainCompleted": DrainCompleted,
        "spotcap.events.CheckpointWritten": CheckpointWritten,
        "spotcap.events.InstanceLost": InstanceLost,
        "spotcap.events.WorkWasted": WorkWasted,
        "spotcap.events.ReplacementRequested": ReplacementRequested,
        "spotcap.events.FallbackDecided": FallbackDecided,
        "spotcap.events.FallbackReturned": FallbackReturned,
        "spotcap.events.UsageInterval": UsageInterval,
        "spotcap.events.ActuationThrottled": ActuationThrottled,
        "spotcap.events.BreakerTripped": BreakerTripped,
        "spotcap.events.DeadLettered": DeadLettered,
        "spotcap.events.PoolRegistered": PoolRegistered,
        "spotcap.events.BreakerReset": BreakerReset,
        "spotcap.events.FallbackReviewed": FallbackReviewed,
        "spotcap.events.LaunchFailed": LaunchFailed,
        "spotcap.events.ActuationRefused": ActuationRefused,
        "spotcap.events.CapacityReleased": CapacityReleased,
        "spotcap.events.EvictionAttempted": EvictionAttempted,
        "spotcap.events.CheckpointTriggered": CheckpointTriggered,
        "spotcap.events.ActuationOrdered": ActuationOrdered,
        "spotcap.events.DriftDetected": DriftDetected,
        "spotcap.events.FallbackWithheld": FallbackWithheld,
        "spotcap.events.DrillStarted": DrillStarted,
        "spotcap.events.DrillRefused": DrillRefused,
        "spotcap.events.DrillFinished": DrillFinished,
        "spotcap.events.BundleCanaried": BundleCanaried,
        "spotcap.events.BundlePromoted": BundlePromoted,
        "spotcap.events.BundleRolledBack": BundleRolledBack,
        "spotcap.events.ContractRefused": ContractRefused,
        "spotcap.events.KeyringTrusted": KeyringTrusted,
    }
)
"""Event classes by record full name (``spotcap.events.NoticeReceived``)."""

EVENT_CLASSES: Mapping[str, type[Payload]] = MappingProxyType(
    {
        "contract_published": ContractPublished,
        "rate_card": RateCard,
        "forward_capacity": ForwardCapacity,
        "reservation_committed": ReservationCommitted,
        "capacity_claim_opened": CapacityClaimOpened,
        "capacity_claim_closed": CapacityClaimClosed,
        "pool_ranked": PoolRanked,
        "pool_excluded": PoolExcluded,
        "pool_readmitted": PoolReadmitted,
        "placement_decided": PlacementDecided,
        "instance_launched": InstanceLaunched,
        "instance_deleted": InstanceDeleted,
        "advisory": Advisory,
        "notice_received": NoticeReceived,
        "drain_started": DrainStarted,
        "drain_completed": DrainCompleted,
        "checkpoint_written": CheckpointWritten,
        "instance_lost": InstanceLost,
        "work_wasted": WorkWasted,
        "replacement_requested": ReplacementRequested,
        "fallback_decided": FallbackDecided,
        "fallback_returned": FallbackReturned,
        "usage_interval": UsageInterval,
        "actuation_throttled": ActuationThrottled,
        "breaker_tripped": BreakerTripped,
        "dead_lettered": DeadLettered,
        "pool_registered": PoolRegistered,
        "breaker_reset": BreakerReset,
        "fallback_reviewed": FallbackReviewed,
        "launch_failed": LaunchFailed,
        "actuation_refused": ActuationRefused,
        "capacity_released": CapacityReleased,
        "eviction_attempted": EvictionAttempted,
        "checkpoint_triggered": CheckpointTriggered,
        "actuation_ordered": ActuationOrdered,
        "drift_detected": DriftDetected,
        "fallback_withheld": FallbackWithheld,
        "drill_started": DrillStarted,
        "drill_refused": DrillRefused,
        "drill_finished": DrillFinished,
        "bundle_canaried": BundleCanaried,
        "bundle_promoted": BundlePromoted,
        "bundle_rolled_back": BundleRolledBack,
        "contract_refused": ContractRefused,
        "keyring_trusted": KeyringTrusted,
    }
)
"""Event classes by event type (``notice_received``)."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """One envelope for every spotcap event: who, when, where and why, around a payload that is
    one of the event records. Causation, correlation and time live here, never in payloads.
    """

    event_id: str
    """Unique event id. Derived events get a deterministic UUIDv5 from their cause, so a replay
    produces the same ids.
    """
    event_type: str
    """The snake_case name of the payload's event type, e.g. 'notice_received'."""
    occurred_at: int
    """Event time, microseconds since the epoch, UTC. Windows and deciders run on this, never on
    the wall clock.
    """
    recorded_at: int
    """When the producer recorded the event, microseconds since the epoch, UTC."""
    region: str
    """The region the event belongs to; topic names are prefixed by it."""
    key: str
    """The partitioning key: the instance, pool or workload id (or region) named by the event
    type's spotcap.key.
    """
    causation_id: str | None
    """The event that caused this one; null for facts from outside."""
    correlation_id: str | None
    """The incident or wave the event belongs to, if any."""
    producer: str
    """The component that produced the event, e.g. 'agent/node-0412'."""
    payload: Payload
    """The event record; its type is named by event_type. New event types are only ever appended
    to this union.
    """

    FIELDS: ClassVar[tuple[str, ...]] = (
        "event_id",
        "event_type",
        "occurred_at",
        "recorded_at",
        "region",
        "key",
        "causation_id",
        "correlation_id",
        "producer",
        "payload",
    )
    """The envelope's fields, in the schema's order."""
    HEAD: ClassVar[tuple[str, ...]] = (
        "event_id",
        "event_type",
        "occurred_at",
        "recorded_at",
        "region",
        "key",
        "causation_id",
        "correlation_id",
        "producer",
    )
    """Every field but the payload: who, when, where and why."""

    def __post_init__(self) -> None:
        if self.event_type != self.payload.EVENT_TYPE:
            raise ValueError(
                f"event_type {self.event_type!r} does not match the payload, a "
                f"{type(self.payload).__name__} (event type {self.payload.EVENT_TYPE!r})"
            )

    def to_avro(self) -> dict[str, Any]:
        """The envelope as fastavro writes it, its payload union branch named."""
        payload = self.payload
        return {
            "event_id": self.event_id,
            "event_type": self.event_type,
            "occurred_at": self.occurred_at,
            "recorded_at": self.recorded_at,
            "region": self.region,
            "key": self.key,
            "causation_id": self.causation_id,
            "correlation_id": self.correlation_id,
            "producer": self.producer,
            "payload": (payload.RECORD_NAME, payload.to_avro()),
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        """The envelope from what fastavro read (its payload as ``(name, record)``)."""
        name, body = d["payload"]
        return cls(
            event_id=d["event_id"],
            event_type=d["event_type"],
            occurred_at=d["occurred_at"],
            recorded_at=d["recorded_at"],
            region=d["region"],
            key=d["key"],
            causation_id=d["causation_id"],
            correlation_id=d["correlation_id"],
            producer=d["producer"],
            payload=PAYLOAD_TYPES[name].from_avro(body),
        )
