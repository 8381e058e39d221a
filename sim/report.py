"""What the orchestrator decided in a demo run, and how it compares with the baseline.

`DecisionSummary` counts the decision events of a run (exclusions, rankings, placements,
replacements, fallbacks, returns, the actuator's throttling and refusals), from the events
alone, as `sim.summary.RunSummary` counts the region's. `comparison` sets the figures
that matter (wasted work, shortfall, spend) of two runs of the same seed side by side.
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from schemas.events import (
    EVENT_CLASSES,
    ActuationRefused,
    ActuationThrottled,
    BreakerTripped,
    Envelope,
    FallbackDecided,
    FallbackReturned,
    FallbackReviewed,
    InstanceLost,
    LaunchFailed,
    NoticeReceived,
    PlacementDecided,
    PoolExcluded,
    PoolRanked,
    PoolReadmitted,
    ReplacementRequested,
)

US = 1_000_000
# How long a notice's or a loss's time is kept for the decisions that name it: a replacement
# is decided in the instant of its cause, an exclusion names the reclaims inside its rule's
# window (six hours at most by default); so a run's summary holds a day of them, not the run.
EVIDENCE_HORIZON_US = 24 * 3600 * US

# The reasons a plan gives, in the words of the summary (the first phrase that matches).
_REASONS = (
    ("fewer than", "fewer than 8 eligible pools"),
    ("broken before this plan", "a cap already broken by earlier holdings"),
    ("smallest eligible instance", "instances too large for the pool cap of the workload"),
    ("unplaced: the room", "the room under the caps ran out"),
    ("no committed or guaranteed room", "no room for the floor"),
    ("no contract published", "no contract published yet"),
    ("could not keep out of", "no room outside the lost pool's group"),
)


def reason_class(reason: str) -> str:
    """A plan's reason in a few words (digits dropped when no known phrase matches)."""
    for phrase, words in _REASONS:
        if phrase in reason:
            return words
    return re.sub(r"\d+", "N", reason.split(";", maxsplit=1)[0])[:80]


class DecisionSummary:
    """Counts of a run's decisions, with the timings the design sets targets for."""

    def __init__(
        self,
        misbehaving_pool_ids: tuple[str, ...] = (),
        evidence_horizon_us: int = EVIDENCE_HORIZON_US,
    ) -> None:
        """`evidence_horizon_us`: how long before the newest event a notice or loss is still
        found by the decisions naming it (longer than every exclusion window of the run)."""
        self._misbehaving = set(misbehaving_pool_ids)
        self._horizon_us = evidence_horizon_us
        # notice / loss id -> when, oldest first (events are observed in event-time order)
        self._evidence_at: OrderedDict[str, int] = OrderedDict()
        self._notices: set[str] = set()
        self.exclusions: list[dict[str, Any]] = []
        self.readmissions = 0
        self.ranking_rounds: set[str] = set()
        self.pools_ranked = 0
        self.placements = 0
        self.placements_caps_held = 0
        self.placements_unplaced = 0
        self.placed_vcpu = 0
        self.unplaced_vcpu = 0
        self.premium_per_h_eur_micros = 0
        self.caps_not_held: Counter[str] = Counter()
        self.unplaced_reasons: Counter[str] = Counter()
        self.replacements = 0
        self.replacements_on_notice = 0
        self.replacement_delays_us: list[int] = []
        self.replacement_unplaced = 0
        self.fallbacks: Counter[str] = Counter()
        self.fallback_vcpu: Counter[str] = Counter()
        self.fallback_spend_eur_micros = 0
        self.deadline_moves = 0
        self.escalations = 0
        self.approvals = 0
        self.returns = 0
        self.returned_vcpu = 0
        self.throttled = 0
        self.throttle_delay_ms_max = 0
        self.refused: Counter[str] = Counter()
        self.breakers: Counter[str] = Counter()
        self.launch_failures = 0

    def observe(self, envelope: Envelope) -> None:
        p = envelope.payload
        at = envelope.occurred_at
        if isinstance(p, NoticeReceived | InstanceLost):
            self._evidence_at[envelope.event_id] = at
            self._forget_evidence(at - self._horizon_us)
        elif isinstance(p, PoolExcluded):
            times = [self._evidence_at[i] for i in p.evidence_event_ids if i in self._evidence_at]
            self.exclusions.append(
                {
                    "pool_id": p.pool_id,
                    "reason": p.reason,
                    "at_us": at,
                    "evidence": len(p.evidence_event_ids),
                    "first_evidence_to_exclusion_s": (at - min(times)) / US if times else None,
                    "last_evidence_to_exclusion_s": (at - max(times)) / US if times else None,
                    "observed_per_h": p.observed_interruption_per_h,
                    "expected_per_h": p.expected_interruption_per_h,
                    "misbehaving": p.pool_id in self._misbehaving,
                }
            )
        elif isinstance(p, PoolReadmitted):
            self.readmissions += 1
        elif isinstance(p, PoolRanked):
            self.ranking_rounds.add(p.ranking_id)
            self.pools_ranked += 1
        elif isinstance(p, PlacementDecided):
            self._placement(p)
        elif isinstance(p, ReplacementRequested):
            self.replacements += 1
            cause_at = self._evidence_at.get(envelope.causation_id or "")
            if cause_at is not None:
                self.replacement_delays_us.append(at - cause_at)
            self.replacements_on_notice += envelope.causation_id in self._notices
            self.replacement_unplaced += p.unplaced_vcpu > 0
        elif isinstance(p, FallbackDecided):
            kind: str = "escalated, awaiting approval" if p.awaiting_approval else p.kind
            if p.kind == "escalated" and not p.awaiting_approval:
                kind = "escalated, approved"
            self.fallbacks[kind] += 1
            self.fallback_vcpu[kind] += p.vcpu
            self.fallback_spend_eur_micros += p.projected_eur_micros
            self.escalations += p.awaiting_approval
            self.deadline_moves += p.deadline_slack_s is not None
        elif isinstance(p, FallbackReviewed):
            self.approvals += p.outcome == "approved"
        elif isinstance(p, FallbackReturned):
            self.returns += 1
            self.returned_vcpu += p.vcpu
        elif isinstance(p, ActuationThrottled):
            self.throttled += 1
            self.throttle_delay_ms_max = max(self.throttle_delay_ms_max, p.delay_ms)
        elif isinstance(p, ActuationRefused):
            self.refused[p.rule] += 1
        elif isinstance(p, BreakerTripped):
            self.breakers[p.breaker] += 1
        elif isinstance(p, LaunchFailed):
            self.launch_failures += 1
        if isinstance(p, NoticeReceived):
            self._notices.add(envelope.event_id)

    def _forget_evidence(self, before_us: int) -> None:
        evidence = self._evidence_at
        while evidence:
            event_id, at_us = next(iter(evidence.items()))
            if at_us >= before_us:
                break
            del evidence[event_id]
            self._notices.discard(event_id)

    def _placement(self, p: PlacementDecided) -> None:
        self.placements += 1
        self.placed_vcpu += p.requested_vcpu - p.unplaced_vcpu
        self.premium_per_h_eur_micros += p.premium_per_h_eur_micros
        if p.caps_held:
            self.placements_caps_held += 1
        else:
            self.caps_not_held[reason_class(p.caps_reason or "")] += 1
        if p.unplaced_vcpu:
            self.placements_unplaced += 1
            self.unplaced_vcpu += p.unplaced_vcpu
            if p.caps_held:
                self.unplaced_reasons[reason_class(p.caps_reason or "")] += 1

    def report(self) -> dict[str, Any]:
        delays = sorted(self.replacement_delays_us)
        misbehaving = sorted(self._misbehaving)
        first_exclusion: dict[str, dict[str, Any]] = {}
        for exclusion in self.exclusions:
            first_exclusion.setdefault(exclusion["pool_id"], exclusion)
        return {
            "exclusions": self.exclusions,
            "excluded_pools": len({e["pool_id"] for e in self.exclusions}),
            "misbehaving_pools_excluded": [
                {"pool_id": pool_id, "first_exclusion": first_exclusion.get(pool_id)}
                for pool_id in misbehaving
            ],
            "readmissions": self.readmissions,
            "ranking_rounds": len(self.ranking_rounds),
            "pools_ranked": self.pools_ranked,
            "placements": {
                "decided": self.placements,
                "caps_held": self.placements_caps_held,
                "caps_not_held": dict(self.caps_not_held.most_common()),
                "with_unplaced_vcpu": self.placements_unplaced,
                "unplaced_reasons": dict(self.unplaced_reasons.most_common()),
                "placed_vcpu": self.placed_vcpu,
                "unplaced_vcpu": self.unplaced_vcpu,
                "premium_per_h_eur": round(self.premium_per_h_eur_micros / 1e6, 2),
            },
            "replacements": {
                "requested": self.replacements,
                "on_notice": self.replacements_on_notice,
                "with_unplaced_vcpu": self.replacement_unplaced,
                "notice_to_decision_s_max": delays[-1] / US if delays else None,
                "notice_to_decision_s_median": delays[len(delays) // 2] / US if delays else None,
            },
            "fallbacks": {
                "by_authority": dict(sorted(self.fallbacks.items())),
                "vcpu_by_authority": dict(sorted(self.fallback_vcpu.items())),
                "projected_spend_eur": round(self.fallback_spend_eur_micros / 1e6, 2),
                "deadline_moves": self.deadline_moves,
                "escalations": self.escalations,
                "approvals": self.approvals,
                "returns": self.returns,
                "returned_vcpu": self.returned_vcpu,
            },
            "actuation": {
                "throttled": self.throttled,
                "throttle_delay_ms_max": self.throttle_delay_ms_max,
                "refused": dict(sorted(self.refused.items())),
                "breakers_tripped": dict(sorted(self.breakers.items())),
                "launches_failed": self.launch_failures,
            },
        }


# The figures two orchestrators are compared on: (report key, label, unit). The net saving is
# the ledger's figure under the recorded rule (higher is better); for the rest lower is better.
COMPARED = (
    ("net_saving_eur", "net saving (the ledger's rule)", "EUR"),
    ("wasted_vcpu_h", "wasted work", "vCPU-h"),
    ("shortfall_vcpu_h", "shortfall (asked for, not running)", "vCPU-h"),
    ("surplus_vcpu_h", "surplus (running, not asked for)", "vCPU-h"),
    ("spend_eur", "spend at the rate cards", "EUR"),
    ("losses", "instances lost", "instances"),
    ("losses_per_1000_instance_h", "instances lost per 1,000 instance-hours", "losses"),
)


def comparison(ours: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """Each compared figure of both runs, and the change from the baseline."""
    out: dict[str, Any] = {}
    for key, _, unit in COMPARED:
        a, b = _figure(ours, key), _figure(baseline, key)
        out[key] = {
            "orchestrator": a,
            "baseline": b,
            "unit": unit,
            "change": round((a - b) / abs(b), 4) if b else None,
        }
    for model in sorted(set(ours["used_vcpu_h"]) | set(baseline["used_vcpu_h"])):
        out[f"used_vcpu_h_{model}"] = {
            "orchestrator": ours["used_vcpu_h"].get(model, 0.0),
            "baseline": baseline["used_vcpu_h"].get(model, 0.0),
            "unit": "vCPU-h",
            "change": None,
        }
    return out


def _figure(report: dict[str, Any], key: str) -> float:
    if key == "losses":
        return float(report["losses_with_notice"] + report["losses_without_notice"])
    if key == "net_saving_eur":
        return int(report["ledger"]["net_saving_eur_micros"]) / 1_000_000
    return float(report[key])


# -- the report in words: rows of text a front end lays out as tables -------------------------


@dataclass(frozen=True, slots=True)
class TableSpec:
    """One table of the report for people, as data (the command line lays it out)."""

    title: str
    columns: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    right: tuple[str, ...] = ()
    caption: str | None = None
    show_header: bool = True
    first_no_wrap: bool = False


def summary_tables(report: dict[str, Any]) -> list[TableSpec | str]:
    """Events by type, the run's figures, the waves (or a line: none) and misbehaving pools."""
    by_count = sorted(report["events_by_type"].items(), key=lambda kv: -kv[1])
    events = [(name, EVENT_CLASSES[name].TOPIC, f"{n:,}") for name, n in by_count]
    out: list[TableSpec | str] = [
        TableSpec(f"{report['events']:,} events written to {report['log']}",
                  ("event type", "topic", "events"), events, right=("events",)),
        TableSpec(f"region {report['region']}, seed {report['seed']}", ("figure", "value"),
                  figure_rows(report), right=("value",), show_header=False),
    ]  # fmt: skip
    waves = report["waves"]
    columns: tuple[str, ...] = ("wave", "hall", "instances lost")
    out.append(TableSpec(waves_title(waves), columns, wave_rows(waves), right=columns[2:])
               if waves else "no hall-wide wave in this run")  # fmt: skip
    columns = ("pool", "expected", "observed", "reclaims", "inst-hours")
    out.append(TableSpec("misbehaving pools: reclaimed far above their record and price", columns,
                         misbehaving_pool_rows(report), right=columns[1:],
                         caption="expected and observed: reclaims per instance-hour",
                         first_no_wrap=True))  # fmt: skip
    return out


def decision_tables(decisions: dict[str, Any], most: int | None) -> list[TableSpec]:
    """The deciders' decisions, then the exclusions (at most `most` rows, then a 'more')."""
    out = [TableSpec("what the deciders decided", ("decision", "count", "detail"),
                     decision_rows(decisions), right=("count",), show_header=False)]  # fmt: skip
    if decisions["exclusions"]:
        columns = ("pool", "rule", "evidence", "first", "last", "observed/h", "expected/h")
        rows = exclusion_rows(decisions)
        if most is not None and len(rows) > most:
            more = f"... {len(rows) - most:,} more (--all-exclusions; `spotcap query exclusions`)"
            rows = [*rows[:most], (more, *[""] * (len(columns) - 1))]
        title = "exclusions (time from the first and from the last evidence to the exclusion)"
        out.append(TableSpec(title, columns, rows, right=columns[2:]))
    return out


def figure_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The run's figures: (label, value)."""
    by_type = report["events_by_type"]
    return [
        ("sim days", f"{report['sim_days']:g}"),
        ("orchestrator", report["orchestrator"]),
        ("pools", str(report["pools"])),
        ("workloads", str(report["workloads"])),
        ("declared target vCPU (sum)", f"{report['target_vcpu']:,}"),
        ("peak running vCPU", f"{report['peak_vcpu']:,}"),
        *((f"vCPU-hours {model}", f"{h:,.0f}") for model, h in report["used_vcpu_h"].items()),
        ("advisories", f"{report['advisories']:,}"),
        ("notices", f"{report['notices']:,}"),
        ("losses with notice", f"{report['losses_with_notice']:,}"),
        ("losses without notice", f"{report['losses_without_notice']:,}"),
        ("wasted vCPU-hours", f"{report['wasted_vcpu_h']:,.0f}"),
        ("shortfall vCPU-hours (asked for, not running)", f"{report['shortfall_vcpu_h']:,.0f}"),
        ("spend at the rate cards (EUR)", f"{report['spend_eur']:,.0f}"),
        (
            "surplus vCPU-hours (running, not asked for)",
            f"{report['ledger']['surplus_vcpu_h']:,.0f}",
        ),
        ("net saving, the ledger's rule (EUR)", _eur(report["ledger"]["net_saving_eur_micros"])),
        ("  of which idle floor (EUR)", _eur(-report["ledger"]["eur_micros"]["idle_floor"])),
        ("placements decided", f"{by_type.get('placement_decided', 0):,}"),
        ("replacements requested", f"{by_type.get('replacement_requested', 0):,}"),
        ("wasted share of reclaimable hours", f"{report['wasted_share_of_reclaimable']:.2%}"),
    ]


def waves_title(waves: list[dict[str, Any]]) -> str:
    """The title of a run's hall-wide waves: how many, and the fewest and most lost in one."""
    sizes = [w["instances_lost"] for w in waves]
    return f"{len(waves)} hall-wide waves ({min(sizes)}-{max(sizes)} instances lost each)"


def wave_rows(waves: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """Each hall-wide wave: (wave, hall, instances lost)."""
    return [(w["wave_id"], w["hall"], str(w["instances_lost"])) for w in waves]


def misbehaving_pool_rows(report: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """Each misbehaving pool: (pool, expected and observed reclaims per instance-hour,
    reclaims, instance-hours)."""
    return [
        (p["pool_id"], f"{p['expected_per_instance_h']:.4f}", f"{p['observed_per_instance_h']:.4f}",
         str(p["reclaims"]), f"{p['instance_h']:,.0f}")
        for p in report["misbehaving_pools"]
    ]  # fmt: skip


def decision_rows(decisions: dict[str, Any]) -> list[tuple[str, str, str]]:
    """What the deciders decided: (decision, count, detail)."""
    p, r, f, a = (decisions[k] for k in ("placements", "replacements", "fallbacks", "actuation"))
    not_held = "; ".join(f"{n:,} {why}" for why, n in p["caps_not_held"].items())
    unplaced = "; ".join(f"{n:,} {why}" for why, n in p["unplaced_reasons"].items())
    delay = r["notice_to_decision_s_max"]
    exclusions = len(decisions["exclusions"])
    rows: list[tuple[str, int, str]] = [
        ("pools excluded", decisions["excluded_pools"],
         f"{exclusions:,} exclusions, {decisions['readmissions']:,} readmissions"),
        ("ranking rounds", decisions["ranking_rounds"],
         f"{decisions['pools_ranked']:,} pools ranked"),
        ("placements", p["decided"],
         f"caps held in {p['caps_held']:,}" + (f"; not held: {not_held}" if not_held else "")),
        ("  with vCPU unplaced", p["with_unplaced_vcpu"],
         f"{p['unplaced_vcpu']:,} of {p['placed_vcpu'] + p['unplaced_vcpu']:,} vCPU"
         + (f": {unplaced}" if unplaced else "")),
        ("replacements", r["requested"],
         f"{r['on_notice']:,} on the notice; notice to decision at most {delay:,.0f} s"
         if delay is not None else ""),
        *((f"fallback: {kind}", n, f"{f['vcpu_by_authority'][kind]:,} vCPU")
          for kind, n in f["by_authority"].items()),
        ("  deadline moves", f["deadline_moves"], "to guaranteed capacity (Uniform Progress)"),
        ("escalations", f["escalations"], f"{f['approvals']:,} approved by the approver"),
        ("returns", f["returns"], f"{f['returned_vcpu']:,} vCPU back to reclaimable capacity"),
        ("throttled calls", a["throttled"],
         f"longest wait {a['throttle_delay_ms_max'] / 1000:,.1f} s (token budget)"),
        ("refused calls", sum(a["refused"].values()),
         ", ".join(f"{n:,} {rule}" for rule, n in a["refused"].items())),
        ("breakers tripped", sum(a["breakers_tripped"].values()),
         ", ".join(f"{n:,} {b}" for b, n in a["breakers_tripped"].items())),
        ("launches failed", a["launches_failed"], "no room when the call went out"),
    ]  # fmt: skip
    return [(label, f"{count:,}", detail) for label, count, detail in rows]


def exclusion_rows(decisions: dict[str, Any]) -> list[tuple[str, ...]]:
    """Each exclusion: pool, rule, evidence, time from the first and from the last evidence to
    the exclusion, observed and expected reclaims per hour."""
    return [
        (
            e["pool_id"] + (" (misbehaving)" if e["misbehaving"] else ""),
            e["reason"],
            f"{e['evidence']:,}",
            _duration(e["first_evidence_to_exclusion_s"]),
            _duration(e["last_evidence_to_exclusion_s"]),
            f"{e['observed_per_h']:.4f}",
            f"{e['expected_per_h']:.4f}",
        )
        for e in decisions["exclusions"]
    ]


def comparison_rows(compared: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Each compared figure: (figure with its unit, ours, the baseline's, the change)."""
    labels = {key: (label, unit) for key, label, unit in COMPARED}
    rows = []
    for key, row in compared.items():
        label, unit = labels.get(key, (key.replace("_", " "), row["unit"]))
        if key.startswith("used_vcpu_h_"):
            label = f"used on {key.removeprefix('used_vcpu_h_')} capacity"
        change = "" if row["change"] is None else f"{row['change']:+.1%}"
        digits = 3 if key == "losses_per_1000_instance_h" else 0
        rows.append((f"{label} ({unit})", f"{row['orchestrator']:,.{digits}f}",
                     f"{row['baseline']:,.{digits}f}", change))  # fmt: skip
    return rows


def _eur(micros: int) -> str:
    return f"{micros / 1_000_000:,.0f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 120:
        return f"{seconds:,.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:,.1f} min"
    return f"{seconds / 3600:,.1f} h"
