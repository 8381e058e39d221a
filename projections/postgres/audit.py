"""Capacity actions (ADR-25): which events acquire, terminate or spend capacity, and the audit
record each becomes in the outbox, with the identity that caused it (`actor_of`). Pure: an
envelope in, a JSON-able record out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from projections.eventtime import iso
from projections.money import eur_text
from schemas.events import (
    BreakerReset,
    BreakerTripped,
    Envelope,
    FallbackDecided,
    FallbackReturned,
    FallbackReviewed,
    InstanceDeleted,
    InstanceLaunched,
    LaunchFailed,
    Payload,
    PlacementDecided,
    ReplacementRequested,
)

AUDIT_RECORD_VERSION = 2
"""2: ``actor``, the identity that caused the action."""


def _place(p: PlacementDecided) -> str:
    pools = len({a.pool_id for a in p.allocations})
    return (
        f"placed {p.requested_vcpu:,} vCPU of {p.workload_id} over {pools} pools "
        f"(floor {p.floor_vcpu:,} vCPU), premium {eur_text(p.premium_per_h_eur_micros)}/h"
    )


def _replace(p: ReplacementRequested) -> str:
    return f"requested {p.vcpu:,} {p.purchase_model} vCPU to replace {p.replaces_instance_id}"


def _fallback(p: FallbackDecided) -> str:
    return (
        f"fallback ({p.kind}) of {p.vcpu:,} vCPU for {p.workload_id}: spend today "
        f"{eur_text(p.spend_eur_micros)} of a {eur_text(p.cap_eur_micros)} cap, "
        f"approver {p.approver}"
    )


def _return(p: FallbackReturned) -> str:
    return f"returned {p.vcpu:,} vCPU of {p.workload_id} to reclaimable after {p.dwell_s:,} s"


def _review(p: FallbackReviewed) -> str:
    return (
        f"{p.approver} {p.outcome} {p.vcpu:,} vCPU and "
        f"{eur_text(p.approved_spend_eur_micros)} of fallback for {p.workload_id}"
    )


def _launch(p: InstanceLaunched) -> str:
    return (
        f"launched {p.instance_id} ({p.vcpu} {p.purchase_model} vCPU) in {p.pool_id} "
        f"for {p.workload_id}"
    )


def _delete(p: InstanceDeleted) -> str:
    return f"deleted {p.instance_id} ({p.deleted_by} {p.principal}): {p.reason}"


def _failed(p: LaunchFailed) -> str:
    return (
        f"launch of {p.vcpu} {p.purchase_model} vCPU in {p.pool_id} for {p.workload_id} "
        f"failed ({p.error_class}{', will retry' if p.retryable else ''})"
    )


def _trip(p: BreakerTripped) -> str:
    return (
        f"breaker {p.breaker} tripped: {p.terminations_observed} terminations in "
        f"{p.window_s} s (threshold {p.threshold})"
    )


def _reset(p: BreakerReset) -> str:
    return f"breaker {p.breaker} reset after {p.open_s} s open"


# event type -> (action name, summary); the action names are what the audit topic carries.
ACTIONS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "placement_decided": ("place", _place),
    "replacement_requested": ("replace", _replace),
    "fallback_decided": ("fallback", _fallback),
    "fallback_returned": ("fallback_return", _return),
    "fallback_reviewed": ("fallback_review", _review),
    "instance_launched": ("launch", _launch),
    "instance_deleted": ("terminate", _delete),
    "launch_failed": ("launch_failed", _failed),
    "breaker_tripped": ("breaker_trip", _trip),
    "breaker_reset": ("breaker_reset", _reset),
}


def workload_of(payload: Payload) -> str | None:
    workload = getattr(payload, "workload_id", None)
    return workload if isinstance(workload, str) else None


def actor_of(envelope: Envelope) -> str:
    """Who caused a capacity action, as the event says: the person who signed an approval
    (``approver:<subject>``, ``(unsigned)`` when it carries no signature), the principal that
    deleted an instance, the orchestrator whose tags a launch carries, else the component that
    decided or did it (``producer:<name>``)."""
    p = envelope.payload
    if isinstance(p, FallbackReviewed):
        return f"approver:{p.approver}" + ("" if p.signature else " (unsigned)")
    if isinstance(p, InstanceDeleted) and p.principal:
        return f"{p.deleted_by}:{p.principal}"
    if isinstance(p, InstanceLaunched):
        owner = p.tags.get("spotcap.io/owner")
        if owner:
            return f"orchestrator:{owner}"
    return f"producer:{envelope.producer}"


def audit_record(envelope: Envelope) -> dict[str, Any] | None:
    """The audit record of a capacity action, or None if the event is not one.

    Its `action_id` is the event id: the same action always carries the same id, so the audit
    log recognises a resend after a relay crash.
    """
    entry = ACTIONS.get(envelope.event_type)
    if entry is None:
        return None
    action, summary = entry
    payload = envelope.payload
    return {
        "version": AUDIT_RECORD_VERSION,
        "action_id": envelope.event_id,
        "action": action,
        "summary": summary(payload),
        "event_id": envelope.event_id,
        "event_type": envelope.event_type,
        "occurred_at": iso(envelope.occurred_at),
        "region": envelope.region,
        "workload_id": workload_of(payload),
        "causation_id": envelope.causation_id,
        "correlation_id": envelope.correlation_id,
        "producer": envelope.producer,
        "actor": actor_of(envelope),
        "detail": payload.to_avro(),
    }
