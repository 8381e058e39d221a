"""Running a drill: finish the drills whose deadlines have passed, ask the gate, reclaim.

One run (`run_drill`), as a cron job or by hand:

1. every `drill_started` without its `drill_finished` whose notices' deadlines (plus
   `grace_s`) have passed at the provider's time is measured (`provider.drill.measure`) and its
   `drill_finished` written;
2. the gate (`streams.deciders.drill`) judges the request at the provider's time from the
   region's events: a refusal is written as `drill_refused` and nothing is reclaimed;
3. otherwise the drill chooses its instances (the orchestrator's own running reclaimable
   instances of the pool), writes `drill_started` *before* any call (so its notices are known
   as the drill's), and asks the provider to reclaim each through its own path, the drill's id
   as correlation id.

With `wait`, the run then waits (on the provider's clock, at most the drill's window plus
`WAIT_PATIENCE_S` of wall time) until the drill can be finished, and finishes it. Writing
goes through `write`, reading the region's events through `read`: the caller opens the log
(the command line) or hands a simulated region's events (tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from provider.base import MIN_NOTICE_S, OWNER_TAG, CapacityProvider, ProviderError, ReclaimRequest
from provider.drill.measure import measure
from schemas.events import DrillFinished, DrillRefused, DrillStarted, Envelope
from schemas.ids import new_event_id
from streams.deciders.drill import (
    US,
    DrillGate,
    DrillSettings,
    Refusal,
    choose,
    finished,
    refused,
    started,
)

WAIT_PATIENCE_S = 600.0


@dataclass(frozen=True, slots=True)
class DrillRequest:
    pool_id: str
    share_ratio: float
    notice_s: int = MIN_NOTICE_S
    plan: str = "manual"
    drill_id: str | None = None  # None: a fresh one (a schedule derives it from the day)


@dataclass(slots=True)
class DrillOutcome:
    finished: list[DrillFinished] = field(default_factory=list)
    started: DrillStarted | None = None
    refused: DrillRefused | None = None
    already_ran: str | None = None  # a scheduled drill's id, already run (started) today
    reclaim_errors: list[str] = field(default_factory=list)


def finish_due(
    events: Sequence[Envelope], at_us: int, settings: DrillSettings | None = None
) -> list[Envelope]:
    """`drill_finished` for every unfinished drill whose window has passed at `at_us`."""
    grace_s = (settings or DrillSettings()).grace_s
    done = {e.payload.drill_id for e in events if isinstance(e.payload, DrillFinished)}
    out = []
    for event in events:
        p = event.payload
        if not isinstance(p, DrillStarted) or p.drill_id in done:
            continue
        if at_us >= event.occurred_at + (p.notice_s + grace_s) * US:
            # What the log held up to the finish: a replay of a longer log measures the same.
            figures = measure(p, [e for e in events if e.occurred_at <= at_us])
            out.append(finished(p.drill_id, event.region, at_us, figures, event.event_id))
    return out


def run_drill(
    provider: CapacityProvider,
    read: Callable[[], list[Envelope]],
    write: Callable[[list[Envelope]], None],
    request: DrillRequest | None,
    *,
    settings: DrillSettings | None = None,
    wait: bool = False,
    poll_s: float = 1.0,
) -> DrillOutcome:
    """Finish what is due, then run `request` (None: only finish). See the module docstring."""
    gate = DrillGate(settings)
    outcome = DrillOutcome()
    events = read()
    at_us = provider.now_us()
    done = finish_due(events, at_us, gate.settings)
    if done:
        write(done)
        outcome.finished += [e.payload for e in done]  # type: ignore[misc]
    if request is None:
        return outcome
    if request.share_ratio <= 0 or request.share_ratio > gate.settings.max_share_ratio:
        raise ValueError(
            f"a drill reclaims a share in (0, {gate.settings.max_share_ratio}] of a pool, "
            f"not {request.share_ratio}"
        )
    state = gate.fold([*events, *done])
    if request.drill_id is not None and request.drill_id in state.drills:
        outcome.already_ran = request.drill_id
        return outcome
    drill_id = request.drill_id or new_event_id()
    mine = [
        i.instance_id
        for i in provider.list_by_tag(OWNER_TAG, provider.orchestrator_id)
        if i.pool_id == request.pool_id and i.state == "active"
        and i.purchase_model == "reclaimable"
    ]  # fmt: skip
    refusal = gate.judge(state, at_us)
    if refusal is None and not mine:
        refusal = Refusal(
            "no_instances",
            f"pool {request.pool_id} has no running reclaimable instance of "
            f"{provider.orchestrator_id}; choose a pool spotcap uses (spotcap query fleet)",
            (),
        )
    if refusal is not None:
        no = DrillRefused(
            drill_id, request.pool_id, request.share_ratio, refusal.rule, refusal.reason,
            refusal.evidence_event_ids,
        )  # fmt: skip
        write([refused(drill_id, provider.region, at_us, no)])
        outcome.refused = no
        return outcome
    chosen = choose(mine, request.share_ratio, drill_id)
    go = DrillStarted(
        drill_id, request.pool_id, request.share_ratio, len(mine), tuple(chosen),
        request.notice_s, request.plan,
    )  # fmt: skip
    write([started(drill_id, provider.region, at_us, go)])
    outcome.started = go
    for instance_id in chosen:
        try:
            provider.reclaim(ReclaimRequest(instance_id, request.notice_s, None, drill_id))
        except ProviderError as error:  # measured as "no notice" in its drill_finished
            outcome.reclaim_errors.append(f"{instance_id}: {error}")
    if wait:
        window_s = request.notice_s + gate.settings.grace_s
        until_us = at_us + window_s * US
        # Bounded: a provider clock at wall speed or faster gets there within the window; one
        # that stalls leaves the drill to the next run, which finishes it.
        deadline = time.monotonic() + window_s + WAIT_PATIENCE_S
        while provider.now_us() < until_us:
            if time.monotonic() > deadline:
                return outcome
            time.sleep(poll_s)
        last = run_drill(provider, read, write, None, settings=settings)
        outcome.finished += last.finished
    return outcome


def run_plan(
    provider: CapacityProvider,
    read: Callable[[], list[Envelope]],
    write: Callable[[list[Envelope]], None],
    requests: Sequence[DrillRequest],
    *,
    settings: DrillSettings | None = None,
    wait: bool = False,
) -> DrillOutcome:
    """`run_drill` for the first of `requests` not already run (none: only finish); the others
    wait for the next run (one drill at a time)."""
    outcome = run_drill(provider, read, write, None, settings=settings)
    for request in requests:
        more = run_drill(provider, read, write, request, settings=settings, wait=wait)
        more.finished[:0] = outcome.finished
        if more.already_ran is None:
            return more
        outcome.already_ran = more.already_ran
    return outcome
