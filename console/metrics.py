"""Prometheus metrics at /metrics, read from the stores at scrape time (a custom collector):
the figures are the stores' own, so a restart of the server loses nothing and two servers over
the same stores agree. A store that is down is reported by ``spotcap_store_up`` and its
metrics are left out of that scrape, instead of failing the scrape.

Counters are cumulative figures the stores hold (events applied, decisions, dead letters,
spend); a rebuild starts a projection's again from zero, which Prometheus reads as a counter
reset.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import CollectorRegistry

from console.access import ReadAccess, StoreUnavailableError
from projections.ledger.writer import LEDGER_PROJECTION
from projections.postgres.writer import FLEET_PROJECTION
from projections.read.counts import DRILL_RESULTS, FleetCounts, fleet_counts
from projections.read.lag import Positions, fleet_positions, lag_rows, ledger_positions
from schemas.topics import topic_name

MICROS_PER_EUR = 1_000_000
# Seconds from the newest evidence to the exclusion: the promise is 60 s (ADR-07).
EXCLUSION_DELAY_BUCKETS_S = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0)


class StoreCollector:
    """Collects every spotcap metric from the stores behind `access`."""

    def __init__(self, access: ReadAccess) -> None:
        self.access = access

    def describe(self) -> Iterator[Metric]:
        return exported_families()

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "spotcap_store_up", _UP_HELP, labels=["store"]
        )  # fmt: skip
        took = GaugeMetricFamily(
            "spotcap_store_read_duration_seconds", _TOOK_HELP, labels=["store"]
        )
        positions: dict[str, Positions | None] = {}

        started = time.perf_counter()
        try:
            with self.access.fleet() as conn:
                counts = fleet_counts(conn)
                positions[FLEET_PROJECTION] = fleet_positions(conn)
        except StoreUnavailableError:
            positions[FLEET_PROJECTION] = None
            up.add_metric(["fleet"], 0)
        else:
            up.add_metric(["fleet"], 1)
            yield from _fleet_metrics(counts)
        took.add_metric(["fleet"], time.perf_counter() - started)

        started = time.perf_counter()
        try:
            with self.access.ledger() as store:
                positions[LEDGER_PROJECTION] = ledger_positions(store)
        except StoreUnavailableError:
            positions[LEDGER_PROJECTION] = None
            up.add_metric(["ledger"], 0)
        else:
            up.add_metric(["ledger"], 1)
        took.add_metric(["ledger"], time.perf_counter() - started)

        yield from _projection_metrics(lag_rows(self.access.region, self.access.end_offsets,
                                                positions))  # fmt: skip
        dead = self.access.end_offsets(topic_name(self.access.region, "deadletter"))
        if dead is not None:
            yield CounterMetricFamily(
                "spotcap_dead_letters", _DEAD_LETTERS_HELP, value=sum(dead.values())
            )
        yield up
        yield took


_UP_HELP = "Whether the store answered this scrape (1) or not (0)."
_TOOK_HELP = "How long reading the store's figures took in this scrape."
_DEAD_LETTERS_HELP = (
    "Records written to the dead-letter topic (undecodable or failed inputs, each with its "
    "origin and reason)."
)


def _fleet_metrics(counts: FleetCounts) -> Iterable[Metric]:
    decisions = CounterMetricFamily(
        "spotcap_decisions",
        "Decision events applied to the fleet state, by kind (event type).",
        labels=["kind"],
    )
    for kind, n in sorted(counts.decisions_by_type.items()):
        decisions.add_metric([kind], n)
    yield decisions
    yield GaugeMetricFamily(
        "spotcap_exclusions_active",
        "Pools excluded now (each exclusion names its evidence: /api/v1/exclusions?active=true).",
        value=counts.exclusions_active,
    )
    instances = GaugeMetricFamily(
        "spotcap_instances", "Instances by state in the fleet state.", labels=["state"]
    )
    for state, n in counts.instances_by_state.items():
        instances.add_metric([state], n)
    yield instances
    fallbacks = CounterMetricFamily(
        "spotcap_fallback_decisions",
        "Fallbacks to guaranteed capacity, by the authority they ran under (ADR-23).",
        labels=["authority"],
    )
    spend = CounterMetricFamily(
        "spotcap_fallback_spend_eur",
        "Fallback spend decided, in euros, by authority (floor_restore, within_cap, escalated).",
        labels=["authority"],
    )
    for kind, n in counts.fallback_decisions_by_kind.items():
        fallbacks.add_metric([kind], n)
        spend.add_metric([kind], counts.fallback_spend_eur_micros_by_kind[kind] / MICROS_PER_EUR)
    yield fallbacks
    yield spend
    drains = CounterMetricFamily(
        "spotcap_drains",
        "Drains completed, by path, whether the drain was verified and whether it overran its "
        "budget.",
        labels=["path", "verified", "overrun"],
    )
    for d in counts.drains:
        drains.add_metric([d.path, str(d.verified).lower(), str(d.overrun).lower()], d.count)
    yield drains
    yield from _alarm_metrics(counts)


def _alarm_metrics(counts: FleetCounts) -> Iterable[Metric]:
    """The figures the alert rules (infra/alerts/rules.yml) need beyond the counts above."""
    breakers = GaugeMetricFamily(
        "spotcap_breaker_open",
        "Whether the actuator's breaker is open (1) or closed (0), for every breaker it ever "
        "tripped (termination: mass termination; provider: failing launches).",
        labels=["breaker"],
    )
    for name, is_open in sorted(counts.breakers_open.items()):
        breakers.add_metric([name], 1.0 if is_open else 0.0)
    yield breakers
    buckets = [0] * len(EXCLUSION_DELAY_BUCKETS_S)
    for delay in counts.exclusion_delays_s:
        for i, bound in enumerate(EXCLUSION_DELAY_BUCKETS_S):
            buckets[i] += delay <= bound
    exclusion = HistogramMetricFamily(
        "spotcap_exclusion_delay_seconds",
        "Seconds from an exclusion's newest evidence event being recorded to the exclusion "
        "being recorded (ADR-07 promises 60 s).",
    )
    exclusion.add_metric(
        [],
        [*((str(b), float(n)) for b, n in zip(EXCLUSION_DELAY_BUCKETS_S, buckets, strict=True)),
         ("+Inf", float(len(counts.exclusion_delays_s)))],
        sum(counts.exclusion_delays_s),
    )  # fmt: skip
    yield exclusion
    spend = GaugeMetricFamily(
        "spotcap_fallback_day_spend_eur",
        "A workload's fallback spend so far on the newest day with a fallback decision.",
        labels=["workload"],
    )
    cap = GaugeMetricFamily(
        "spotcap_fallback_day_cap_eur",
        "The daily fallback spend cap the workload's newest fallback decision ran under "
        "(ADR-23: beyond it fallback escalates to the named approver).",
        labels=["workload"],
    )
    for day in counts.fallback_days:
        spend.add_metric([day.workload_id], day.spend_eur_micros / MICROS_PER_EUR)
        cap.add_metric([day.workload_id], day.cap_eur_micros / MICROS_PER_EUR)
    yield spend
    yield cap
    drills = CounterMetricFamily(
        "spotcap_drill_runs",
        "Daily drills (ADR-33) by pool and result: " + ", ".join(DRILL_RESULTS) + " (a "
        "refusal: a real wave, an open breaker or another drill running).",
        labels=["pool", "result"],
    )
    for r in counts.drill_runs:
        drills.add_metric([r.pool, r.result], r.count)
    yield drills
    overruns = CounterMetricFamily(
        "spotcap_drain_overruns",
        "Drains that took longer than the drain budget of the workload's contract, by workload "
        "(every workload with a contract).",
        labels=["workload"],
    )
    for workload, n in sorted(counts.overruns_by_workload.items()):
        overruns.add_metric([workload], n)
    yield overruns


def _projection_metrics(rows: list[dict[str, Any]]) -> Iterable[Metric]:
    lag = GaugeMetricFamily(
        "spotcap_projection_lag_records",
        "Records in the log the projection has not applied yet (summed over partitions).",
        labels=["projection", "topic"],
    )
    applied = CounterMetricFamily(
        "spotcap_projection_events_applied",
        "Records of the log the projection has applied: its stored offsets, summed over "
        "partitions.",
        labels=["projection", "topic"],
    )
    sums: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        if r["lag"] is None:
            continue  # the projection's store did not answer: unknown, not zero
        total = sums.setdefault((r["projection"], r["topic"]), [0, 0])
        total[0] += r["lag"]
        total[1] += r["next_offset"]
    for (projection, topic), (behind, done) in sorted(sums.items()):
        lag.add_metric([projection, topic], behind)
        applied.add_metric([projection, topic], done)
    yield lag
    yield applied


def exported_families() -> Iterator[Metric]:
    """Every family the collector can yield, without reading a store: what the registry (and
    the test of the alert rules' metric names, infra/alerts/rules.yml) knows it exports."""
    yield from _fleet_metrics(FleetCounts({}, 0, {}, {}, {}, [], []))
    yield from _projection_metrics([])
    yield CounterMetricFamily("spotcap_dead_letters", _DEAD_LETTERS_HELP)
    yield GaugeMetricFamily("spotcap_store_up", _UP_HELP)
    yield GaugeMetricFamily("spotcap_store_read_duration_seconds", _TOOK_HELP)


def registry_for(access: ReadAccess) -> CollectorRegistry:
    """A registry of the store collector alone (no process metrics of the server itself, which
    say nothing about the fleet)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(access))
    return registry
