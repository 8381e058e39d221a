"""The fleet state's bare reference for `bench/projections.py`: the same work as `FleetWriter`
with the libraries alone (fastavro, psycopg), written plainly over fastavro's dicts.

Per batch, in one transaction (asynchronous commit, as the writer's): the journal rows and the
rankings rows COPYed into the projection's own tables (the same migrations: the same columns,
keys and indexes); the state rows of the batch (pools, instances, workloads, claims) merged in
Python per key and per group of columns (the latest or earliest version wins) and then into
the stored ones by an ``INSERT ... ON CONFLICT DO UPDATE`` per table (written here from the
tables' definitions: per group of columns the staged row wins where the stored one is unset or
has the worse version, shared columns keep the stored value unless it is null, the instance's
state and the pool's exclusion computed over the merged values); the append rows (exclusions,
readmissions, contracts, placements and their allocations, replacements, fallbacks, the outbox's
audit records) COPYed; the batch's offsets upserted. Of the market feeds and the rankings only
each pool's latest of a batch moves the pool's row, as in the projection.

`checksums` reads every table back (outside the clocks) so that the bench can show both sides
wrote the same rows.

No module of spotcap's but the tables' definitions (`projections.postgres.schema`: names,
columns, keys and groups, read at import) and the envelope's schema (through
`bench/log_bare.py`); the records are the log's, read through their topic, partition, offset
and value alone.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, Protocol

import fastavro
import psycopg
from psycopg import sql

from bench import log_bare
from projections.postgres import schema as s

Row = dict[str, Any]


class Record(Protocol):
    """What the bare loop reads of a log record."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def value(self) -> bytes | None: ...


class Table(NamedTuple):
    """A state table as its definition gives it: per group, its version columns, the columns
    it sets and whether the latest version wins (else the earliest)."""

    name: str
    key: str
    shared: tuple[str, ...]
    groups: tuple[tuple[tuple[str, ...], tuple[str, ...], bool], ...]
    columns: tuple[str, ...]


TABLES = tuple(
    Table(t.name, t.key, t.shared,
          tuple((g.version, g.columns, g.keep == "latest") for g in t.groups), t.columns)
    for t in s.STATE_TABLES
)  # fmt: skip
_SCHEMA = log_bare.parsed_schema()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UNJOURNALED = ("rate_card", "forward_capacity", "usage_interval")
_LATEST_ONLY = ("rate_card", "forward_capacity", "pool_ranked")
_SORTED = json.JSONEncoder(sort_keys=True)
_RECORD = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
_JOURNAL = json.JSONEncoder(separators=(",", ":"))


def decode(batch: Sequence[Record]) -> list[tuple[Record, Row]]:
    """fastavro's schemaless reader past the single-object header: dicts, the payload as
    (record name, fields)."""
    read, schema = fastavro.schemaless_reader, _SCHEMA
    out = []
    for r in batch:
        stream = io.BytesIO(r.value or b"")
        stream.seek(10)
        record: Any = read(stream, schema, None, return_record_name=True)
        out.append((r, record))
    return out


@functools.lru_cache(maxsize=4096)
def stamp(micros: int) -> str:
    """timestamptz text, fixed width (so that versions compare as text as they do as times)."""
    d = _EPOCH + timedelta(microseconds=micros)
    return f"{d:%Y-%m-%d %H:%M:%S}.{d.microsecond:06d}+00"


def _or_none(micros: int | None) -> str | None:
    return None if micros is None else stamp(micros)


def _iso(micros: int) -> str:
    return (_EPOCH + timedelta(microseconds=micros)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _eur(micros: int) -> str:
    cents = (abs(micros) + 5_000) // 10_000
    sign = "-" if micros < 0 and cents else ""
    return f"{sign}€{cents // 100:,}.{cents % 100:02d}"


def _uuids(values: Iterable[str]) -> str:
    return "{" + ",".join(values) + "}"


# -- the state rows of one event: (table, row) ---------------------------------------------------


def _instance_row(e: Row, p: Row, at: str, instance_id: str, **facts: Any) -> tuple[str, Row]:
    return "instances", {"instance_id": instance_id, "last_event_at": at, **facts}


def _states(t: str, e: Row, p: Row) -> list[tuple[str, Row]]:
    """The state facts of one event."""
    i, at = e["event_id"], stamp(e["occurred_at"])
    if t == "instance_launched":
        return [_instance_row(e, p, at, p["instance_id"], workload_id=p["workload_id"],
                              pool_id=p["pool_id"], vcpu=p["vcpu"],
                              purchase_model=p["purchase_model"], launched_at=at,
                              launch_event_id=i, tags=_SORTED.encode(p["tags"]))]  # fmt: skip
    if t == "advisory":
        return [_instance_row(e, p, at, p["instance_id"], pool_id=p["pool_id"], advised_at=at,
                              advisory_event_id=i,
                              expected_reclaim_at=stamp(p["expected_reclaim_at"]))]  # fmt: skip
    if t == "notice_received":
        return [_instance_row(e, p, at, p["instance_id"], pool_id=p["pool_id"],
                              workload_id=p["workload_id"], noticed_at=at, notice_event_id=i,
                              deadline_at=stamp(p["deadline_at"]),
                              notice_source=p["source"])]  # fmt: skip
    if t == "drain_started":
        return [_instance_row(e, p, at, p["instance_id"], workload_id=p["workload_id"],
                              drain_started_at=at, drain_started_event_id=i, drain_path=p["path"],
                              drain_trigger=p["trigger"],
                              drain_budget_s=p["drain_budget_s"])]  # fmt: skip
    if t == "drain_completed":
        return [_instance_row(e, p, at, p["instance_id"], workload_id=p["workload_id"],
                              drained_at=at, drained_event_id=i, drain_duration_s=p["duration_s"],
                              drain_verified=p["verified"], drain_overrun=p["overrun"],
                              drain_fell_back_to_local=p["fell_back_to_local"],
                              drain_deadline_margin_s=p["deadline_margin_s"])]  # fmt: skip
    if t == "checkpoint_written":
        return [_instance_row(e, p, at, p["instance_id"], workload_id=p["workload_id"],
                              checkpoint_generation=p["generation"], checkpoint_at=at,
                              checkpoint_event_id=i, checkpoint_bytes=p["written_bytes"],
                              checkpoint_final=p["final"])]  # fmt: skip
    if t == "instance_lost":
        return [_instance_row(e, p, at, p["instance_id"], workload_id=p["workload_id"],
                              pool_id=p["pool_id"], vcpu=p["vcpu"],
                              purchase_model=p["purchase_model"], lost_at=at, lost_event_id=i,
                              loss_reason=p["reason"],
                              lost_with_notice=p["with_notice"])]  # fmt: skip
    if t == "work_wasted":
        return [_instance_row(e, p, at, p["instance_id"], workload_id=p["workload_id"],
                              pool_id=p["pool_id"], wasted_at=at, wasted_event_id=i,
                              wasted_vcpu_s=p["wasted_vcpu_s"])]  # fmt: skip
    if t == "instance_deleted":
        return [_instance_row(e, p, at, p["instance_id"], workload_id=p["workload_id"],
                              pool_id=p["pool_id"], deleted_at=at, deleted_event_id=i,
                              deleted_by=p["deleted_by"], deleted_principal=p["principal"],
                              deleted_reason=p["reason"])]  # fmt: skip
    if t == "replacement_requested":
        return [_instance_row(e, p, at, p["replaces_instance_id"], workload_id=p["workload_id"],
                              replacement_at=at, replacement_event_id=i)]  # fmt: skip
    if t == "pool_registered":
        return [("pools", {"pool_id": p["pool_id"], "registered_at": at,
                           "registered_event_id": i, "sku_family": p["sku_family"],
                           "instance_vcpu": p["instance_vcpu"], "hall": p["hall"],
                           "host_aggregate": p["host_aggregate"],
                           "purchase_model": p["purchase_model"],
                           "correlation_group": p["correlation_group"],
                           "capacity_vcpu": p["capacity_vcpu"],
                           "attributes": _SORTED.encode(p["attributes"])})]  # fmt: skip
    if t == "rate_card":
        return [("pools", {"pool_id": p["pool_id"], "rate_valid_from": stamp(p["valid_from_at"]),
                           "rate_event_id": i, "rate_valid_until": stamp(p["valid_until_at"]),
                           "price_per_vcpu_h_eur_micros": p["price_per_vcpu_h_eur_micros"],
                           "guaranteed_price_per_vcpu_h_eur_micros":
                               p["guaranteed_price_per_vcpu_h_eur_micros"]})]  # fmt: skip
    if t == "forward_capacity":
        return [("pools", {"pool_id": p["pool_id"], "forward_at": at, "forward_event_id": i,
                           "forward_available_vcpu": p["available_vcpu"],
                           "forward_horizon_s": p["horizon_s"]})]  # fmt: skip
    if t == "pool_ranked":
        return [("pools", {"pool_id": p["pool_id"], "ranked_at": at, "rank_event_id": i,
                           "rank": p["rank"], "pool_count": p["pool_count"], "score": p["score"],
                           "ranking_id": p["ranking_id"]})]  # fmt: skip
    if t in ("pool_excluded", "pool_readmitted"):
        return [("pools", {"pool_id": p["pool_id"], "exclusion_changed_at": at,
                           "exclusion_event_id": i,
                           "excluded": t == "pool_excluded"})]  # fmt: skip
    if t == "contract_published":
        fields = {name: p[name] for name in s.CONTRACT_FIELDS}
        fields["deadline_at"] = _or_none(p["deadline_at"])
        return [("workloads", {"workload_id": p["workload_id"],
                               "contract_version": p["contract_version"], "published_at": at,
                               "contract_event_id": i, **fields})]  # fmt: skip
    if t == "capacity_claim_opened":
        return [("claims", {"claim_id": p["claim_id"], "workload_id": p["workload_id"],
                            "scheduler": p["scheduler"], "requested_vcpu": p["requested_vcpu"],
                            "opened_at": at, "opened_event_id": i, "cluster": p["cluster"],
                            "open_reason": p["reason"]})]  # fmt: skip
    if t == "capacity_claim_closed":
        return [("claims", {"claim_id": p["claim_id"], "workload_id": p["workload_id"],
                            "scheduler": p["scheduler"], "requested_vcpu": p["requested_vcpu"],
                            "closed_at": at, "closed_event_id": i,
                            "fulfilled_vcpu": p["fulfilled_vcpu"], "outcome": p["outcome"],
                            "close_reason": p["reason"]})]  # fmt: skip
    return []


# -- the append rows of one event: (table, row in its columns' order) ----------------------------


def _audit(t: str, e: Row, p: Row) -> tuple[str, str] | None:
    """The action and summary of a capacity action, or None."""
    if t == "placement_decided":
        pools = len({a["pool_id"] for a in p["allocations"]})
        return "place", (
            f"placed {p['requested_vcpu']:,} vCPU of {p['workload_id']} over {pools} pools "
            f"(floor {p['floor_vcpu']:,} vCPU), premium {_eur(p['premium_per_h_eur_micros'])}/h"
        )
    if t == "replacement_requested":
        return "replace", (
            f"requested {p['vcpu']:,} {p['purchase_model']} vCPU to replace "
            f"{p['replaces_instance_id']}"
        )
    if t == "fallback_decided":
        return "fallback", (
            f"fallback ({p['kind']}) of {p['vcpu']:,} vCPU for {p['workload_id']}: spend today "
            f"{_eur(p['spend_eur_micros'])} of a {_eur(p['cap_eur_micros'])} cap, "
            f"approver {p['approver']}"
        )
    if t == "fallback_returned":
        return "fallback_return", (
            f"returned {p['vcpu']:,} vCPU of {p['workload_id']} to reclaimable after "
            f"{p['dwell_s']:,} s"
        )
    if t == "fallback_reviewed":
        return "fallback_review", (
            f"{p['approver']} {p['outcome']} {p['vcpu']:,} vCPU and "
            f"{_eur(p['approved_spend_eur_micros'])} of fallback for {p['workload_id']}"
        )
    if t == "instance_launched":
        return "launch", (
            f"launched {p['instance_id']} ({p['vcpu']} {p['purchase_model']} vCPU) in "
            f"{p['pool_id']} for {p['workload_id']}"
        )
    if t == "instance_deleted":
        return "terminate", (
            f"deleted {p['instance_id']} ({p['deleted_by']} {p['principal']}): {p['reason']}"
        )
    if t == "launch_failed":
        retry = ", will retry" if p["retryable"] else ""
        return "launch_failed", (
            f"launch of {p['vcpu']} {p['purchase_model']} vCPU in {p['pool_id']} for "
            f"{p['workload_id']} failed ({p['error_class']}{retry})"
        )
    if t == "breaker_tripped":
        return "breaker_trip", (
            f"breaker {p['breaker']} tripped: {p['terminations_observed']} terminations in "
            f"{p['window_s']} s (threshold {p['threshold']})"
        )
    if t == "breaker_reset":
        return "breaker_reset", f"breaker {p['breaker']} reset after {p['open_s']} s open"
    return None


def _actor(t: str, e: Row, p: Row) -> str:
    if t == "fallback_reviewed":
        return f"approver:{p['approver']}" + ("" if p["signature"] else " (unsigned)")
    if t == "instance_deleted" and p["principal"]:
        return f"{p['deleted_by']}:{p['principal']}"
    if t == "instance_launched":
        owner = p["tags"].get("spotcap.io/owner")
        if owner:
            return f"orchestrator:{owner}"
    return f"producer:{e['producer']}"


def _appends(t: str, e: Row, p: Row) -> list[tuple[str, tuple[Any, ...]]]:
    i, at = e["event_id"], stamp(e["occurred_at"])
    out: list[tuple[str, tuple[Any, ...]]] = []
    if t == "replacement_requested":
        replaced = (i, p["workload_id"], p["replaces_instance_id"], p["vcpu"],
                    p["purchase_model"], list(p["excluded_pool_ids"]), at)  # fmt: skip
        out.append(("replacements", replaced))
    elif t == "pool_excluded":
        out.append(("exclusions", (i, p["pool_id"], p["reason"],
                                   p["observed_interruption_per_h"],
                                   p["expected_interruption_per_h"], p["reclaimed_instances"],
                                   stamp(p["window_start_at"]), stamp(p["window_end_at"]),
                                   _uuids(p["evidence_event_ids"]), at)))  # fmt: skip
    elif t == "pool_readmitted":
        out.append(("readmissions", (i, p["pool_id"], p["exclusion_event_id"], p["healthy_s"],
                                     p["observed_interruption_per_h"],
                                     p["expected_interruption_per_h"],
                                     _uuids(p["evidence_event_ids"]), at)))  # fmt: skip
    elif t == "contract_published":
        out.append(("contracts", (i, p["workload_id"], p["contract_version"], _SORTED.encode(p),
                                  at)))  # fmt: skip
    elif t == "placement_decided":
        out.append(("placements", (i, p["workload_id"], p["requested_vcpu"], p["floor_vcpu"],
                                   p["cost_per_h_eur_micros"],
                                   p["price_first_cost_per_h_eur_micros"],
                                   p["premium_per_h_eur_micros"], list(p["excluded_pool_ids"]),
                                   p["claim_id"], p["ranking_id"], at)))  # fmt: skip
        vcpu: dict[tuple[str, str], int] = {}
        for a in p["allocations"]:
            k = (a["pool_id"], a["purchase_model"])
            vcpu[k] = vcpu.get(k, 0) + a["vcpu"]
        for (pool_id, model), total in sorted(vcpu.items()):
            out.append(("placement_allocations", (i, pool_id, model, total)))
    elif t == "fallback_decided":
        out.append(("fallbacks", (i, p["workload_id"], p["kind"], p["vcpu"],
                                  p["spend_eur_micros"], p["cap_eur_micros"], p["approver"],
                                  p["priority"], p["reason"], at)))  # fmt: skip
    elif t == "fallback_returned":
        out.append(("fallback_returns", (i, p["workload_id"], p["vcpu"], p["dwell_s"],
                                         p["fallback_event_id"], at)))  # fmt: skip
    elif t == "fallback_reviewed":
        until = _or_none(p["valid_until_at"])
        reviewed = (i, p["workload_id"], p["approver"], p["outcome"], p["vcpu"],
                    p["approved_spend_eur_micros"], until, p["note"], at)  # fmt: skip
        out.append(("fallback_reviews", reviewed))
    audit = _audit(t, e, p)
    if audit is not None:
        action, summary = audit
        workload = p.get("workload_id")
        workload = workload if isinstance(workload, str) else None
        record = {
            "version": 2, "action_id": i, "action": action, "summary": summary, "event_id": i,
            "event_type": t, "occurred_at": _iso(e["occurred_at"]), "region": e["region"],
            "workload_id": workload, "causation_id": e["causation_id"],
            "correlation_id": e["correlation_id"], "producer": e["producer"],
            "actor": _actor(t, e, p), "detail": p,
        }  # fmt: skip
        out.append(("outbox", (i, i, action, workload, at, _RECORD.encode(record))))
    return out


# -- merging a batch's state rows ------------------------------------------------------------------


def _merge(table: Table, a: Row, b: Row) -> Row:
    """Per group, the better version of the two rows; shared columns from whichever has them."""
    merged = {table.key: b[table.key]}
    for column in table.shared:
        value = a.get(column)
        merged[column] = value if value is not None else b.get(column)
    for version, columns, latest in table.groups:
        va = tuple(a.get(v) for v in version)
        vb = tuple(b.get(v) for v in version)
        if None in vb:
            if None in va:
                continue
            winner = a
        elif None in va:
            winner = b
        elif latest:
            winner = a if va >= vb else b
        else:
            winner = a if va <= vb else b
        for column in (*version, *columns):
            merged[column] = winner.get(column)
    return merged


def _instance_state(r: Row) -> str:
    lost, deleted = r.get("lost_event_id") is not None, r.get("deleted_event_id") is not None
    if deleted and (
        not lost or (r["deleted_at"], r["deleted_event_id"]) <= (r["lost_at"], r["lost_event_id"])
    ):
        return "deleted"
    if lost:
        return "replaced" if r.get("replacement_event_id") is not None else "lost"
    for column, state in (
        ("drained_event_id", "drained"),
        ("drain_started_event_id", "draining"),
        ("notice_event_id", "noticed"),
        ("advisory_event_id", "advised"),
        ("launch_event_id", "running"),
    ):
        if r.get(column) is not None:
            return state
    return "requested"


def _finish(table: Table, r: Row) -> tuple[Any, ...]:
    if table.name == "instances":
        r["state"] = _instance_state(r)
    elif table.name == "pools":
        r["excluded"] = bool(r.get("excluded"))
    return tuple(r.get(c) for c in table.columns)


# -- merging a batch's state rows into the stored ones, in SQL ------------------------------------


def _q(name: str) -> str:
    return f'"{name}"'


def _merged_sql(table: Table) -> dict[str, str]:
    """Each non-key column's merged value over ``t`` (stored) and ``EXCLUDED`` (staged): the
    same rule as `_merge`, a tie keeping the stored row."""
    out = {c: f"COALESCE(t.{_q(c)}, EXCLUDED.{_q(c)})" for c in table.shared}
    for version, columns, latest in table.groups:
        stored_set = " AND ".join(f"t.{_q(v)} IS NOT NULL" for v in version)
        staged_set = " AND ".join(f"EXCLUDED.{_q(v)} IS NOT NULL" for v in version)
        staged = "(" + ", ".join(f"EXCLUDED.{_q(v)}" for v in version) + ")"
        stored = "(" + ", ".join(f"t.{_q(v)}" for v in version) + ")"
        better = ">" if latest else "<"
        wins = f"NOT ({stored_set}) OR (({staged_set}) AND {staged} {better} {stored})"
        for c in (*version, *columns):
            out[c] = f"CASE WHEN {wins} THEN EXCLUDED.{_q(c)} ELSE t.{_q(c)} END"
    return out


def _instance_state_sql(m: dict[str, str]) -> str:
    """`_instance_state` over the merged values."""

    def isset(column: str) -> str:
        return f"({m[column]}) IS NOT NULL"

    deleted_first = (f"(({m['deleted_at']}), ({m['deleted_event_id']})) <= "
                     f"(({m['lost_at']}), ({m['lost_event_id']}))")  # fmt: skip
    return (
        f"CASE WHEN {isset('deleted_event_id')} AND (NOT {isset('lost_event_id')} OR "
        f"{deleted_first}) THEN 'deleted'"
        f" WHEN {isset('lost_event_id')} THEN CASE WHEN {isset('replacement_event_id')}"
        " THEN 'replaced' ELSE 'lost' END"
        f" WHEN {isset('drained_event_id')} THEN 'drained'"
        f" WHEN {isset('drain_started_event_id')} THEN 'draining'"
        f" WHEN {isset('notice_event_id')} THEN 'noticed'"
        f" WHEN {isset('advisory_event_id')} THEN 'advised'"
        f" WHEN {isset('launch_event_id')} THEN 'running'"
        " ELSE 'requested' END"
    )


def upsert_sql(table: Table) -> str:
    """The staged rows of `table` (``stage_<name>``) into it, each merged into the stored row
    of its key; the rows locked in the key's order."""
    merged = _merged_sql(table)
    if table.name == "instances":
        merged["state"] = _instance_state_sql(merged)
    elif table.name == "pools":
        merged["excluded"] = f"COALESCE({merged['excluded']}, false)"
    columns = ", ".join(map(_q, table.columns))
    sets = ", ".join(f"{_q(c)} = {merged[c]}" for c in table.columns if c != table.key)
    return (
        f"INSERT INTO {_q(table.name)} AS t ({columns}) SELECT {columns} FROM "
        f"{_q('stage_' + table.name)} ORDER BY {_q(table.key)} "
        f"ON CONFLICT ({_q(table.key)}) DO UPDATE SET {sets}"
    )


# -- the loop ------------------------------------------------------------------------------------


class BareFleet:
    """The fleet state written with psycopg alone, into `schema` (already migrated)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.tables = {t.name: t for t in TABLES}
        self.appends = {t.name: t.columns for t in s.APPEND_TABLES}
        self.upserts = {t.name: upsert_sql(t) for t in TABLES}
        for t in TABLES:
            conn.execute(
                sql.SQL(
                    "CREATE TEMP TABLE IF NOT EXISTS {} ON COMMIT DELETE ROWS AS "
                    "SELECT * FROM {} WITH NO DATA"
                ).format(sql.Identifier(f"stage_{t.name}"), sql.Identifier(t.name))
            )

    def _copy(self, cur: psycopg.Cursor[Any], table: str, columns: Iterable[str],
              rows: Iterable[tuple[Any, ...]]) -> None:  # fmt: skip
        stmt = sql.SQL("COPY {} ({}) FROM STDIN").format(
            sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns))
        )
        with cur.copy(stmt) as copy:
            for row in rows:
                copy.write_row(row)

    def write(self, batch: Sequence[Record]) -> None:
        unique: dict[str, tuple[Record, Row]] = {}
        for r, e in decode(batch):
            unique.setdefault(e["event_id"], (r, e))
        journal, rankings = [], []
        states: dict[str, dict[str, Row]] = {name: {} for name in self.tables}
        appends: dict[str, list[tuple[Any, ...]]] = {}
        latest: dict[str, dict[str, tuple[tuple[int, str], Row]]] = {t: {} for t in _LATEST_ONLY}
        offsets: dict[tuple[str, int], int] = {}
        for r, e in unique.values():
            t, (_, p) = e["event_type"], e["payload"]
            tp = (r.topic, r.partition)
            offsets[tp] = max(offsets.get(tp, 0), r.offset + 1)
            if t == "pool_ranked":
                rankings.append((
                    e["event_id"], p["ranking_id"], p["pool_id"], p["rank"], p["pool_count"],
                    p["score"], p["available_vcpu"], p["observed_interruption_per_h"],
                    p["price_per_vcpu_h_eur_micros"], p["correlation_group"], p["window_s"],
                    _uuids(p["input_event_ids"]), stamp(e["occurred_at"]), e["key"],
                    e["causation_id"], e["correlation_id"], stamp(e["recorded_at"]),
                    e["producer"], r.topic, r.partition, r.offset,
                    p["guaranteed_price_per_vcpu_h_eur_micros"],
                ))  # fmt: skip
            elif t not in _UNJOURNALED:
                journal.append((
                    e["event_id"], t, stamp(e["occurred_at"]), stamp(e["recorded_at"]), e["key"],
                    e["causation_id"], e["correlation_id"], e["producer"], r.topic, r.partition,
                    r.offset, _JOURNAL.encode(p),
                ))  # fmt: skip
            kept = latest.get(t)
            if kept is not None:  # only each pool's latest of the batch
                key = p["pool_id"] if t == "pool_ranked" else e["key"]
                version = (p["valid_from_at"] if t == "rate_card" else e["occurred_at"],
                           e["event_id"])  # fmt: skip
                other = kept.get(key)
                if other is None or version > other[0]:
                    kept[key] = (version, e)
                continue
            self._map(t, e, p, states, appends)
        for t in _LATEST_ONLY:
            for _, e in latest[t].values():
                self._map(t, e, e["payload"][1], states, appends)
        conn = self.conn
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SET LOCAL synchronous_commit = off")
            self._copy(cur, "journal", s.EVENTS.columns, journal)
            self._copy(cur, "rankings", s.RANKINGS.columns, rankings)
            for name, rows in states.items():
                if rows:
                    table = self.tables[name]
                    finished = (_finish(table, rows[k]) for k in sorted(rows))
                    self._copy(cur, f"stage_{name}", table.columns, finished)
                    cur.execute(self.upserts[name].encode())
            for name, tuples in appends.items():
                self._copy(cur, name, self.appends[name], tuples)
            cur.executemany(
                "INSERT INTO consumed_offsets (projection, topic, partition, next_offset) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (projection, topic, partition) "
                "DO UPDATE SET next_offset = EXCLUDED.next_offset",
                [("fleet", t, p, o) for (t, p), o in sorted(offsets.items())],
            )

    def _map(self, t: str, e: Row, p: Row, states: dict[str, dict[str, Row]],
             appends: dict[str, list[tuple[Any, ...]]]) -> None:  # fmt: skip
        for name, row in _states(t, e, p):
            rows, table = states[name], self.tables[name]
            key = row[table.key]
            stored = rows.get(key)
            rows[key] = row if stored is None else _merge(table, stored, row)
        for name, values in _appends(t, e, p):
            appends.setdefault(name, []).append(values)


def checksums(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, str]]:
    """Each fleet table's rows and an md5 over them in a fixed order (what both sides wrote)."""
    names = [t.name for t in s.APPEND_TABLES] + [t.name for t in s.STATE_TABLES]
    names.append("consumed_offsets")
    out = {}
    for name in names:
        ident = sql.Identifier(name)
        query = sql.SQL(
            "SELECT count(*), md5(coalesce(string_agg(x, '|' ORDER BY x), ''))"
            " FROM (SELECT t::text AS x FROM {} AS t) AS r"
        ).format(ident)
        row = conn.execute(query).fetchone()
        assert row is not None
        out[name] = (int(row[0]), str(row[1]))
    return out


WriteBatch = Callable[[Sequence[Record]], None]
