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

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from console.access import ReadAccess, StoreUnavailableError
from projections.ledger.writer import LEDGER_PROJECTION
from projections.postgres.writer import FLEET_PROJECTION
from projections.read.counts import FleetCounts, fleet_counts
from projections.read.lag import Positions, fleet_positions, lag_rows, ledger_positions
from schemas.topics import topic_name

MICROS_PER_EUR = 1_000_000


class StoreCollector:
    """Collects every spotcap metric from the stores behind `access`."""

    def __init__(self, access: ReadAccess) -> None:
        self.access = access

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "spotcap_store_up", "Whether the store answered this scrape (1) or not (0).",
            labels=["store"],
        )  # fmt: skip
        took = GaugeMetricFamily(
            "spotcap_store_read_duration_seconds",
            "How long reading the store's figures took in this scrape.",
            labels=["store"],
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
                "spotcap_dead_letters",
                "Records written to the dead-letter topic (undecodable or failed inputs, each "
                "with its origin and reason).",
                value=sum(dead.values()),
            )
        yield up
        yield took


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
    drills = CounterMetricFamily(
        "spotcap_drill_runs",
        "Daily drills (ADR-33) by pool and result: passed, failed, or refused (a wave, a "
        "breaker, another drill running).",
        labels=["pool", "result"],
    )
    for r in counts.drill_runs:
        drills.add_metric([r.pool, r.result], r.count)
    yield drills


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


def registry_for(access: ReadAccess) -> CollectorRegistry:
    """A registry of the store collector alone (no process metrics of the server itself, which
    say nothing about the fleet)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(access))
    return registry
