"""Signed approvals of escalated fallback spend (ADR-30): what the approver signs, and the pure
check the fallback arbiter makes of it.

The approver signs, with the Ed25519 key whose public half the workload's contract names
(``fallback.approver_key``), the canonical JSON of the review: workload, approver, outcome,
vCPU, approved spend, validity, note, and the escalation it answers. The arbiter verifies it
from the event and the contract alone: no I/O, no clock, no key server. A review that does not
verify, names another approver, answers another escalation, or comes for a contract that names
no approver key, approves nothing.
"""

from __future__ import annotations

import base64
import binascii
import json

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from schemas.events import FallbackReviewed

STATEMENT = "spotcap.fallback-review/v1"


def review_statement(review: FallbackReviewed) -> bytes:
    """The bytes an approver signs for `review` (its signature excluded)."""
    return json.dumps(
        {
            "format": STATEMENT,
            "workload_id": review.workload_id,
            "approver": review.approver,
            "outcome": review.outcome,
            "vcpu": review.vcpu,
            "approved_spend_eur_micros": review.approved_spend_eur_micros,
            "valid_until_at": review.valid_until_at,
            "note": review.note,
            "escalation_event_id": review.escalation_event_id,
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    ).encode("ascii")


def refusal(
    review: FallbackReviewed,
    approver: str,
    approver_key: str | None,
    escalation_event_id: str,
) -> str | None:
    """Why `review` approves nothing (None: it is the named approver's, signed, for this
    escalation)."""
    if not approver or not approver_key:
        return "the contract names no approver key: no spend beyond the cap can be approved"
    if review.approver != approver:
        return f"reviewed by {review.approver}, but the contract names {approver}"
    if review.escalation_event_id != escalation_event_id:
        return "the review answers another escalation"
    if not review.signature:
        return "the review is not signed"
    try:
        key = Ed25519PublicKey.from_public_bytes(base64.b64decode(approver_key, validate=True))
        signature = base64.b64decode(review.signature, validate=True)
        key.verify(signature, review_statement(review))
    except (InvalidSignature, binascii.Error, ValueError):
        return f"the signature is not {approver}'s key's signature of this review"
    return None
