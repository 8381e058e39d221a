"""Re-deciding history: the recorded demo run decided again with other settings (`spotcap
replay decisions`, docs/replay-decisions.md).

In closed loop the history depends on the decisions: a pool the deciders keep using is a pool
the region reclaims from, a fallback is a guaranteed instance that is billed, and the work a
loss wastes depends on where the work ran. So the recorded inputs (the seed's demand, market,
reclaims and waves, the catalogue, every knob of the simulation, recorded beside the log by
`sim.record`) are simulated again, driven by the deciders with the changed settings (or by the
baseline stand-in), exactly as `spotcap demo` drives them (`sim.loop`), into a scratch log that
is deleted afterwards.

Both histories, the recorded log and the scratch one, are then read the same way (the merged
history, `streams.merged`) and counted by the same `OutcomeCounter`: exclusions, placements,
fallbacks, actuation, losses and wasted work, and the ledger under the recorded accounting rule
(`replay/rules/recorded.yaml`, the Python fold). Reading both through the same path is what
makes the comparison exact: with the recorded settings the scratch log is byte for byte the
recorded one, so every delta is zero.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from projections.ledger.rule import CAUSES, COST_CAUSES
from projections.money import eur_string
from replay.fold import Fold
from replay.ledgers import day_date, net_saving
from replay.rule import Rule
from replay.rule_file import load_rule, shipped_rule_path
from schemas.codec import Codec
from schemas.events import (
    ActuationRefused,
    ActuationThrottled,
    Envelope,
    FallbackDecided,
    FallbackReturned,
    InstanceLost,
    LaunchFailed,
    PlacementDecided,
    PoolExcluded,
    PoolReadmitted,
    ReplacementRequested,
    WorkWasted,
)
from sim.clock import DAY_US
from sim.demo import BASELINE, ORCHESTRATORS, write_run
from sim.fresh import current_ends, recorded_ends
from sim.loop import owned_by
from sim.record import RecordedRun, RunRecordError
from sim.region import RegionSim
from streams.deciders.settings import DeciderSettings
from streams.deciders.settings_keys import as_data, differences
from streams.embedded import EmbeddedLog
from streams.log import EventLog
from streams.merged import MergedHistory
from streams.topics import EVENT_TOPICS, region_topics

RECORDED_RULE = shipped_rule_path("recorded")
US_PER_DAY = DAY_US
Progress = Callable[[float, float], None]  # (done, total)


@dataclass(frozen=True, slots=True)
class Figure:
    key: str
    group: str
    label: str
    unit: str  # "" (a count), "vCPU", "vCPU-h", "EUR" (the values in micro-euros)


def _ledger_label(cause: str) -> str:
    return cause.replace("_", " ")


FIGURES: tuple[Figure, ...] = (
    Figure("exclusions", "exclusions", "exclusions decided", ""),
    Figure("pools_excluded", "exclusions", "distinct pools excluded", ""),
    Figure("misbehaving_pools_excluded", "exclusions", "misbehaving pools excluded", ""),
    Figure("readmissions", "exclusions", "pools readmitted", ""),
    Figure("placements", "placements", "placements decided", ""),
    Figure("placed_vcpu", "placements", "vCPU placed", "vCPU"),
    Figure("unplaced_vcpu", "placements", "vCPU left unplaced", "vCPU"),
    Figure("placements_caps_not_held", "placements", "placements breaking a cap", ""),
    Figure("replacements", "placements", "replacements requested", ""),
    Figure("fallbacks", "fallbacks", "fallbacks decided", ""),
    Figure("fallback_vcpu", "fallbacks", "vCPU fallen back", "vCPU"),
    Figure("escalations", "fallbacks", "escalated for approval", ""),
    Figure("returns", "fallbacks", "returns to reclaimable", ""),
    Figure("throttled", "actuation", "calls throttled", ""),
    Figure("refused", "actuation", "calls refused", ""),
    Figure("launches_failed", "actuation", "launches failed", ""),
    Figure("instances_lost", "outcome", "instances lost", ""),
    Figure("losses_without_notice", "outcome", "lost without notice", ""),
    Figure("wasted_vcpu_h", "outcome", "wasted work", "vCPU-h"),
    *(Figure(f"ledger_{c}", "ledger", _ledger_label(c), "EUR") for c in CAUSES),
    Figure("ledger_cost", "ledger", "cost (every cost line)", "EUR"),
    Figure("ledger_net_saving", "ledger", "net saving", "EUR"),
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one history came to, within the days asked for."""

    figures: dict[str, int | float]
    excluded_pools: frozenset[str]
    events: int


class OutcomeCounter:
    """Counts one history's decisions and their outcome, and prices it under `rule`; events
    outside [first_day, last_day] (UTC days since the epoch) are not counted (the fold prices
    only those days' lines)."""

    def __init__(
        self,
        misbehaving_pool_ids: tuple[str, ...],
        rule: Rule,
        first_day: int | None = None,
        last_day: int | None = None,
    ) -> None:
        self._misbehaving = frozenset(misbehaving_pool_ids)
        self._fold = Fold([rule], first_day, last_day)
        self._first_us = None if first_day is None else first_day * US_PER_DAY
        self._end_us = None if last_day is None else (last_day + 1) * US_PER_DAY
        self._counts: Counter[str] = Counter()
        self._wasted_vcpu_s = 0.0
        self._excluded: set[str] = set()
        self.events = 0

    def observe(self, e: Envelope) -> None:
        self.events += 1
        self._fold.feed(e)
        at = e.occurred_at
        if (self._first_us is not None and at < self._first_us) or (
            self._end_us is not None and at >= self._end_us
        ):
            return
        p, c = e.payload, self._counts
        if isinstance(p, PoolExcluded):
            c["exclusions"] += 1
            self._excluded.add(p.pool_id)
        elif isinstance(p, PoolReadmitted):
            c["readmissions"] += 1
        elif isinstance(p, PlacementDecided):
            c["placements"] += 1
            c["placed_vcpu"] += p.requested_vcpu - p.unplaced_vcpu
            c["unplaced_vcpu"] += p.unplaced_vcpu
            c["placements_caps_not_held"] += not p.caps_held
        elif isinstance(p, ReplacementRequested):
            c["replacements"] += 1
        elif isinstance(p, FallbackDecided):
            c["fallbacks"] += 1
            c["fallback_vcpu"] += p.vcpu
            c["escalations"] += p.awaiting_approval
        elif isinstance(p, FallbackReturned):
            c["returns"] += 1
        elif isinstance(p, ActuationThrottled):
            c["throttled"] += 1
        elif isinstance(p, ActuationRefused):
            c["refused"] += 1
        elif isinstance(p, LaunchFailed):
            c["launches_failed"] += 1
        elif isinstance(p, InstanceLost):
            c["instances_lost"] += 1
            c["losses_without_notice"] += not p.with_notice
        elif isinstance(p, WorkWasted):
            self._wasted_vcpu_s += p.wasted_vcpu_s

    def outcome(self) -> Outcome:
        figures: dict[str, int | float] = {f.key: 0 for f in FIGURES}
        figures.update(self._counts)
        figures["pools_excluded"] = len(self._excluded)
        figures["misbehaving_pools_excluded"] = len(self._excluded & self._misbehaving)
        figures["wasted_vcpu_h"] = round(self._wasted_vcpu_s / 3600, 1)
        total = dict.fromkeys(CAUSES, 0)
        for (_, _, cause), micros in self._fold.results()[0].items():
            total[cause] += micros
        for cause, micros in total.items():
            figures[f"ledger_{cause}"] = micros
        figures["ledger_cost"] = sum(total[c] for c in COST_CAUSES)
        figures["ledger_net_saving"] = net_saving(total)
        return Outcome(figures, frozenset(self._excluded), self.events)


def read_outcome(
    log: EventLog, codec: Codec, region: str, counter: OutcomeCounter, on_progress: Progress
) -> Outcome:
    """Every event of `region`'s history in `log`, in the merged order, through `counter`."""
    history = MergedHistory(
        log, codec, region, EVENT_TOPICS, poll_records=2000, buffer_per_partition=4000
    )
    total = history.progress.records_total or 0
    for n, decoded in enumerate(history, 1):
        counter.observe(decoded.envelope)
        if n % 5000 == 0:
            on_progress(history.progress.records_read, total)
    on_progress(total, total)
    return counter.outcome()


def check_log_is_the_run(log: EventLog, runs_dir: Path, region: str) -> None:
    """RunRecordError unless the log's topics of `region` end where the recorded run left them
    (anything written since would be counted as if the run had made it)."""
    recorded = recorded_ends(runs_dir, region)
    now = current_ends(log, region)
    if recorded is None or recorded != now:
        held = sum(sum(parts.values()) for parts in now.values())
        left = sum(sum(parts.values()) for parts in (recorded or {}).values())
        raise RunRecordError(
            f"the log ({log.describe()}) holds {held:,} records of region {region}, "
            f"not the {left:,} the recorded demo run left: something else wrote to it since, "
            "so its history is not the recorded run's",
            "run the demo again (--fresh) to record a history to re-decide",
        )


def rerun(
    run: RecordedRun,
    orchestrator: str,
    deciders: DeciderSettings,
    scratch: Path,
    on_progress: Progress,
) -> tuple[EmbeddedLog, tuple[str, ...]]:
    """The recorded simulation driven by `orchestrator` (the deciders with `deciders`), written
    to a new embedded log under `scratch`; returns the log and the misbehaving pools."""
    config = run.config
    log = EmbeddedLog(scratch / "log")
    log.apply_topics(region_topics(config.region))
    sim = RegionSim(config, orchestrator=ORCHESTRATORS[orchestrator](config, deciders))
    days = config.days
    write_run(sim, log, Codec(), lambda done: on_progress(min(done, days), days))
    return log, sim.misbehaving_pool_ids


def what_if(
    log: EventLog,
    codec: Codec,
    run: RecordedRun,
    deciders: DeciderSettings,
    orchestrator: str,
    *,
    runs_dir: Path,
    scratch_parent: Path,
    first_day: int | None,
    last_day: int | None,
    on_simulate: Progress,
    on_read_recorded: Progress,
    on_read_rerun: Progress,
) -> dict[str, Any]:
    """The recorded run in `log` (its records written with `codec`, its record and end offsets
    in `runs_dir`) and its re-run under `orchestrator` / `deciders` in a scratch log under
    `scratch_parent`, compared (plain JSON-able data; nothing in it depends on the clock, so the
    same inputs give the same bytes)."""
    rule = load_rule(RECORDED_RULE)
    region = run.config.region
    check_log_is_the_run(log, runs_dir, region)
    with tempfile.TemporaryDirectory(prefix=".replay-decisions-", dir=scratch_parent) as tmp:
        scratch, misbehaving = rerun(run, orchestrator, deciders, Path(tmp), on_simulate)
        try:
            recorded = read_outcome(
                log,
                codec,
                region,
                OutcomeCounter(misbehaving, rule, first_day, last_day),
                on_read_recorded,
            )
            again = read_outcome(
                scratch,
                Codec(),
                region,
                OutcomeCounter(misbehaving, rule, first_day, last_day),
                on_read_rerun,
            )
        finally:
            scratch.close()
    return _report(
        run,
        deciders,
        orchestrator,
        outcomes=(recorded, again),
        misbehaving=misbehaving,
        days=(first_day, last_day),
    )


def base_settings(run: RecordedRun) -> DeciderSettings:
    """The settings `--set` changes: the recorded run's, or (a baseline run) the defaults."""
    return run.deciders or owned_by(run.config.orchestrator.orchestrator_id)


def _report(
    run: RecordedRun,
    deciders: DeciderSettings,
    orchestrator: str,
    *,
    outcomes: tuple[Outcome, Outcome],
    misbehaving: tuple[str, ...],
    days: tuple[int | None, int | None],
) -> dict[str, Any]:
    recorded, again = outcomes
    first_day, last_day = days
    recorded_deciders = run.deciders
    figures = []
    for f in FIGURES:
        a, b = recorded.figures[f.key], again.figures[f.key]
        delta = round(b - a, 1) if isinstance(a, float) or isinstance(b, float) else b - a
        row: dict[str, Any] = {
            "key": f.key,
            "group": f.group,
            "label": f.label,
            "unit": f.unit,
            "recorded": a,
            "rerun": b,
            "delta": delta,
        }
        if f.unit == "EUR":
            row.update(
                recorded_eur=eur_string(int(a)),
                rerun_eur=eur_string(int(b)),
                delta_eur=eur_string(int(delta)),
            )
        figures.append(row)
    changed = (
        []
        if orchestrator == BASELINE
        else [
            {"key": k, "recorded": a, "rerun": b}
            for k, a, b in differences(base_settings(run), deciders)
        ]
    )
    config = run.config
    return {
        "region": config.region,
        "seed": config.seed,
        "sim_days": config.days,
        "workloads": config.workloads,
        "from": None if first_day is None else day_date(first_day).isoformat(),
        "to": None if last_day is None else day_date(last_day).isoformat(),
        "rule": RECORDED_RULE.name,
        "recorded": {
            "orchestrator": run.orchestrator,
            "events": recorded.events,
            "decider_settings": None if recorded_deciders is None else as_data(recorded_deciders),
        },
        "rerun": {
            "orchestrator": orchestrator,
            "events": again.events,
            "settings_changed": changed,
        },
        "figures": figures,
        "exclusions": {
            "misbehaving_pools": sorted(misbehaving),
            "excluded_in_both": sorted(recorded.excluded_pools & again.excluded_pools),
            "excluded_only_recorded": sorted(recorded.excluded_pools - again.excluded_pools),
            "excluded_only_rerun": sorted(again.excluded_pools - recorded.excluded_pools),
        },
        "identical": all(r["delta"] == 0 for r in figures)
        and recorded.excluded_pools == again.excluded_pools
        and recorded.events == again.events,
    }
