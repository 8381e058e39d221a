"""What a drill measured (ADR-33): a pure fold of the region's events after its `drill_started`.

For each instance the drill reclaimed: its notice (the notice path), notice to drain start
(the agent's reaction), the drain completed and verified without overrun, and a replacement
launched before the notice's deadline (the replacement decider and the actuator: the launch
carries in its decision tag the `replacement_requested` it serves, or a decision that follows
from it by causation, such as the fallback after the replacement's launch failed). A
replacement of no vCPU (the workload needed none: its claim was ending) counts as in time.
The cost is the work the drill wasted, priced at the pool's latest rate card. No clock, no
I/O: the same events give the same `drill_finished`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from provider.base import DECISION_TAG
from schemas.events import (
    DrainCompleted,
    DrainStarted,
    DrillFinished,
    DrillStarted,
    Envelope,
    InstanceLaunched,
    NoticeReceived,
    RateCard,
    ReplacementRequested,
    WorkWasted,
)


@dataclass(slots=True)
class _Seen:
    notice_at: int | None = None
    deadline_at: int | None = None
    drain_at: int | None = None
    verified: bool = False
    replacements: list[str] = field(default_factory=list)
    needed: bool = False
    replaced_at: int | None = None


def measure(start: DrillStarted, events: list[Envelope]) -> DrillFinished:
    """The figures of the drill `start` from the region's events (any order, any extra: the
    price is the pool's latest rate card among them, before the drill or during it)."""
    seen = {i: _Seen() for i in start.instance_ids}
    by_replacement: dict[str, str] = {}  # a replacement or a decision it caused -> instance
    wasted_vcpu_s = 0.0
    price_at, price = -1, 0
    launches: list[Envelope] = []
    for event in sorted(events, key=lambda e: e.occurred_at):
        p = event.payload
        if event.causation_id in by_replacement:
            by_replacement[event.event_id] = by_replacement[event.causation_id]
        if isinstance(p, RateCard) and p.pool_id == start.pool_id and event.occurred_at >= price_at:
            price_at, price = event.occurred_at, p.price_per_vcpu_h_eur_micros
        elif isinstance(p, InstanceLaunched):
            launches.append(event)
        instance_id = getattr(p, "instance_id", None)
        if isinstance(p, ReplacementRequested) and p.replaces_instance_id in seen:
            seen[p.replaces_instance_id].replacements.append(event.event_id)
            seen[p.replaces_instance_id].needed |= p.vcpu > 0
            by_replacement[event.event_id] = p.replaces_instance_id
        if instance_id not in seen:
            continue
        s = seen[instance_id]
        if isinstance(p, NoticeReceived) and s.notice_at is None:
            s.notice_at, s.deadline_at = event.occurred_at, p.deadline_at
        elif isinstance(p, DrainStarted) and s.drain_at is None:
            s.drain_at = event.occurred_at
        elif isinstance(p, DrainCompleted):
            s.verified = s.verified or (p.verified and not p.overrun)
        elif isinstance(p, WorkWasted):
            wasted_vcpu_s += p.wasted_vcpu_s
    for event in launches:
        replaced = by_replacement.get(event.payload.tags.get(DECISION_TAG, ""))  # type: ignore[union-attr]
        if replaced is not None:
            s = seen[replaced]
            if s.replaced_at is None or event.occurred_at < s.replaced_at:
                s.replaced_at = event.occurred_at
    return _figures(start, seen, wasted_vcpu_s, price)


def _figures(
    start: DrillStarted, seen: dict[str, _Seen], wasted_vcpu_s: float, price: int
) -> DrillFinished:
    failures: list[str] = []
    reactions_ms: list[int] = []
    in_time = 0
    for instance_id, s in sorted(seen.items()):
        if s.notice_at is None:
            failures.append(f"{instance_id}: no notice reached the log")
            continue
        if s.drain_at is None:
            failures.append(f"{instance_id}: no drain started")
        else:
            reactions_ms.append((s.drain_at - s.notice_at) // 1000)
            if not s.verified:
                failures.append(f"{instance_id}: drain not completed and verified in time")
        assert s.deadline_at is not None
        if (s.replacements and not s.needed) or (
            s.replaced_at is not None and s.replaced_at <= s.deadline_at
        ):
            in_time += 1
        else:
            failures.append(f"{instance_id}: no replacement launched before its deadline")
    reactions_ms.sort()
    p99 = reactions_ms[max(0, -(-99 * len(reactions_ms) // 100) - 1)] if reactions_ms else None
    return DrillFinished(
        drill_id=start.drill_id,
        pool_id=start.pool_id,
        reclaimed_count=len(seen),
        noticed_count=sum(1 for s in seen.values() if s.notice_at is not None),
        drained_count=len(reactions_ms),
        drain_verified_count=sum(1 for s in seen.values() if s.verified),
        notice_to_drain_p99_ms=p99,
        notice_to_drain_max_ms=reactions_ms[-1] if reactions_ms else None,
        replacements_requested_count=sum(1 for s in seen.values() if s.replacements),
        replaced_in_time_count=in_time,
        work_wasted_vcpu_s=wasted_vcpu_s,
        cost_eur_micros=round(wasted_vcpu_s * price / 3600),
        passed=not failures and bool(seen),
        failures=tuple(failures),
    )
