"""The fleet-state tables (migrations 0001-0003) as the writer addresses them."""

from __future__ import annotations

from projections.postgres.lifecycle import INSTANCES
from projections.postgres.tables import AppendTable, Group, Row, StateTable

# The journal: every applied event but the rankings, which `RANKINGS` journals (migration 0003;
# the view ``events`` reads both).
EVENTS = AppendTable(
    "journal",
    (
        "event_id",
        "event_type",
        "occurred_at",
        "recorded_at",
        "key",
        "causation_id",
        "correlation_id",
        "producer",
        "topic",
        "partition",
        "offset",
        "payload",
    ),
)
RANKINGS = AppendTable(
    "rankings",
    (
        "event_id",
        "ranking_id",
        "pool_id",
        "rank",
        "pool_count",
        "score",
        "available_vcpu",
        "observed_interruption_per_h",
        "price_per_vcpu_h_eur_micros",
        "correlation_group",
        "window_s",
        "input_event_ids",
        "occurred_at",
        "key",
        "causation_id",
        "correlation_id",
        "recorded_at",
        "producer",
        "topic",
        "partition",
        "offset",
        "guaranteed_price_per_vcpu_h_eur_micros",
    ),
)
# The event type that `RANKINGS` journals instead of `EVENTS`.
RANKED = "pool_ranked"
EXCLUSIONS = AppendTable(
    "exclusions",
    (
        "event_id",
        "pool_id",
        "reason",
        "observed_interruption_per_h",
        "expected_interruption_per_h",
        "reclaimed_instances",
        "window_start_at",
        "window_end_at",
        "evidence_event_ids",
        "occurred_at",
    ),
)
READMISSIONS = AppendTable(
    "readmissions",
    (
        "event_id",
        "pool_id",
        "exclusion_event_id",
        "healthy_s",
        "observed_interruption_per_h",
        "expected_interruption_per_h",
        "evidence_event_ids",
        "occurred_at",
    ),
)
CONTRACTS = AppendTable(
    "contracts", ("event_id", "workload_id", "contract_version", "contract", "occurred_at")
)
PLACEMENTS = AppendTable(
    "placements",
    (
        "event_id",
        "workload_id",
        "requested_vcpu",
        "floor_vcpu",
        "cost_per_h_eur_micros",
        "price_first_cost_per_h_eur_micros",
        "premium_per_h_eur_micros",
        "excluded_pool_ids",
        "claim_id",
        "ranking_id",
        "occurred_at",
    ),
)
PLACEMENT_ALLOCATIONS = AppendTable(
    "placement_allocations",
    ("event_id", "pool_id", "purchase_model", "vcpu"),
    key=("event_id", "pool_id", "purchase_model"),
)
REPLACEMENTS = AppendTable(
    "replacements",
    (
        "event_id",
        "workload_id",
        "replaces_instance_id",
        "vcpu",
        "purchase_model",
        "excluded_pool_ids",
        "occurred_at",
    ),
)
FALLBACKS = AppendTable(
    "fallbacks",
    (
        "event_id",
        "workload_id",
        "kind",
        "vcpu",
        "spend_eur_micros",
        "cap_eur_micros",
        "approver",
        "priority",
        "reason",
        "occurred_at",
    ),
)
FALLBACK_RETURNS = AppendTable(
    "fallback_returns",
    ("event_id", "workload_id", "vcpu", "dwell_s", "fallback_event_id", "occurred_at"),
)
FALLBACK_REVIEWS = AppendTable(
    "fallback_reviews",
    (
        "event_id",
        "workload_id",
        "approver",
        "outcome",
        "vcpu",
        "approved_spend_eur_micros",
        "valid_until_at",
        "note",
        "occurred_at",
    ),
)
OUTBOX = AppendTable(
    "outbox",
    ("action_id", "event_id", "action", "workload_id", "occurred_at", "record"),
    key=("action_id",),
)

APPEND_TABLES: tuple[AppendTable, ...] = (
    EVENTS,
    RANKINGS,
    EXCLUSIONS,
    READMISSIONS,
    CONTRACTS,
    PLACEMENTS,
    PLACEMENT_ALLOCATIONS,
    REPLACEMENTS,
    FALLBACKS,
    FALLBACK_RETURNS,
    FALLBACK_REVIEWS,
    OUTBOX,
)


def _pool_derive(row: Row) -> Row:
    return {"excluded": bool(row.get("excluded"))}


POOLS = StateTable(
    name="pools",
    key="pool_id",
    groups=(
        Group(
            ("registered_at", "registered_event_id"),
            (
                "sku_family",
                "instance_vcpu",
                "hall",
                "host_aggregate",
                "purchase_model",
                "correlation_group",
                "capacity_vcpu",
                "attributes",
            ),
        ),
        Group(
            ("rate_valid_from", "rate_event_id"),
            (
                "price_per_vcpu_h_eur_micros",
                "guaranteed_price_per_vcpu_h_eur_micros",
                "rate_valid_until",
            ),
        ),
        Group(("forward_at", "forward_event_id"), ("forward_available_vcpu", "forward_horizon_s")),
        Group(("ranked_at", "rank_event_id"), ("rank", "pool_count", "score", "ranking_id")),
        Group(("exclusion_changed_at", "exclusion_event_id"), ("excluded",)),
    ),
    derive=_pool_derive,
    derive_sql=(("excluded", "COALESCE({excluded}, false)"),),
)

CONTRACT_FIELDS = (
    "owner",
    "tier",
    "drain_budget_s",
    "restart_semantics",
    "checkpoint_on_notice",
    "proactive_drain_on_advisory",
    "tolerated_interruptions_per_h",
    "target_vcpu",
    "floor_vcpu",
    "spend_cap_eur_micros",
    "approver",
    "priority",
    "checkpoint_interval_s",
    "deadline_at",
    "scheduler",
    "checkpoint_method",
    "checkpoint_size_bytes",
    "source_commit",
    "source_path",
)

WORKLOADS = StateTable(
    name="workloads",
    key="workload_id",
    groups=(Group(("contract_version", "published_at", "contract_event_id"), CONTRACT_FIELDS),),
)

CLAIMS = StateTable(
    name="claims",
    key="claim_id",
    shared=("workload_id", "scheduler", "requested_vcpu"),
    groups=(
        Group(("opened_at", "opened_event_id"), ("cluster", "open_reason"), keep="earliest"),
        Group(
            ("closed_at", "closed_event_id"),
            ("fulfilled_vcpu", "outcome", "close_reason"),
            keep="earliest",
        ),
    ),
)

STATE_TABLES: tuple[StateTable, ...] = (POOLS, INSTANCES, WORKLOADS, CLAIMS)
