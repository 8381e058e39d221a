"""`bench/serve.py`'s bare reference: the same HTTP answers as `spotcap serve` for the endpoints
the bench times, from the libraries alone, in a process of its own.

    .venv/bin/python bench/serve_bare.py --dsn DSN --schema S --ledger DIR --log DIR --region R

The same web stack as `spotcap serve` (FastAPI on uvicorn, one listening socket made with
``IPPROTO_TCP``), psycopg (a new connection per request, as the server makes), chdb (a session
on the ledger's folder per scrape, closed after it) and prometheus_client; the SQL written here.
No module of spotcap's but the envelope's schema definition (`schemas.catalogue`: which event
types are decisions, the fallback kinds). What it answers:

- ``/api/v1/pools?limit=N``: the pools by rank, money as exact euro strings, times in UTC;
- ``/api/v1/instances?limit=N``: the instances, most recently touched first;
- ``/api/v1/why/{instance id}``: the instance's chain of causes in sentences (an instance id
  only: events and workloads are not asked by the bench);
- ``/metrics``: the store collector's families, read from PostgreSQL, the ledger and the
  embedded log's acknowledged ends (one fixed-size record per partition, read with `struct`).

Its first line on stdout says where it listens (``listening on http://HOST:PORT``).
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry
from psycopg.rows import dict_row

from schemas.catalogue import envelope_schema

Row = dict[str, Any]

# -- JSON values ----------------------------------------------------------------------------------


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _json_row(row: Row) -> Row:
    out: Row = {}
    for key, value in row.items():
        if key.endswith("_eur_micros"):
            eur = None if value is None else f"{Decimal(int(value)).scaleb(-6):.6f}"
            out[key.removesuffix("_micros")] = eur
        elif isinstance(value, datetime):
            out[key] = _utc(value)
        else:
            out[key] = value
    return out


def _eur(micros: int) -> str:
    cents = (abs(micros) + 5_000) // 10_000
    sign = "-" if micros < 0 and cents else ""
    return f"{sign}€{cents // 100:,}.{cents % 100:02d}"


def _iso_us(micros: int) -> str:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- why: the sentences of an instance's chain ----------------------------------------------------


def _wave(e: Row) -> str:
    return f" (part of {e['correlation_id']})" if e.get("correlation_id") else ""


def _name(value: str | None, missing: str) -> str:
    return value.strip() if value and value.strip() else missing


_MICROS = re.compile(r"(-?\d+) micro-EUR")


def _in_euros(text: str) -> str:
    return _MICROS.sub(lambda m: _eur(int(m.group(1))), text)


def _placement(p: Row, e: Row) -> str:
    pools = len({a["pool_id"] for a in p["allocations"]})
    ranking = f", from ranking {p['ranking_id']}" if p.get("ranking_id") else ""
    unplaced = p.get("unplaced_vcpu", 0)
    if not pools:
        return (f"{p['workload_id']} asked for {p['requested_vcpu']:,} vCPU and none could be "
                f"placed: {unplaced:,} vCPU left to the fallback arbiter")  # fmt: skip
    left = f"; {unplaced:,} vCPU left to the fallback arbiter" if unplaced else ""
    return (f"{p['workload_id']} was placed: {p['requested_vcpu'] - unplaced:,} of "
            f"{p['requested_vcpu']:,} vCPU over {pools} pools (floor {p['floor_vcpu']:,} vCPU), "
            f"{_eur(p['premium_per_h_eur_micros'])}/h over the price-first "
            f"plan{ranking}{left}")  # fmt: skip


def _replacement(p: Row, e: Row) -> str:
    if not p["vcpu"] and not p["allocations"]:
        why = (p.get("caps_reason") or "").removeprefix("not replaced: ")
        return f"{p['replaces_instance_id']} was not replaced: {why or 'nothing asked for it'}"
    avoid = p["excluded_pool_ids"]
    avoiding = f", avoiding {len(avoid)} excluded pools" if avoid else ""
    return (f"a replacement of {p['vcpu']} {p['purchase_model']} vCPU was requested for "
            f"{p['replaces_instance_id']}{avoiding}")  # fmt: skip


def _fallback(p: Row, e: Row) -> str:
    head = f"fallback moved {p['vcpu']:,} vCPU of {p['workload_id']} to guaranteed capacity"
    spend, cap, reason = _eur(p["spend_eur_micros"]), _eur(p["cap_eur_micros"]), p["reason"]
    reason = _in_euros(reason)
    if p["kind"] == "floor_restore":
        return f"{head} to restore its floor, without asking (ADR-23): {reason}"
    if p["kind"] == "within_cap":
        return f"{head} within its cap: {spend} spent today of {cap} ({reason})"
    who = _name(p["approver"], "")
    if p.get("awaiting_approval"):
        paged = f"the approver {who} was paged" if who else "nobody was paged (no approver named)"
        return (f"{p['vcpu']:,} vCPU of {p['workload_id']} would take today's fallback spend "
                f"beyond its cap of {cap}: {paged}, and nothing is spent until the approver "
                f"answers ({reason})")  # fmt: skip
    approved = f"as {who} approved" if who else "as approved"
    return f"{head} beyond its cap {approved}: {spend} spent today against {cap} ({reason})"


def _drained(p: Row, e: Row) -> str:
    checks = "verified" if p["verified"] else "NOT verified"
    extra = ", over its budget" if p["overrun"] else ""
    local = ", after falling back to the local path" if p["fell_back_to_local"] else ""
    margin = p.get("deadline_margin_s")
    left = f", {margin:,.0f} s before the deadline" if margin is not None else ""
    return (f"the drain of {p['instance_id']} through {p['path']} finished in "
            f"{p['duration_s']:,.1f} s, {checks}{extra}{local}{left}")  # fmt: skip


def _wasted(p: Row, e: Row) -> str:
    hours = p["wasted_vcpu_s"] / 3600
    if hours == 0:
        return f"no work of {p['workload_id']} was lost with {p['instance_id']}"
    return (f"{hours:,.1f} vCPU-hours of {p['workload_id']}'s work on {p['instance_id']} were "
            "lost since its last checkpoint")  # fmt: skip


SENTENCES: dict[str, Callable[[Row, Row], str]] = {
    "instance_launched": lambda p, e: (
        f"{p['instance_id']} was launched in {p['pool_id']} ({p['vcpu']} {p['purchase_model']} "
        f"vCPU) for {p['workload_id']}"),
    "advisory": lambda p, e: (
        f"the provider advised that {p['instance_id']} in {p['pool_id']} may be reclaimed at "
        f"{_iso_us(p['expected_reclaim_at'])}{_wave(e)}"),
    "notice_received": lambda p, e: (
        f"a reclaim notice reached {p['instance_id']} through {p['source']}, "
        f"{(p['deadline_at'] - e['occurred_us']) / 1e6:,.0f} s before its deadline{_wave(e)}"),
    "drain_started": lambda p, e: (
        f"the agent started draining {p['instance_id']} through {p['path']} (on the "
        f"{p['trigger']}, budget {p['drain_budget_s']} s)"),
    "drain_completed": _drained,
    "checkpoint_written": lambda p, e: (
        f"{p['workload_id']} wrote checkpoint generation {p['generation']} from "
        f"{p['instance_id']} ({p['written_bytes'] / 1e9:,.2f} GB in {p['duration_s']:,.1f} s)"
        + (" (the final one, on the notice)" if p["final"] else "")),
    "instance_lost": lambda p, e: (
        f"{p['instance_id']} was lost "
        f"{'after its notice' if p['with_notice'] else 'without notice'}"
        f" ({p['reason'].replace('_', ' ')}){_wave(e)}"),
    "work_wasted": _wasted,
    "replacement_requested": _replacement,
    "placement_decided": _placement,
    "fallback_decided": _fallback,
    "instance_deleted": lambda p, e: (
        f"{p['instance_id']} was deleted by the {p['deleted_by']} ({p['principal']}): "
        f"{p['reason']}"),
    "capacity_claim_opened": lambda p, e: (
        f"{p['workload_id']} asked {p['scheduler']} cluster {p['cluster']} for "
        f"{p['requested_vcpu']:,} vCPU ({p['reason']})"),
    "capacity_claim_closed": lambda p, e: (
        f"the claim of {p['workload_id']} for {p['requested_vcpu']:,} vCPU ended "
        f"{p['outcome']} with {p['fulfilled_vcpu']:,} vCPU ({p['reason']})"),
}  # fmt: skip

_COLUMNS = (
    "event_id::text AS event_id, event_type, occurred_at, key, correlation_id, payload,"
    " (extract(epoch FROM occurred_at) * 1000000)::bigint AS occurred_us"
)
_OWN = (
    f"SELECT {_COLUMNS} FROM events WHERE event_id IN"
    " (SELECT event_id FROM instance_events WHERE instance_id = %s)"
)
_CAUSES = (
    "WITH RECURSIVE up(event_id, depth) AS ("
    " SELECT causation_id, 1 FROM events WHERE event_id = ANY(%s::uuid[])"
    " AND causation_id IS NOT NULL"
    " UNION SELECT e.causation_id, up.depth + 1 FROM events e"
    " JOIN up ON e.event_id = up.event_id WHERE e.causation_id IS NOT NULL AND up.depth < 50)"
    f" SELECT {_COLUMNS} FROM events WHERE event_id IN (SELECT event_id FROM up)"
)
_SUCCESSORS = (
    f"SELECT {_COLUMNS} FROM events WHERE causation_id = ANY(%s::uuid[])"
    " AND event_type = 'instance_launched'"
)


def why_instance(conn: psycopg.Connection[Row], instance_id: str) -> Row | None:
    """The instance's chain, oldest first; None if there is no such instance."""
    known = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM instances WHERE instance_id = %s) AS known", (instance_id,)
    ).fetchone()
    if not known or not known["known"]:
        return None
    own = conn.execute(_OWN, (instance_id,)).fetchall()
    launches = [r["event_id"] for r in own if r["event_type"] == "instance_launched"]
    causes = conn.execute(_CAUSES, (launches,)).fetchall() if launches else []
    replacements = [r["event_id"] for r in own if r["event_type"] == "replacement_requested"]
    successors = conn.execute(_SUCCESSORS, (replacements,)).fetchall()
    seen: dict[str, Row] = {}
    for r in (*causes, *own, *successors):
        seen.setdefault(r["event_id"], r)
    steps = []
    for r in sorted(seen.values(), key=lambda r: (r["occurred_at"], r["event_id"])):
        make = SENTENCES.get(r["event_type"])
        said = (make(r["payload"], r) if make is not None
                else f"{r['event_type'].replace('_', ' ')} ({r['key']})")  # fmt: skip
        steps.append({"at": _utc(r["occurred_at"]), "event_id": r["event_id"],
                      "event_type": r["event_type"], "sentence": said})  # fmt: skip
    return {"kind": "instance", "subject": instance_id, "steps": steps}


# -- metrics --------------------------------------------------------------------------------------


def _schema_facts() -> tuple[list[str], list[str]]:
    """The decision event types (the records on the decisions topic) and the fallback kinds."""
    decisions, kinds = [], []
    for record in envelope_schema()["fields"][-1]["type"]:
        if record.get("spotcap.topic") == "decisions":
            decisions.append(re.sub(r"(?<!^)(?=[A-Z])", "_", record["name"]).lower())
        for f in record["fields"]:
            t = f["type"]
            if isinstance(t, dict) and t.get("name") == "FallbackKind":
                kinds = list(t["symbols"])
    return sorted(decisions), kinds


DECISIONS, FALLBACK_KINDS = _schema_facts()
STATES = ("requested", "running", "advised", "noticed", "draining", "drained", "lost",
          "replaced", "deleted")  # fmt: skip
DRILL_RESULTS = ("passed", "refused", "notice_missing", "drain_late", "replacement_late")
DELAY_BUCKETS_S = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0)
_ACKNOWLEDGED = struct.Struct("<4sqqqqq?")


class Collector:
    """The store collector's families, read now."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        a = self.args
        up = GaugeMetricFamily("spotcap_store_up", "Whether the store answered this scrape (1) "
                               "or not (0).", labels=["store"])  # fmt: skip
        took = GaugeMetricFamily(
            "spotcap_store_read_duration_seconds",
            "How long reading the store's figures took in this scrape.",
            labels=["store"],
        )
        started = time.perf_counter()
        with psycopg.connect(a.dsn, autocommit=True, options=f"-c search_path={a.schema}") as c:
            families = list(_fleet_families(c))
            fleet_at = _positions(c.execute(
                "SELECT topic, partition, next_offset FROM consumed_offsets"
                " WHERE projection = 'fleet'").fetchall())  # fmt: skip
        up.add_metric(["fleet"], 1)
        took.add_metric(["fleet"], time.perf_counter() - started)
        yield from families
        started = time.perf_counter()
        ledger_at = _ledger_positions(Path(a.ledger))
        up.add_metric(["ledger"], 1)
        took.add_metric(["ledger"], time.perf_counter() - started)
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
        for projection, at in (("fleet", fleet_at), ("ledger", ledger_at)):
            for logical in ("lifecycle", "market", "demand", "decisions", "usage"):
                topic = f"{a.region}.{logical}"
                for partition, end in _end_offsets(Path(a.log) / topic).items():
                    done = at.get((topic, partition), 0)
                    total = sums.setdefault((projection, topic), [0, 0])
                    total[0] += max(end - done, 0)
                    total[1] += done
        for (projection, topic), (behind, done) in sorted(sums.items()):
            lag.add_metric([projection, topic], behind)
            applied.add_metric([projection, topic], done)
        yield lag
        yield applied
        dead = Path(a.log) / f"{a.region}.deadletter"
        if dead.is_dir():
            yield CounterMetricFamily(
                "spotcap_dead_letters",
                "Records written to the dead-letter topic (undecodable or failed inputs, each "
                "with its origin and reason).",
                value=sum(_end_offsets(dead).values()),
            )
        yield up
        yield took


def _positions(rows: Iterable[Sequence[Any]]) -> dict[tuple[str, int], int]:
    """(topic, partition, next offset) rows by topic and partition."""
    return {(str(t), int(p)): int(o) for t, p, o in rows}


def _ledger_positions(path: Path) -> dict[tuple[str, int], int]:
    import chdb.session

    session: Any = chdb.session.Session(str(path.resolve()))  # type: ignore[no-untyped-call]
    try:
        tables = session.query("SELECT name FROM system.tables WHERE database = 'spotcap'"
                               " AND name = 'consumed_offsets'", "JSON").bytes()  # fmt: skip
        if not json.loads(tables)["data"]:
            return {}
        found = session.query(
            "SELECT topic, partition, next_offset FROM spotcap.consumed_offsets FINAL"
            " WHERE projection_name = 'ledger'",
            "JSON",
        ).bytes()
        return _positions((r["topic"], r["partition"], r["next_offset"])
                          for r in json.loads(found)["data"])  # fmt: skip
    finally:
        session.close()


def _end_offsets(topic: Path) -> dict[int, int]:
    """Each partition's acknowledged end offset (0 where nothing was written); none for a
    topic the log does not have."""
    ends: dict[int, int] = {}
    if not topic.is_dir():
        return ends
    for part in sorted(p for p in topic.iterdir() if p.is_dir() and p.name.isdigit()):
        record = part / "acknowledged"
        end = 0
        if record.exists():
            _, _, _, first, _, last, acknowledged = _ACKNOWLEDGED.unpack_from(record.read_bytes())
            end = last if acknowledged else first
        ends[int(part.name)] = end
    return ends


def _fleet_families(c: psycopg.Connection[Any]) -> Iterator[Metric]:
    decisions = CounterMetricFamily(
        "spotcap_decisions",
        "Decision events applied to the fleet state, by kind (event type).",
        labels=["kind"],
    )
    counted = dict.fromkeys(DECISIONS, 0)
    for t, n in c.execute("SELECT event_type, count(*) FROM events WHERE event_type = ANY(%s)"
                          " GROUP BY event_type", (DECISIONS,)):  # fmt: skip
        counted[t] = n
    for kind, n in sorted(counted.items()):
        decisions.add_metric([kind], n)
    yield decisions
    (active,) = c.execute("SELECT count(*) FROM exclusions_active").fetchone() or (0,)
    yield GaugeMetricFamily(
        "spotcap_exclusions_active",
        "Pools excluded now (each exclusion names its evidence: /api/v1/exclusions?active=true).",
        value=active,
    )
    states = dict.fromkeys(STATES, 0)
    for state, n in c.execute("SELECT state, count(*) FROM instances GROUP BY state"):
        states[state] = n
    instances = GaugeMetricFamily(
        "spotcap_instances", "Instances by state in the fleet state.", labels=["state"]
    )
    for state, n in states.items():
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
    by_kind = {k: (0, 0) for k in FALLBACK_KINDS}
    for kind, n, eur in c.execute(
        "SELECT kind, sum(decisions)::bigint, sum(spend_eur_micros)::bigint"
        " FROM fallback_spend_by_authority GROUP BY kind"
    ):
        by_kind[kind] = (n, eur)
    for kind, (n, eur) in by_kind.items():
        fallbacks.add_metric([kind], n)
        spend.add_metric([kind], eur / 1_000_000)
    yield fallbacks
    yield spend
    drains = CounterMetricFamily(
        "spotcap_drains",
        "Drains completed, by path, whether the drain was verified and whether it overran its "
        "budget.",
        labels=["path", "verified", "overrun"],
    )
    for path, verified, overrun, n in c.execute(
        "SELECT drain_path, coalesce(drain_verified, false), coalesce(drain_overrun, false),"
        " count(*) FROM instances WHERE drained_event_id IS NOT NULL"
        " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
    ):
        drains.add_metric([path, str(verified).lower(), str(overrun).lower()], n)
    yield drains
    yield from _alarm_families(c)


def _alarm_families(c: psycopg.Connection[Any]) -> Iterator[Metric]:
    breakers = GaugeMetricFamily(
        "spotcap_breaker_open",
        "Whether the actuator's breaker is open (1) or closed (0), for every breaker it ever "
        "tripped (termination: mass termination; provider: failing launches).",
        labels=["breaker"],
    )
    newest = c.execute(
        "SELECT DISTINCT ON (payload->>'breaker') payload->>'breaker', event_type FROM journal"
        " WHERE event_type IN ('breaker_tripped', 'breaker_reset')"
        " ORDER BY payload->>'breaker', occurred_at DESC, recorded_at DESC"
    ).fetchall()
    for name, kind in sorted(newest):
        breakers.add_metric([name], 1.0 if kind == "breaker_tripped" else 0.0)
    yield breakers
    delays = [
        max(0.0, float(d))
        for (d,) in c.execute(
            "SELECT extract(epoch FROM x.recorded_at - max(e.recorded_at))"
            " FROM exclusions ex JOIN journal x ON x.event_id = ex.event_id"
            " JOIN journal e ON e.event_id = ANY(ex.evidence_event_ids)"
            " GROUP BY ex.event_id, x.recorded_at"
        )
    ]
    exclusion = HistogramMetricFamily(
        "spotcap_exclusion_delay_seconds",
        "Seconds from an exclusion's newest evidence event being recorded to the exclusion "
        "being recorded (ADR-07 promises 60 s).",
    )
    buckets = [(str(b), float(sum(d <= b for d in delays))) for b in DELAY_BUCKETS_S]
    exclusion.add_metric([], [*buckets, ("+Inf", float(len(delays)))], sum(delays))
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
    for w, s, k in c.execute(
        "SELECT DISTINCT ON (workload_id) workload_id, spend_eur_micros, cap_eur_micros"
        " FROM fallbacks WHERE (occurred_at AT TIME ZONE 'UTC')::date = ("
        "  SELECT max((occurred_at AT TIME ZONE 'UTC')::date) FROM fallbacks)"
        " ORDER BY workload_id, occurred_at DESC, event_id DESC"
    ):
        spend.add_metric([w], s / 1_000_000)
        cap.add_metric([w], k / 1_000_000)
    yield spend
    yield cap
    drills = CounterMetricFamily(
        "spotcap_drill_runs",
        "Daily drills (ADR-33) by pool and result: " + ", ".join(DRILL_RESULTS) + " (a "
        "refusal: a real wave, an open breaker or another drill running).",
        labels=["pool", "result"],
    )
    runs = {
        (pool, result): n
        for pool, result, n in c.execute(
            "SELECT key, CASE WHEN event_type = 'drill_refused' THEN 'refused'"
            " WHEN (payload->>'passed')::boolean THEN 'passed'"
            " WHEN (payload->>'noticed_count')::int < (payload->>'reclaimed_count')::int"
            "  THEN 'notice_missing'"
            " WHEN (payload->>'drain_verified_count')::int >= (payload->>'noticed_count')::int"
            "  THEN 'replacement_late' ELSE 'drain_late' END, count(*) FROM events"
            " WHERE event_type IN ('drill_finished', 'drill_refused') GROUP BY 1, 2"
        )
    }
    reclaimable = c.execute("SELECT pool_id FROM pools WHERE purchase_model = 'reclaimable'")
    for pool in sorted({p for (p,) in reclaimable} | {p for p, _ in runs}):
        for result in DRILL_RESULTS:
            drills.add_metric([pool, result], runs.get((pool, result), 0))
    yield drills
    overruns = CounterMetricFamily(
        "spotcap_drain_overruns",
        "Drains that took longer than the drain budget of the workload's contract, by workload "
        "(every workload with a contract).",
        labels=["workload"],
    )
    for w, n in sorted(c.execute(
        "SELECT w.workload_id, count(i.instance_id) FROM (SELECT DISTINCT workload_id"
        " FROM contracts) w LEFT JOIN instances i ON i.workload_id = w.workload_id"
        " AND i.drained_event_id IS NOT NULL AND i.drain_overrun GROUP BY 1"
    ).fetchall()):  # fmt: skip
        overruns.add_metric([w], n)
    yield overruns


# -- the app --------------------------------------------------------------------------------------


def app_for(args: argparse.Namespace) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    options = f"-c search_path={args.schema}"

    def rows(query: str, params: tuple[Any, ...]) -> list[Row]:
        with psycopg.connect(args.dsn, autocommit=True, options=options,
                             row_factory=dict_row) as conn:  # fmt: skip
            return [_json_row(r) for r in conn.execute(query, params).fetchall()]

    @app.get("/api/v1/pools")
    def pools(limit: int = 100) -> Response:
        return JSONResponse(rows(
            "SELECT pool_id, hall, sku_family, purchase_model, correlation_group, capacity_vcpu,"
            " rank, pool_count, score, price_per_vcpu_h_eur_micros,"
            " guaranteed_price_per_vcpu_h_eur_micros, forward_available_vcpu, excluded,"
            " exclusion_changed_at, ranked_at FROM pools ORDER BY rank NULLS LAST, pool_id"
            " LIMIT %s", (limit,)))  # fmt: skip

    @app.get("/api/v1/instances")
    def instances(limit: int = 100) -> Response:
        return JSONResponse(rows(
            "SELECT instance_id, state, workload_id, pool_id, vcpu, purchase_model, launched_at,"
            " noticed_at, drain_path, drain_verified, lost_at, loss_reason, deleted_at,"
            " last_event_at FROM instances ORDER BY last_event_at DESC, instance_id LIMIT %s",
            (limit,)))  # fmt: skip

    @app.get("/api/v1/why/{ident}")
    def why(ident: str) -> Response:
        with psycopg.connect(args.dsn, autocommit=True, options=options,
                             row_factory=dict_row) as conn:  # fmt: skip
            answer = why_instance(conn, ident)
        if answer is None:
            return JSONResponse({"detail": f"no instance {ident!r}"}, status_code=404)
        return JSONResponse(answer)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(args))

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--ledger", required=True, help="the embedded ledger's folder")
    parser.add_argument("--log", required=True, help="the embedded log's folder")
    parser.add_argument("--region", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    # Made with the protocol number, as `spotcap serve` makes it: asyncio sets TCP_NODELAY only
    # on connections of such a socket.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, 0))
    sock.listen(128)
    host, port = sock.getsockname()[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    config = uvicorn.Config(app_for(args), log_level="warning", lifespan="off",
                            server_header=False)  # fmt: skip
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
