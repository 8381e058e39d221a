"""From what a scheduler shows to the claim events: pure, no I/O, no clock.

A source (the Kubernetes watch, the slurmrestd poll) reports `Sighting`s: one piece of work
that names a workload (a pod, a job), what it asks for and where it stands (`pending`, `held`,
`running`, `ended`). A `Batch` is either complete (everything the source can see now, so a claim
it no longer shows has ended) or an update (some sightings). `decide` compares a batch with the
`Book` (the claims this intake opened, and those it released, read back from the log) and
returns the events to write:

* `capacity_claim_opened` for work seen pending whose claim was never opened;
* `capacity_released` for an open claim whose work ended, or that a complete batch no longer
  shows (deleted while the intake was away), caused by the claim's opened event.

Each event's id derives from the claim's id (the work's identity in its scheduler: a pod's
namespace, name and uid; a job's cluster and id), so a claim is opened once and released once
however often the work is seen, and a restarted intake that sees it again writes nothing new:
the book it rebuilds from the log says the claim is open, or released.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from schemas.events import CapacityClaimOpened, CapacityReleased, Envelope, Scheduler
from schemas.ids import derived_event_id

Stage = Literal["pending", "held", "running", "ended"]
"""Where a piece of work stands: only `pending` work opens a claim; `held` work (a held Slurm
job) waits for a person, not for capacity; `running` keeps an open claim open; `ended` (done,
failed, cancelled or deleted) releases it."""


@dataclass(frozen=True, slots=True)
class Sighting:
    """One piece of work as its scheduler shows it."""

    claim_id: str
    workload_id: str
    scheduler: Scheduler
    cluster: str
    stage: Stage
    requested_vcpu: int
    what: str
    """The work in words: 'pod etl/loader-7', 'Slurm job 4711 (align) in reclaimable'."""
    at_us: int
    """When it became what `stage` says: created (pending), finished (ended); for work seen
    ended without a time of its own, when it was seen."""


@dataclass(frozen=True, slots=True)
class Batch:
    """What a source saw: `complete` when `sightings` is everything under `prefix` now."""

    prefix: str
    sightings: Sequence[Sighting]
    complete: bool
    seen_at_us: int
    """When the source saw it (the time of a release for work that vanished)."""


@dataclass(slots=True)
class _Open:
    event_id: str
    workload_id: str
    scheduler: Scheduler
    requested_vcpu: int


@dataclass(slots=True)
class Book:
    """The claims this intake opened and has not released, and those it released."""

    open: dict[str, _Open] = field(default_factory=dict)
    released: set[str] = field(default_factory=set)

    def apply(self, envelope: Envelope) -> None:
        """Take in one of the intake's events (written now, or read back from the log)."""
        payload = envelope.payload
        if isinstance(payload, CapacityClaimOpened):
            if payload.claim_id not in self.released:
                self.open[payload.claim_id] = _Open(
                    envelope.event_id,
                    payload.workload_id,
                    payload.scheduler,
                    payload.requested_vcpu,
                )
        elif isinstance(payload, CapacityReleased):
            self.open.pop(payload.claim_id, None)
            self.released.add(payload.claim_id)

    def forget_released(self, prefix: str, visible: Iterable[str]) -> None:
        """Released claims of `prefix` a complete batch no longer shows will not be seen again
        (a pod's uid and a job's id are not reused): keep only those still visible."""
        still = set(visible)
        self.released = {c for c in self.released if not c.startswith(prefix) or c in still}


def opened_id(claim_id: str) -> str:
    return derived_event_id(claim_id, CapacityClaimOpened.EVENT_TYPE)


def released_id(claim_id: str) -> str:
    return derived_event_id(claim_id, CapacityReleased.EVENT_TYPE)


@dataclass(frozen=True, slots=True)
class Stamp:
    """Who writes, and when it recorded what it writes."""

    region: str
    producer: str
    recorded_at_us: int


def _envelope(
    payload: CapacityClaimOpened | CapacityReleased,
    event_id: str,
    occurred_at_us: int,
    stamp: Stamp,
    causation_id: str | None,
) -> Envelope:
    return Envelope(
        event_id=event_id,
        event_type=payload.EVENT_TYPE,
        occurred_at=occurred_at_us,
        recorded_at=stamp.recorded_at_us,
        region=stamp.region,
        key=payload.workload_id,
        causation_id=causation_id,
        correlation_id=None,
        producer=stamp.producer,
        payload=payload,
    )


def decide(book: Book, batch: Batch, stamp: Stamp) -> list[Envelope]:
    """The events `batch` calls for, given `book` (which it does not change)."""
    out: list[Envelope] = []
    seen: set[str] = set()
    for s in batch.sightings:
        if s.claim_id in seen:
            continue
        seen.add(s.claim_id)
        if s.claim_id in book.released:
            continue
        known = book.open.get(s.claim_id)
        if s.stage == "pending" and known is None:
            opened = CapacityClaimOpened(
                claim_id=s.claim_id,
                workload_id=s.workload_id,
                scheduler=s.scheduler,
                cluster=s.cluster,
                requested_vcpu=s.requested_vcpu,
                reason=f"{s.what} pending",
            )
            out.append(_envelope(opened, opened_id(s.claim_id), s.at_us, stamp, None))
        elif s.stage == "ended" and known is not None:
            out.append(_released(s.claim_id, known, f"{s.what} ended", s.at_us, stamp))
    if batch.complete:
        for claim_id, known in sorted(book.open.items()):
            if claim_id.startswith(batch.prefix) and claim_id not in seen:
                why = "no longer in its scheduler (ended while the intake was away)"
                out.append(_released(claim_id, known, why, batch.seen_at_us, stamp))
    return out


def _released(claim_id: str, known: _Open, reason: str, at_us: int, stamp: Stamp) -> Envelope:
    released = CapacityReleased(
        claim_id=claim_id,
        workload_id=known.workload_id,
        scheduler=known.scheduler,
        released_vcpu=known.requested_vcpu,
        reason=reason,
    )
    return _envelope(released, released_id(claim_id), at_us, stamp, known.event_id)
