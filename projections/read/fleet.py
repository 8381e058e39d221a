"""SRE queries over the fleet state (PostgreSQL): rows as dicts, newest or best first."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.rows import dict_row

from projections.postgres.connection import Connection

Row = dict[str, Any]
DEFAULT_LIMIT = 200


def _rows(conn: Connection, query: sql.SQL | sql.Composed, params: list[Any]) -> list[Row]:
    with conn.cursor(row_factory=dict_row) as cur:
        return list(cur.execute(query, params).fetchall())


def _where(conditions: list[tuple[str, Any]]) -> tuple[sql.Composed, list[Any]]:
    present = [(c, v) for c, v in conditions if v is not None]
    if not present:
        return sql.Composed([]), []
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(sql.SQL(c) for c, _ in present), [
        v for _, v in present
    ]


def pools(conn: Connection, *, pool: str | None = None, excluded: bool | None = None,
          limit: int = DEFAULT_LIMIT) -> list[Row]:  # fmt: skip
    """Pools by rank (unranked last): rate, forward capacity, exclusion."""
    where, params = _where([("pool_id = %s", pool), ("excluded = %s", excluded)])
    query = sql.SQL(
        "SELECT pool_id, hall, sku_family, purchase_model, correlation_group, capacity_vcpu,"
        " rank, pool_count, score, price_per_vcpu_h_eur_micros,"
        " guaranteed_price_per_vcpu_h_eur_micros, forward_available_vcpu, excluded,"
        " exclusion_changed_at, ranked_at FROM pools{} ORDER BY rank NULLS LAST, pool_id LIMIT %s"
    ).format(where)
    return _rows(conn, query, [*params, limit])


def rankings(conn: Connection, *, pool: str | None = None, since: datetime | None = None,
             limit: int = DEFAULT_LIMIT) -> list[Row]:  # fmt: skip
    """The latest ranking (or a pool's rankings since a time), with its inputs."""
    if pool is None and since is None:
        latest = sql.SQL(
            "SELECT ranking_id, pool_id, rank, pool_count, score, available_vcpu,"
            " observed_interruption_per_h, price_per_vcpu_h_eur_micros, correlation_group,"
            " cardinality(input_event_ids) AS inputs, occurred_at, event_id FROM rankings"
            " WHERE ranking_id = (SELECT ranking_id FROM rankings ORDER BY occurred_at DESC,"
            " event_id DESC LIMIT 1) ORDER BY rank LIMIT %s"
        )
        return _rows(conn, latest, [limit])
    where, params = _where([("pool_id = %s", pool), ("occurred_at >= %s", since)])
    query = sql.SQL(
        "SELECT ranking_id, pool_id, rank, pool_count, score, available_vcpu,"
        " observed_interruption_per_h, price_per_vcpu_h_eur_micros, correlation_group,"
        " cardinality(input_event_ids) AS inputs, occurred_at, event_id FROM rankings{}"
        " ORDER BY occurred_at DESC, rank LIMIT %s"
    ).format(where)
    return _rows(conn, query, [*params, limit])


def exclusions(conn: Connection, *, pool: str | None = None, active: bool = False,
               since: datetime | None = None, limit: int = DEFAULT_LIMIT) -> list[Row]:  # fmt: skip
    """Exclusions with their evidence and readmission, newest first."""
    view = "exclusions_active" if active else "exclusion_history"
    where, params = _where([("pool_id = %s", pool), ("excluded_at >= %s", since)])
    query = sql.SQL(
        "SELECT event_id, pool_id, reason, observed_interruption_per_h,"
        " expected_interruption_per_h, reclaimed_instances, excluded_at, readmitted_at,"
        " readmission_event_id, evidence_event_ids FROM {}{} ORDER BY excluded_at DESC LIMIT %s"
    ).format(sql.Identifier(view), where)
    return _rows(conn, query, [*params, limit])


def instances(conn: Connection, *, workload: str | None = None, pool: str | None = None,
              state: str | None = None, since: datetime | None = None,
              limit: int = DEFAULT_LIMIT) -> list[Row]:  # fmt: skip
    """Instances, most recently touched first."""
    where, params = _where(
        [("workload_id = %s", workload), ("pool_id = %s", pool), ("state = %s", state),
         ("last_event_at >= %s", since)]
    )  # fmt: skip
    query = sql.SQL(
        "SELECT instance_id, state, workload_id, pool_id, vcpu, purchase_model, launched_at,"
        " noticed_at, drain_path, drain_verified, lost_at, loss_reason, deleted_at,"
        " last_event_at FROM instances{} ORDER BY last_event_at DESC, instance_id LIMIT %s"
    ).format(where)
    return _rows(conn, query, [*params, limit])


def workloads(conn: Connection, *, workload: str | None = None,
              limit: int = DEFAULT_LIMIT) -> list[Row]:  # fmt: skip
    """Workloads with their contract and what runs for them now."""
    where, params = _where([("w.workload_id = %s", workload)])
    query = sql.SQL(
        "SELECT w.workload_id, w.tier, w.owner, w.contract_version, w.target_vcpu, w.floor_vcpu,"
        " w.spend_cap_eur_micros, w.approver,"
        " coalesce(sum(i.vcpu) FILTER (WHERE i.state IN ('running', 'advised', 'noticed',"
        " 'draining', 'drained')), 0)::bigint AS live_vcpu,"
        " count(i.*) FILTER (WHERE i.state IN ('lost', 'replaced')) AS lost_instances"
        " FROM workloads w LEFT JOIN instances i ON i.workload_id = w.workload_id{}"
        " GROUP BY w.workload_id ORDER BY w.workload_id LIMIT %s"
    ).format(where)
    return _rows(conn, query, [*params, limit])


def stored_offsets(conn: Connection) -> list[Row]:
    return _rows(
        conn,
        sql.SQL("SELECT projection, topic, partition, next_offset FROM consumed_offsets"),
        [],
    )
