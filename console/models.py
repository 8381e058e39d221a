"""The API's response bodies, as pydantic models: FastAPI writes the OpenAPI description from
them and checks every response against them before it leaves (a field the read side adds or
drops without the model fails loudly: ``extra="forbid"``, no defaults).

The rows are those of `projections.read` rendered by `projections.read.rows.json_row`, the same
JSON `spotcap query ... --json` prints: money in euros as decimal strings, times in UTC.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

Eur = Annotated[
    str,
    Field(
        pattern=r"^-?[0-9]+\.[0-9]{6}$",
        description="Euros as an exact decimal string (six places: micro-euros).",
        examples=["1234.500000"],
    ),
]
InstanceState = Literal[
    "requested", "running", "advised", "noticed", "draining", "drained", "lost", "replaced",
    "deleted",
]  # fmt: skip


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Problem(Row):
    """An error (RFC 9457 problem details): `detail` is one sentence that says what is wrong
    and how to fix it."""

    type: str = Field(description='Always "about:blank": the status says what kind of error.')
    title: str = Field(description="The HTTP status phrase.", examples=["Bad Request"])
    status: int = Field(description="The HTTP status code.", examples=[400])
    detail: str = Field(
        description="One sentence: what is wrong and how to fix it.",
        examples=["query parameter since='yesterday' is not a date or time: write it as "
                  "2026-11-02 or 2026-11-02T14:00Z"],
    )  # fmt: skip


class Pool(Row):
    pool_id: str
    hall: str | None
    sku_family: str | None
    purchase_model: str | None = Field(description="How the capacity is bought, e.g. reclaimable.")
    correlation_group: str | None
    capacity_vcpu: int | None
    rank: int | None = Field(description="1 is best; null until the scorer ranked the pool.")
    pool_count: int | None = Field(description="How many pools that ranking ranked.")
    score: float | None
    price_per_vcpu_h_eur: Eur | None = Field(description="The rate card in force, per vCPU-hour.")
    guaranteed_price_per_vcpu_h_eur: Eur | None = Field(
        description="The guaranteed (on-demand) rate for the same capacity, per vCPU-hour."
    )
    forward_available_vcpu: int | None = Field(description="Forward capacity the provider offers.")
    excluded: bool
    exclusion_changed_at: datetime | None
    ranked_at: datetime | None


class Ranking(Row):
    ranking_id: str
    pool_id: str
    rank: int
    pool_count: int
    score: float
    available_vcpu: int
    observed_interruption_per_h: float
    price_per_vcpu_h_eur: Eur
    correlation_group: str
    inputs: int = Field(description="How many input events the rank rests on.")
    occurred_at: datetime
    event_id: UUID


class Exclusion(Row):
    event_id: UUID
    pool_id: str
    reason: str
    observed_interruption_per_h: float
    expected_interruption_per_h: float
    reclaimed_instances: int
    excluded_at: datetime
    readmitted_at: datetime | None
    readmission_event_id: UUID | None
    evidence_event_ids: list[UUID] = Field(description="The events the exclusion rests on.")


class Instance(Row):
    instance_id: str
    state: InstanceState
    workload_id: str | None
    pool_id: str | None
    vcpu: int | None
    purchase_model: str | None
    launched_at: datetime | None
    noticed_at: datetime | None
    drain_path: str | None
    drain_verified: bool | None
    lost_at: datetime | None
    loss_reason: str | None
    deleted_at: datetime | None
    last_event_at: datetime


class Workload(Row):
    workload_id: str
    tier: str
    owner: str
    contract_version: int
    target_vcpu: int
    floor_vcpu: int
    spend_cap_eur: Eur = Field(description="Fallback spend the workload allows per day.")
    approver: str
    live_vcpu: int = Field(description="vCPU of its instances running or draining now.")
    lost_instances: int


class Lag(Row):
    projection: Literal["fleet", "ledger"]
    topic: str
    partition: int
    end_offset: int = Field(description="The log's next offset to be written.")
    next_offset: int | None = Field(
        description="The next offset the projection will apply; null when its store could "
        "not be read."
    )
    lag: int | None = Field(description="Records not applied yet (null: unknown).")


class WhyStep(Row):
    at: datetime = Field(description="Event time.")
    event_id: UUID
    event_type: str
    sentence: str


class WhyAnswer(Row):
    kind: Literal["instance", "workload", "event"]
    subject: str
    steps: list[WhyStep] = Field(description="The chain of causes, oldest first.")


class EurByCause(Row):
    """Every ledger cause (ADR-26), the sum of the costs and the net saving."""

    counterfactual: Eur = Field(description="The useful work priced at guaranteed rates.")
    reclaimable_spend: Eur
    floor_spend: Eur
    fallback_spend: Eur
    surplus: Eur = Field(description="Capacity running beyond what the open claims asked for.")
    wasted_work: Eur
    headroom: Eur
    checkpoint_storage: Eur
    footprint: Eur
    idle_floor: Eur = Field(description="Reservations nothing ran on (the platform's).")
    cost: Eur = Field(description="The sum of every cost line.")
    net_saving: Eur = Field(description="counterfactual - cost.")


class WorkloadSavings(Row):
    workload_id: str
    eur: EurByCause


class RefusedFact(Row):
    event_id: UUID
    event_type: str
    key: str = Field(description="The pool (or workload) the fact is about.")
    lateness_s: float = Field(description="How long after the moment it applies it was published.")
    allowed_lateness_s: int
    reason: str


class Corrections(Row):
    lines: int = Field(description="Correction lines late rate cards made.")
    late_cards: int
    net_saving_eur: Eur = Field(description="What they changed the net saving by.")


class LateFacts(Row):
    refused: list[RefusedFact] = Field(description="Refused past the allowed lateness.")
    corrections: Corrections


class SavingsReport(Row):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_: date | None = Field(alias="from", description="First UTC day (inclusive).")
    to: date | None = Field(description="Last UTC day (inclusive).")
    currency: Literal["EUR"]
    workloads: list[WorkloadSavings]
    total: EurByCause
    late_facts: LateFacts


class StoreHealth(Row):
    up: bool
    detail: str | None = Field(description="Why it is down, and how to fix it.")


class Health(Row):
    status: Literal["ok", "degraded"]
    stores: dict[str, StoreHealth] = Field(description="fleet and ledger.")


class SpreadRow(Row):
    level: Literal["pool", "hall", "correlation_group"]
    key: str = Field(description="The pool, hall or correlation group.")
    instances: int = Field(description="Its live instances for the workload.")
    reclaimable_vcpu: int
    other_vcpu: int = Field(description="Guaranteed and reserved vCPU (the floor).")
    reclaimable_share: float = Field(description="Of the workload's live reclaimable vCPU.")
    cap_share: float | None = Field(description="The planner's cap on that share (ADR-08); null "
                                    "where none applies (halls).")  # fmt: skip
    over_cap: bool


class Fallback(Row):
    event_id: UUID
    workload_id: str
    kind: str = Field(description="The authority: floor_restore, within_cap or escalated.")
    vcpu: int
    spend_eur: Eur
    cap_eur: Eur
    approver: str
    reason: str
    occurred_at: datetime


class DaySavings(Row):
    day: date
    eur: EurByCause


class DailySavingsReport(Row):
    workload_id: str | None = Field(description="The workload, or null for the whole region.")
    currency: Literal["EUR"]
    days: list[DaySavings] = Field(description="Oldest day first; days without lines left out.")


class WaveEvent(Row):
    at: datetime
    stage: Literal["advisory", "notice", "drain", "loss", "replacement"]
    event_type: str
    instance_id: str
    event_id: UUID


class WaveCounts(Row):
    advisory: int
    notice: int
    drain: int
    loss: int
    replacement: int


class Wave(Row):
    wave_id: str = Field(description="The correlation id the provider gave the wave.")
    hall: str | None
    started_at: datetime | None
    ended_at: datetime | None
    counts: WaveCounts = Field(description="Events by stage.")
    events: list[WaveEvent] = Field(description="Oldest first.")


Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256, hex.")]


class ArchiveMonth(Row):
    month: str = Field(description="YYYY-MM (UTC).", examples=["2026-11"])
    events: int | None = Field(description="Events archived (the Merkle tree's size).")
    cost_lines: int | None = Field(description="Ledger lines archived with them.")
    first_event_at: datetime | None
    last_event_at: datetime | None
    merkle_root: Sha256 | None = Field(description="The signed Merkle tree head over the month's "
                                       "events (RFC 9162).")  # fmt: skip
    chain_size: int | None = Field(description="Events archived up to this month, every month.")
    chain_root: Sha256 | None = Field(description="The root of the tree over all of them.")
    previous_month: str | None = Field(description="The month this one chains to; null for "
                                       "the first.")  # fmt: skip
    previous_manifest_sha256: Sha256 | None
    link: Literal["first", "linked", "broken", "unknown"] = Field(
        description="first: the chain starts here; linked: the previous month's manifest is "
        "there with the SHA-256 this one names; broken: it is missing or changed."
    )
    manifest_sha256: Sha256 | None
    signed_by: str | None = Field(description="The key id the manifest names.")
    signature: Literal["valid", "invalid", "missing", "unchecked"] = Field(
        description="The manifest's signature under the trusted key (unchecked: the server "
        "was given no key)."
    )
    retain_until: datetime | None = Field(description="The retention the manifest asks for.")
    verification: Literal["not_run", "verified", "problems"] = Field(
        description="What this server's last full `verify` of the month found."
    )
    verified_at: datetime | None
    problems: int | None = Field(description="Problems that verification found.")
    problem: str | None = Field(description="Why the month cannot be listed in full.")


class ArchiveListing(Row):
    archive: str = Field(description="Where the archive is.")
    region: str
    trusted_key: str | None = Field(description="The id of the public key verify trusts.")
    locked: bool = Field(description="Whether the storage enforces retention (Object Lock).")
    months: list[ArchiveMonth] = Field(description="Oldest first.")


class Finding(Row):
    subject: str = Field(description="The object or aspect: a file, signature, merkle, chain.")
    message: str
    error: bool = Field(description="false: a note (a local directory locks nothing).")


class MonthVerification(Row):
    month: str
    ok: bool
    events: int
    findings: list[Finding]


class Verification(Row):
    ok: bool
    archive: str
    region: str
    month: str | None = Field(description="The month asked for; null for every month.")
    checked_at: datetime
    months: list[MonthVerification]


class WhatIfLine(Row):
    line: str = Field(description="A cost line (cause), counterfactual or net_saving.")
    recorded_eur: Eur
    what_if_eur: Eur
    delta_eur: Eur = Field(description="what-if - recorded.")


class WhatIfRow(WhatIfLine):
    workload_id: str


class WhatIf(Row):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    rule: str = Field(description="The shipped rule's name.")
    description: str
    rule_file: str
    engine: Literal["clickhouse"]
    from_: date | None = Field(alias="from", description="First UTC day (inclusive).")
    to: date | None = Field(description="Last UTC day (inclusive).")
    currency: Literal["EUR"]
    events: int = Field(description="Events the replay went through.")
    identical: bool = Field(description="Whether the rule reproduces the recorded ledger.")
    workloads_compared: int
    totals: list[WhatIfLine] = Field(description="Every line over every workload.")
    rows: list[WhatIfRow] = Field(description="The workload lines that differ.")
