"""The people who answer an escalated fallback (ADR-23, ADR-30): they approve after a while.

When an orchestrator escalates a fallback beyond a workload's daily spend cap
(`fallback_decided` with ``awaiting_approval``), the approver it names is paged. In the
simulation every approver answers `delay_s` later (15 minutes by default), and approves: a
`fallback_reviewed` with ``outcome = approved`` for the vCPU the escalation asked for, and a
spend that covers them at the region's dearest guaranteed rate until the end of the UTC day
(at least an hour), which is what a fallback arbiter charges an approved fallback against.
The review names the escalation as its cause and carries its correlation (the wave), and is
signed with the approver's key (`approver_key`: one per approver, derived from their name, as
the simulated contracts name it), so the arbiter checks it as it checks a person's (ADR-30).

An orchestrator that escalates nothing (the baseline) never pages anyone.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import replace
from functools import partial

from contracts.signing import FileSigner, raw_public_bytes
from schemas.events import Envelope, FallbackDecided, FallbackReviewed
from schemas.pools import PoolCatalogue
from sim.bus import EventBus
from sim.clock import DAY_US, HOUR_US, SECOND_US, Scheduler
from streams.deciders.approval import review_statement

PRODUCER = "sim/approver"


def approver_signer(approver: str) -> FileSigner:
    """The simulated approver's signing key: the same for the same name, in every run."""
    seed = hashlib.sha256(f"spotcap-sim-approver/{approver}".encode()).digest()
    return FileSigner.from_bytes(seed)


def approver_key(approver: str) -> str:
    """The base64 public key a simulated contract names for `approver`."""
    return base64.b64encode(raw_public_bytes(approver_signer(approver).public_key())).decode()


class Approvers:
    def __init__(
        self, bus: EventBus, clock: Scheduler, catalogue: PoolCatalogue, *, delay_s: int
    ) -> None:
        if delay_s <= 0:
            # An answer in the instant of the page would come after the orchestrator settled
            # that instant; no person answers in 0 s anyway.
            raise ValueError(f"approval delay {delay_s} s: an approver needs at least 1 s")
        self._bus = bus
        self._clock = clock
        self._delay_us = delay_s * SECOND_US
        guaranteed = [p.guaranteed_price_per_vcpu_h_eur_micros for p in catalogue]
        self._rate_eur_micros = max(guaranteed, default=0)
        bus.subscribe(FallbackDecided.EVENT_TYPE, self._on_decided)

    def _on_decided(self, envelope: Envelope) -> None:
        decided = envelope.payload
        assert isinstance(decided, FallbackDecided)
        if decided.awaiting_approval:
            self._clock.at(self._clock.now_us + self._delay_us, partial(self._approve, envelope))

    def _approve(self, escalation: Envelope) -> None:
        asked = escalation.payload
        assert isinstance(asked, FallbackDecided)
        now_us = self._clock.now_us
        horizon_us = max(HOUR_US, DAY_US - now_us % DAY_US)
        spend = asked.vcpu * self._rate_eur_micros * horizon_us // HOUR_US
        review = FallbackReviewed(
            workload_id=asked.workload_id,
            approver=asked.approver,
            outcome="approved",
            vcpu=asked.vcpu,
            approved_spend_eur_micros=spend,
            note=f"approved {self._delay_us // SECOND_US} s after the page",
            escalation_event_id=escalation.event_id,
        )
        signature = approver_signer(asked.approver).sign(review_statement(review))
        self._bus.emit(
            replace(review, signature=base64.b64encode(signature).decode()),
            PRODUCER,
            causation_id=escalation.event_id,
            correlation_id=escalation.correlation_id,
        )
