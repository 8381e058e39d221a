"""Events to fleet-state rows (pure: no I/O, no clock).

`map_events` turns a batch of new events into `Changes`: rows for the append tables (keyed by
event id) and merged rows for the state tables (see `tables.StateTable`). The writer does the
I/O. The market feeds (rate cards, forward capacity) only move the pools' latest values, so
they are not journaled; every other event is, with its causes, for `spotcap why`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from projections.eventtime import stamp, ts, ts_or_none
from projections.postgres import schema as s
from projections.postgres.audit import audit_record, workload_of
from projections.postgres.lifecycle import INSTANCES
from projections.postgres.tables import AppendTable, Row, StateTable
from schemas.errors import Origin
from schemas.events import (
    Advisory,
    CapacityClaimClosed,
    CapacityClaimOpened,
    CheckpointWritten,
    ContractPublished,
    DrainCompleted,
    DrainStarted,
    Envelope,
    FallbackDecided,
    FallbackReturned,
    FallbackReviewed,
    ForwardCapacity,
    InstanceDeleted,
    InstanceLaunched,
    InstanceLost,
    NoticeReceived,
    PlacementDecided,
    PoolExcluded,
    PoolRanked,
    PoolReadmitted,
    PoolRegistered,
    RateCard,
    ReplacementRequested,
    WorkWasted,
)

# Event types not journaled: the market feeds only move a pool's latest values (applied
# idempotently); usage intervals are the ledger's (the fleet state reads the usage topic for
# work_wasted only).
UNJOURNALED = frozenset({"rate_card", "forward_capacity", "usage_interval"})


@dataclass(slots=True)
class Changes:
    """What a batch of events does to the fleet state."""

    appends: dict[str, list[Row]] = field(default_factory=dict)
    states: dict[str, dict[str, Row]] = field(default_factory=dict)
    # Rows of the busiest append tables, already in their columns' order (no dict per row).
    tuples: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)

    def append(self, table: AppendTable, row: Row) -> None:
        self.appends.setdefault(table.name, []).append(row)

    def append_tuple(self, table: AppendTable, row: tuple[Any, ...]) -> None:
        """A row in the order of `table.columns`."""
        self.tuples.setdefault(table.name, []).append(row)

    def state(self, table: StateTable, row: Row) -> None:
        rows = self.states.setdefault(table.name, {})
        key = row[table.key]
        stored = rows.get(key)
        # A key's first row is kept as it is (`merge(None, row)` would copy it; the handlers
        # build a new dict per event).
        rows[key] = row if stored is None else table.merge(stored, row, finish=False)

    def rows(self, table: AppendTable) -> list[tuple[Any, ...]]:
        return list(self.iter_rows(table))

    def iter_rows(self, table: AppendTable) -> Iterator[tuple[Any, ...]]:
        """`rows`, each made as it is read (the writer copies them without holding them)."""
        columns = table.columns
        for r in self.appends.get(table.name, ()):
            yield tuple(map(r.get, columns))
        yield from self.tuples.get(table.name, ())

    def has_rows(self, table: AppendTable) -> bool:
        return bool(self.appends.get(table.name) or self.tuples.get(table.name))


# Ids (uuid columns) go to PostgreSQL as their text, which COPY parses: parsing them into
# uuid.UUID here only for psycopg to print them again cost a tenth of the writer's time.


def uuid_array(values: Iterable[str]) -> str:
    """A uuid[] as PostgreSQL's array text (a uuid needs no quoting in it; psycopg's list
    dumper, per element in Python, was the rankings rows' largest cost)."""
    return "{" + ",".join(values) + "}"


# One encoder for every journaled payload (json.dumps with options builds one per call); keys
# unsorted, as jsonb stores them in its own order whatever the text's.
_JOURNAL_JSON = json.JSONEncoder(separators=(",", ":"))
# The same, keys sorted, for the JSON the rows carry (json.dumps(..., sort_keys=True) and its
# separators, byte for byte): instance tags, pool attributes, contracts; the outbox records.
_SORTED_JSON = json.JSONEncoder(sort_keys=True)
_RECORD_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def journal_row(origin: Origin, e: Envelope) -> tuple[Any, ...]:
    """The journal row of an event, in the order of `schema.EVENTS.columns`."""
    return (
        e.event_id,
        e.event_type,
        stamp(e.occurred_at),
        stamp(e.recorded_at),
        e.key,
        e.causation_id,
        e.correlation_id,
        e.producer,
        origin.topic,
        origin.partition,
        origin.offset,
        _JOURNAL_JSON.encode(e.payload.to_avro()),
    )


# -- per event type ---------------------------------------------------------------------------

Handler = Callable[[Changes, Envelope, str], None]


def _instance(c: Changes, at: datetime, instance_id: str, **facts: Any) -> None:
    """An instance's facts from an event at `at` (its time, computed once per event). (An
    instance's events are read from the journal: the view `instance_events`, migration 0004.)"""
    c.state(INSTANCES, {"instance_id": instance_id, "last_event_at": at, **facts})


def _launched(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, InstanceLaunched)
    at = ts(e.occurred_at)
    _instance(
        c, at, p.instance_id,
        workload_id=p.workload_id, pool_id=p.pool_id, vcpu=p.vcpu,
        purchase_model=p.purchase_model,
        launched_at=at, launch_event_id=i,
        tags=_SORTED_JSON.encode(dict(p.tags)),
    )  # fmt: skip


def _advisory(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, Advisory)
    at = ts(e.occurred_at)
    _instance(
        c, at, p.instance_id, pool_id=p.pool_id,
        advised_at=at, advisory_event_id=i,
        expected_reclaim_at=ts(p.expected_reclaim_at),
    )  # fmt: skip


def _notice(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, NoticeReceived)
    at = ts(e.occurred_at)
    _instance(
        c, at, p.instance_id, pool_id=p.pool_id, workload_id=p.workload_id,
        noticed_at=at, notice_event_id=i,
        deadline_at=ts(p.deadline_at), notice_source=p.source,
    )  # fmt: skip


def _drain_started(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, DrainStarted)
    at = ts(e.occurred_at)
    _instance(
        c, at, p.instance_id, workload_id=p.workload_id,
        drain_started_at=at, drain_started_event_id=i,
        drain_path=p.path, drain_trigger=p.trigger, drain_budget_s=p.drain_budget_s,
    )  # fmt: skip


def _drain_completed(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, DrainCompleted)
    at = ts(e.occurred_at)
    _instance(
        c, at, p.instance_id, workload_id=p.workload_id,
        drained_at=at, drained_event_id=i,
        drain_duration_s=p.duration_s, drain_verified=p.verified, drain_overrun=p.overrun,
        drain_fell_back_to_local=p.fell_back_to_local,
        drain_deadline_margin_s=p.deadline_margin_s,
    )  # fmt: skip


def _checkpoint(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, CheckpointWritten)
    at = ts(e.occurred_at)
    _instance(
        c, at, p.instance_id, workload_id=p.workload_id,
        checkpoint_generation=p.generation, checkpoint_at=at,
        checkpoint_event_id=i, checkpoint_bytes=p.written_bytes, checkpoint_final=p.final,
    )  # fmt: skip


def _lost(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, InstanceLost)
    at = ts(e.occurred_at)
    _instance(
        c, at, p.instance_id,
        workload_id=p.workload_id, pool_id=p.pool_id, vcpu=p.vcpu,
        purchase_model=p.purchase_model,
        lost_at=at, lost_event_id=i,
        loss_reason=p.reason, lost_with_notice=p.with_notice,
    )  # fmt: skip


def _wasted(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, WorkWasted)
    at = ts(e.occurred_at)
    _instance(
        c, at, p.instance_id, workload_id=p.workload_id, pool_id=p.pool_id,
        wasted_at=at, wasted_event_id=i, wasted_vcpu_s=p.wasted_vcpu_s,
    )  # fmt: skip


def _deleted(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, InstanceDeleted)
    at = ts(e.occurred_at)
    _instance(
        c, at, p.instance_id, workload_id=p.workload_id, pool_id=p.pool_id,
        deleted_at=at, deleted_event_id=i, deleted_by=p.deleted_by,
        deleted_principal=p.principal, deleted_reason=p.reason,
    )  # fmt: skip


def _replacement(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, ReplacementRequested)
    at = ts(e.occurred_at)
    _instance(
        c, at, p.replaces_instance_id, workload_id=p.workload_id,
        replacement_at=at, replacement_event_id=i,
    )  # fmt: skip
    c.append(
        s.REPLACEMENTS,
        {
            "event_id": i,
            "workload_id": p.workload_id,
            "replaces_instance_id": p.replaces_instance_id,
            "vcpu": p.vcpu,
            "purchase_model": p.purchase_model,
            "excluded_pool_ids": list(p.excluded_pool_ids),
            "occurred_at": at,
        },
    )


def _registered(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, PoolRegistered)
    c.state(
        s.POOLS,
        {
            "pool_id": p.pool_id,
            "registered_at": ts(e.occurred_at),
            "registered_event_id": i,
            "sku_family": p.sku_family,
            "instance_vcpu": p.instance_vcpu,
            "hall": p.hall,
            "host_aggregate": p.host_aggregate,
            "purchase_model": p.purchase_model,
            "correlation_group": p.correlation_group,
            "capacity_vcpu": p.capacity_vcpu,
            "attributes": _SORTED_JSON.encode(dict(p.attributes)),
        },
    )


def _rate_card(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, RateCard)
    c.state(
        s.POOLS,
        {
            "pool_id": p.pool_id,
            "rate_valid_from": ts(p.valid_from_at),
            "rate_event_id": i,
            "rate_valid_until": ts(p.valid_until_at),
            "price_per_vcpu_h_eur_micros": p.price_per_vcpu_h_eur_micros,
            "guaranteed_price_per_vcpu_h_eur_micros": p.guaranteed_price_per_vcpu_h_eur_micros,
        },
    )


def _forward(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, ForwardCapacity)
    c.state(
        s.POOLS,
        {
            "pool_id": p.pool_id,
            "forward_at": ts(e.occurred_at),
            "forward_event_id": i,
            "forward_available_vcpu": p.available_vcpu,
            "forward_horizon_s": p.horizon_s,
        },
    )


def ranking_row(origin: Origin, e: Envelope) -> tuple[Any, ...]:
    """The `rankings` row of a pool_ranked event, in the order of `schema.RANKINGS.columns`:
    its payload's fields and its envelope's (the rankings are their events' journal)."""
    p = e.payload
    assert isinstance(p, PoolRanked)
    return (
        e.event_id, p.ranking_id, p.pool_id, p.rank, p.pool_count, p.score, p.available_vcpu,
        p.observed_interruption_per_h, p.price_per_vcpu_h_eur_micros, p.correlation_group,
        p.window_s, uuid_array(p.input_event_ids), stamp(e.occurred_at),
        e.key, e.causation_id, e.correlation_id, stamp(e.recorded_at), e.producer,
        origin.topic, origin.partition, origin.offset, p.guaranteed_price_per_vcpu_h_eur_micros,
    )  # fmt: skip


def _ranked_state(c: Changes, e: Envelope, i: str) -> None:
    """The pool's rank group (only each pool's latest ranking of a batch is merged: see
    `map_events`)."""
    p = e.payload
    assert isinstance(p, PoolRanked)
    at = ts(e.occurred_at)
    c.state(
        s.POOLS,
        {
            "pool_id": p.pool_id,
            "ranked_at": at,
            "rank_event_id": i,
            "rank": p.rank,
            "pool_count": p.pool_count,
            "score": p.score,
            "ranking_id": p.ranking_id,
        },
    )


def _excluded(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, PoolExcluded)
    at = ts(e.occurred_at)
    c.append(
        s.EXCLUSIONS,
        {
            "event_id": i,
            "pool_id": p.pool_id,
            "reason": p.reason,
            "observed_interruption_per_h": p.observed_interruption_per_h,
            "expected_interruption_per_h": p.expected_interruption_per_h,
            "reclaimed_instances": p.reclaimed_instances,
            "window_start_at": ts(p.window_start_at),
            "window_end_at": ts(p.window_end_at),
            "evidence_event_ids": uuid_array(p.evidence_event_ids),
            "occurred_at": at,
        },
    )
    c.state(
        s.POOLS,
        {
            "pool_id": p.pool_id,
            "exclusion_changed_at": at,
            "exclusion_event_id": i,
            "excluded": True,
        },
    )


def _readmitted(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, PoolReadmitted)
    at = ts(e.occurred_at)
    c.append(
        s.READMISSIONS,
        {
            "event_id": i,
            "pool_id": p.pool_id,
            "exclusion_event_id": p.exclusion_event_id,
            "healthy_s": p.healthy_s,
            "observed_interruption_per_h": p.observed_interruption_per_h,
            "expected_interruption_per_h": p.expected_interruption_per_h,
            "evidence_event_ids": uuid_array(p.evidence_event_ids),
            "occurred_at": at,
        },
    )
    c.state(
        s.POOLS,
        {
            "pool_id": p.pool_id,
            "exclusion_changed_at": at,
            "exclusion_event_id": i,
            "excluded": False,
        },
    )


def _contract(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, ContractPublished)
    at = ts(e.occurred_at)
    fields = {name: getattr(p, name) for name in s.CONTRACT_FIELDS}
    fields["deadline_at"] = ts_or_none(p.deadline_at)
    c.state(
        s.WORKLOADS,
        {
            "workload_id": p.workload_id,
            "contract_version": p.contract_version,
            "published_at": at,
            "contract_event_id": i,
            **fields,
        },
    )
    c.append(
        s.CONTRACTS,
        {
            "event_id": i,
            "workload_id": p.workload_id,
            "contract_version": p.contract_version,
            "contract": _SORTED_JSON.encode(p.to_avro()),
            "occurred_at": at,
        },
    )


def _claim_opened(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, CapacityClaimOpened)
    c.state(
        s.CLAIMS,
        {
            "claim_id": p.claim_id,
            "workload_id": p.workload_id,
            "scheduler": p.scheduler,
            "requested_vcpu": p.requested_vcpu,
            "opened_at": ts(e.occurred_at),
            "opened_event_id": i,
            "cluster": p.cluster,
            "open_reason": p.reason,
        },
    )


def _claim_closed(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, CapacityClaimClosed)
    c.state(
        s.CLAIMS,
        {
            "claim_id": p.claim_id,
            "workload_id": p.workload_id,
            "scheduler": p.scheduler,
            "requested_vcpu": p.requested_vcpu,
            "closed_at": ts(e.occurred_at),
            "closed_event_id": i,
            "fulfilled_vcpu": p.fulfilled_vcpu,
            "outcome": p.outcome,
            "close_reason": p.reason,
        },
    )


def _placement(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, PlacementDecided)
    c.append(
        s.PLACEMENTS,
        {
            "event_id": i,
            "workload_id": p.workload_id,
            "requested_vcpu": p.requested_vcpu,
            "floor_vcpu": p.floor_vcpu,
            "cost_per_h_eur_micros": p.cost_per_h_eur_micros,
            "price_first_cost_per_h_eur_micros": p.price_first_cost_per_h_eur_micros,
            "premium_per_h_eur_micros": p.premium_per_h_eur_micros,
            "excluded_pool_ids": list(p.excluded_pool_ids),
            "claim_id": p.claim_id,
            "ranking_id": p.ranking_id,
            "occurred_at": ts(e.occurred_at),
        },
    )
    # One row per (pool, purchase model): an allocation listed twice is summed.
    vcpu: dict[tuple[str, str], int] = {}
    for a in p.allocations:
        vcpu[(a.pool_id, a.purchase_model)] = vcpu.get((a.pool_id, a.purchase_model), 0) + a.vcpu
    for (pool_id, model), total in sorted(vcpu.items()):
        c.append(
            s.PLACEMENT_ALLOCATIONS,
            {"event_id": i, "pool_id": pool_id, "purchase_model": model, "vcpu": total},
        )


def _fallback(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, FallbackDecided)
    c.append(
        s.FALLBACKS,
        {
            "event_id": i,
            "workload_id": p.workload_id,
            "kind": p.kind,
            "vcpu": p.vcpu,
            "spend_eur_micros": p.spend_eur_micros,
            "cap_eur_micros": p.cap_eur_micros,
            "approver": p.approver,
            "priority": p.priority,
            "reason": p.reason,
            "occurred_at": ts(e.occurred_at),
        },
    )


def _fallback_returned(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, FallbackReturned)
    c.append(
        s.FALLBACK_RETURNS,
        {
            "event_id": i,
            "workload_id": p.workload_id,
            "vcpu": p.vcpu,
            "dwell_s": p.dwell_s,
            "fallback_event_id": p.fallback_event_id,
            "occurred_at": ts(e.occurred_at),
        },
    )


def _fallback_reviewed(c: Changes, e: Envelope, i: str) -> None:
    p = e.payload
    assert isinstance(p, FallbackReviewed)
    c.append(
        s.FALLBACK_REVIEWS,
        {
            "event_id": i,
            "workload_id": p.workload_id,
            "approver": p.approver,
            "outcome": p.outcome,
            "vcpu": p.vcpu,
            "approved_spend_eur_micros": p.approved_spend_eur_micros,
            "valid_until_at": ts_or_none(p.valid_until_at),
            "note": p.note,
            "occurred_at": ts(e.occurred_at),
        },
    )


HANDLERS: dict[str, Handler] = {
    "instance_launched": _launched,
    "advisory": _advisory,
    "notice_received": _notice,
    "drain_started": _drain_started,
    "drain_completed": _drain_completed,
    "checkpoint_written": _checkpoint,
    "instance_lost": _lost,
    "work_wasted": _wasted,
    "instance_deleted": _deleted,
    "replacement_requested": _replacement,
    "pool_registered": _registered,
    "rate_card": _rate_card,
    "forward_capacity": _forward,
    "pool_excluded": _excluded,
    "pool_readmitted": _readmitted,
    "contract_published": _contract,
    "capacity_claim_opened": _claim_opened,
    "capacity_claim_closed": _claim_closed,
    "placement_decided": _placement,
    "fallback_decided": _fallback,
    "fallback_returned": _fallback_returned,
    "fallback_reviewed": _fallback_reviewed,
}


def map_event(changes: Changes, e: Envelope) -> None:
    """Add what one (new) event does to `changes`."""
    event_id = e.event_id
    handler = HANDLERS.get(e.event_type)
    if handler is not None:
        handler(changes, e, event_id)
    record = audit_record(e)
    if record is not None:
        changes.append(
            s.OUTBOX,
            {
                "action_id": event_id,
                "event_id": event_id,
                "action": record["action"],
                "workload_id": workload_of(e.payload),
                "occurred_at": ts(e.occurred_at),
                "record": _RECORD_JSON.encode(record),
            },
        )


_FEEDS = ("rate_card", "forward_capacity")
# The event types of which only each pool's latest of a batch is mapped (see `map_events`).
_LATEST_ONLY = (*_FEEDS, "pool_ranked")


def _feed_version(e: Envelope) -> tuple[int, str]:
    p = e.payload
    return (p.valid_from_at if isinstance(p, RateCard) else e.occurred_at), e.event_id


def map_events(events: Iterable[Envelope]) -> Changes:
    """The changes of a batch of new events (in any order: the state rows do not depend on it).

    Of the market feeds (a rate card per pool every 5 minutes) and the rankings (every pool
    ranked every few minutes), only each pool's latest card, forecast and rank of the batch can
    change a pool's row: the others are skipped before its merge. (A ranking's `rankings` row
    is its journal row, `ranking_row`, which the writer copies with the journal's.)
    """
    changes = Changes()
    # Per type, per pool: the latest event. (No tuple is kept per pool: what a batch holds is
    # what Python's collector counts; docs/performance.md, "Projections".)
    latest: dict[str, dict[str, Envelope]] = {t: {} for t in _LATEST_ONLY}
    for e in events:
        kept = latest.get(e.event_type)
        if kept is None:
            map_event(changes, e)
            continue
        p = e.payload
        key = p.pool_id if isinstance(p, PoolRanked) else e.key
        other = kept.get(key)
        if other is None or _feed_version(e) > _feed_version(other):
            kept[key] = e
    for e in latest["pool_ranked"].values():
        _ranked_state(changes, e, e.event_id)
    for event_type in _FEEDS:
        for e in latest[event_type].values():
            map_event(changes, e)
    return changes
