"""The instance state machine (pure): which state each event implies, which moves are allowed,
and how an instance row's state follows from the facts known about it.

States: requested, running, advised, noticed, draining, drained, lost, replaced, deleted.

- instance_launched -> running; advisory -> advised; notice_received -> noticed;
  drain_started -> draining; drain_completed -> drained; instance_lost -> lost;
  instance_deleted -> deleted; replacement_requested (for the instance it replaces) -> replaced.
- The row's state is derived from the facts, not from their order: the furthest step known
  wins; a lost instance whose replacement was requested (before or after the loss, ADR-09
  requests it in parallel with the drain) is `replaced`; of a loss and a deletion, the earlier
  in event time is the end. `requested` is an instance known only from side facts (a
  replacement, a checkpoint) before its launch is seen.
- An out-of-order or impossible event never fails the projection: its facts are recorded on the
  row, the state never moves back, and the view `instance_anomalies` lists, in event-time
  order, every move that TRANSITIONS does not allow (a drain completed that never started, an
  advisory after the loss).
"""

from __future__ import annotations

from typing import Any

from projections.postgres.tables import Group, Row, StateTable

STATES = (
    "requested",
    "running",
    "advised",
    "noticed",
    "draining",
    "drained",
    "lost",
    "replaced",
    "deleted",
)

IMPLIED_STATE: dict[str, str | None] = {
    "instance_launched": "running",
    "advisory": "advised",
    "notice_received": "noticed",
    "drain_started": "draining",
    "drain_completed": "drained",
    "instance_lost": "lost",
    "instance_deleted": "deleted",
    "replacement_requested": "replaced",
    "checkpoint_written": None,
    "work_wasted": None,
}

# Allowed moves in event time ('' is "no state yet"). Mirrored by the seed of the
# instance_transitions table (migration 0002); tests/test_fleet_mappers.py checks they agree.
TRANSITIONS: frozenset[tuple[str, str]] = frozenset(
    {
        ("", "running"),
        ("requested", "running"),
        *(("running", s) for s in ("advised", "noticed", "draining", "lost", "deleted")),
        *(
            ("advised", s)
            for s in ("advised", "noticed", "draining", "lost", "deleted", "replaced")
        ),
        *(("noticed", s) for s in ("noticed", "draining", "lost", "deleted", "replaced")),
        *(("draining", s) for s in ("drained", "lost", "deleted", "replaced")),
        *(("drained", s) for s in ("lost", "deleted", "replaced")),
        # A replacement requested on the notice (ADR-09): the drain and the loss still follow.
        *(("replaced", s) for s in ("draining", "drained", "lost")),
        ("lost", "replaced"),
        ("lost", "deleted"),
    }
)


def derive_state(row: Row) -> dict[str, Any]:
    """The state an instance row's facts imply."""
    lost = row.get("lost_event_id") is not None
    deleted = row.get("deleted_event_id") is not None
    if deleted and (
        not lost
        or (row["deleted_at"], row["deleted_event_id"]) <= (row["lost_at"], row["lost_event_id"])
    ):
        state = "deleted"
    elif lost:
        state = "replaced" if row.get("replacement_event_id") is not None else "lost"
    elif row.get("drained_event_id") is not None:
        state = "drained"
    elif row.get("drain_started_event_id") is not None:
        state = "draining"
    elif row.get("notice_event_id") is not None:
        state = "noticed"
    elif row.get("advisory_event_id") is not None:
        state = "advised"
    elif row.get("launch_event_id") is not None:
        state = "running"
    else:
        state = "requested"
    return {"state": state}


# `derive_state` in SQL, over the merged columns (see merge_sql).
STATE_SQL = (
    "CASE WHEN {deleted_event_id} IS NOT NULL AND ({lost_event_id} IS NULL"
    " OR ({deleted_at}, {deleted_event_id}) <= ({lost_at}, {lost_event_id})) THEN 'deleted'"
    " WHEN {lost_event_id} IS NOT NULL THEN"
    " CASE WHEN {replacement_event_id} IS NOT NULL THEN 'replaced' ELSE 'lost' END"
    " WHEN {drained_event_id} IS NOT NULL THEN 'drained'"
    " WHEN {drain_started_event_id} IS NOT NULL THEN 'draining'"
    " WHEN {notice_event_id} IS NOT NULL THEN 'noticed'"
    " WHEN {advisory_event_id} IS NOT NULL THEN 'advised'"
    " WHEN {launch_event_id} IS NOT NULL THEN 'running'"
    " ELSE 'requested' END"
)

INSTANCES = StateTable(
    name="instances",
    key="instance_id",
    shared=("workload_id", "pool_id", "vcpu", "purchase_model"),
    groups=(
        Group(("launched_at", "launch_event_id"), ("tags",), keep="earliest"),
        Group(("advised_at", "advisory_event_id"), ("expected_reclaim_at",), keep="earliest"),
        Group(("noticed_at", "notice_event_id"), ("deadline_at", "notice_source"), keep="earliest"),
        Group(
            ("drain_started_at", "drain_started_event_id"),
            ("drain_path", "drain_trigger", "drain_budget_s"),
            keep="earliest",
        ),
        Group(
            ("drained_at", "drained_event_id"),
            (
                "drain_duration_s",
                "drain_verified",
                "drain_overrun",
                "drain_fell_back_to_local",
                "drain_deadline_margin_s",
            ),
            keep="earliest",
        ),
        Group(
            ("checkpoint_generation", "checkpoint_at", "checkpoint_event_id"),
            ("checkpoint_bytes", "checkpoint_final"),
        ),
        Group(("lost_at", "lost_event_id"), ("loss_reason", "lost_with_notice"), keep="earliest"),
        Group(("wasted_at", "wasted_event_id"), ("wasted_vcpu_s",), keep="earliest"),
        Group(
            ("deleted_at", "deleted_event_id"),
            ("deleted_by", "deleted_principal", "deleted_reason"),
            keep="earliest",
        ),
        Group(("replacement_at", "replacement_event_id"), (), keep="earliest"),
        Group(("last_event_at",), ()),
    ),
    derived=("state",),
    derive=derive_state,
    derive_sql=(("state", STATE_SQL),),
)
