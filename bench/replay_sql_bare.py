"""The bare reference of `bench/replay.py`'s ClickHouse engine: the recorded rule's query
written plainly, run by a chdb session of its own over the ledger's tables.

What `replay.sql.SqlReplay` generates from a rule, written here once for the recorded rule
(its figures as constants, as `bench/ledger_bare.py` has them): the rate cards in force per
pool (a card published past the allowed hour left out; of cards starting together the one
published last) with the integrals of both prices up to each start, a card before each pool's
first; each workload's instances and claims; the usage intervals cut into pieces by what was
useful and by UTC day; each event's lines of a day summed exactly and rounded once (half to
even), wasted work and checkpoints, the reservations' cost per day up to the last whole hour
of the newest event; summed per workload, day and cause. The cards and the pieces go to
scratch tables (Memory engine) of a database of its own, as the engine's do, so that each is
computed once. No module of the project is imported.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import chdb.session
import pyarrow as pa

DAY_US = 86_400_000_000
HOUR_US = 3_600_000_000
NEVER = 1 << 62
EARLIEST = -(2**62)
PLATFORM = "(platform)"
LATE_US = 3600 * 1_000_000  # the allowed lateness of rate cards and reservations
Q_H, Q_S = 1_000_000, 1_000  # usage quanta per vCPU-hour, waste quanta per vCPU-second
AGENT_MILLI, CONTROL_PLANE = 20, 200  # the agent's millicores, µ€ per used vCPU-hour
CKPT_MICROS, CKPT_DAYS = 20_000, 7  # µ€ per GB-month, retention
SPEND = ("multiIf(model = 'reclaimable', 'reclaimable_spend', model = 'committed', 'floor_spend',"
         " 'fallback_spend')")  # fmt: skip


def rhe(n: str, d: str) -> str:
    """n / d rounded half to even, in Int128 (d > 0): intDiv truncates towards zero."""
    t = f"intDiv({n}, {d})"
    m = f"(({n}) - {t} * ({d}))"
    q = f"({t} - if({m} < 0, 1, 0))"
    r = f"({m} + if({m} < 0, {d}, 0))"
    return f"({q} + if(2 * {r} > ({d}) OR (2 * {r} = ({d}) AND {q} % 2 != 0), 1, 0))"


class PlainReplay:
    """The recorded rule over the ledger database `database` of the chdb data at `path`."""

    def __init__(self, path: Path, database: str) -> None:
        self.session: Any = chdb.session.Session(str(path))  # type: ignore[no-untyped-call]
        self.ledger = database
        self.scratch = ""  # the scratch database of the run under way

    def query(self, sql: str) -> list[dict[str, Any]]:
        data = self.session.query(sql, "ArrowStream").bytes()
        return pa.ipc.open_stream(data).read_all().to_pylist() if data else []

    def run(self) -> tuple[int, dict[tuple[str, int, str], int]]:
        """The events of the history and the amounts per workload, UTC day and cause."""
        scratch = f"bare_replay_{uuid.uuid4().hex[:12]}"
        self.session.query(f"CREATE DATABASE {scratch}")
        self.scratch = scratch
        try:
            for sql in self.statements(scratch):
                self.session.query(sql)
            rows = self.query(self.lines_sql(scratch))
            n = self.query(self.count_sql())[0]["n"]
        finally:
            self.session.query(f"DROP DATABASE IF EXISTS {scratch}")
        return int(n), {(r["w"], int(r["day"]), r["cause"]): int(r["a"]) for r in rows}

    # -- where the history is: the ledger's tables (`bench/replay_parquet_bare.py`: files) --

    def count_sql(self) -> str:
        return f"SELECT count() AS n FROM {self.ledger}.events FINAL"

    def latest_sql(self) -> str:
        """The newest event time of the history."""
        return f"SELECT max(toUnixTimestamp64Micro(occurred_at)) FROM {self.ledger}.events"

    def events(self, types: str) -> str:
        """(event_id, t, payload) of the events of `types` (a list of quoted names)."""
        return (
            "SELECT toString(event_id) AS event_id, toUnixTimestamp64Micro(occurred_at) AS t,"
            f" payload FROM {self.ledger}.events FINAL WHERE event_type IN ({types})"
        )

    def usage_rows(self) -> str:
        """(event_id, w, i, pool, model, s, e, vcpu, used_h) of every usage interval."""
        usage = (
            "Tuple(workload_id String, instance_id String, pool_id String, purchase_model String,"
            " start_at Int64, end_at Int64, vcpu Int64, used_vcpu_h Float64)"
        )
        return f"""
        SELECT event_id, p.1 AS w, p.2 AS i, p.3 AS pool, p.4 AS model, p.5 AS s, p.6 AS e,
               p.7 AS vcpu, p.8 AS used_h
        FROM (SELECT event_id, JSONExtract(payload, '{usage}') AS p
              FROM ({self.events("'usage_interval'")}))"""

    def checkpoint_rows(self) -> str:
        """(w, t, written_bytes) of every checkpoint."""
        written = self.events("'checkpoint_written'")
        return (
            "SELECT JSONExtractString(payload, 'workload_id') AS w, t,"
            f" JSONExtractInt(payload, 'written_bytes') AS written_bytes FROM ({written})"
        )

    def cards_statement(self, s: str) -> str:
        """The scratch table `s`.cards: (pool, vf, price, g, model, cp, cg) per card in force,
        cp and cg the integrals of the price and the guaranteed price up to vf, and a card per
        pool at EARLIEST."""
        # Per pool, the cards sorted by (start, publication, event id), the last of each start
        # kept; the integral up to each start, a running sum of duration x price over the
        # pool's array (a window over the rows is several times slower); a card before the
        # first, at EARLIEST, with the first's prices and the integral that prices the moments
        # before the first at it.
        return f"""
CREATE TABLE {s}.cards ENGINE = Memory AS
SELECT pool, c.1 AS vf, c.2 AS price, c.3 AS g, c.4 AS model, c.5 AS cp, c.6 AS cg
FROM (
    SELECT pool,
           arrayFilter((x, n) -> n = length(sorted) OR sorted[n + 1].1 != x.1, sorted,
                       arrayEnumerate(sorted)) AS kept,
           arrayMap(n -> if(n < length(kept), kept[n + 1].1 - kept[n].1, 0),
                    arrayEnumerate(kept)) AS d,
           arrayMap((x, dd) -> toInt128(dd) * x.4, kept, d) AS dp,
           arrayMap((x, dd) -> toInt128(dd) * x.5, kept, d) AS dg,
           arrayCumSum(dp) AS sp, arrayCumSum(dg) AS sg,
           toInt128({EARLIEST} - kept[1].1) AS before,
           arrayPushFront(
               arrayMap(n -> (kept[n].1, kept[n].4, kept[n].5, kept[n].6, sp[n] - dp[n],
                              sg[n] - dg[n]), arrayEnumerate(kept)),
               (toInt64({EARLIEST}), kept[1].4, kept[1].5, kept[1].6, before * kept[1].4,
                before * kept[1].5)) AS rows
    FROM (
        SELECT toString(pool_id) AS pool,
               arraySort(groupArray((toUnixTimestamp64Micro(valid_from),
                                     toUnixTimestamp64Micro(published_at), toString(event_id),
                                     price_per_vcpu_h_eur_micros,
                                     guaranteed_price_per_vcpu_h_eur_micros,
                                     toString(purchase_model)))) AS sorted
        FROM {self.ledger}.rate_cards
        WHERE toUnixTimestamp64Micro(published_at) - toUnixTimestamp64Micro(valid_from)
              <= {LATE_US}
        GROUP BY pool
    )
)
ARRAY JOIN rows AS c
"""

    def statements(self, s: str) -> list[str]:
        """The scratch tables: the cards, the instances, the claims, the useful pieces."""
        instances = f"""
CREATE TABLE {s}.instances ENGINE = Memory AS
SELECT l.w AS w, l.i AS i, l.t0 AS t0, l.vcpu AS vcpu, if(x.i = '', {NEVER}, x.t1) AS t1
FROM (
    SELECT JSONExtractString(payload, 'workload_id') AS w,
           JSONExtractString(payload, 'instance_id') AS i,
           min(t) AS t0, argMin(JSONExtractInt(payload, 'vcpu'), t) AS vcpu
    FROM ({self.events("'instance_launched'")}) GROUP BY w, i
) AS l
LEFT JOIN (
    SELECT JSONExtractString(payload, 'workload_id') AS w,
           JSONExtractString(payload, 'instance_id') AS i, min(t) AS t1
    FROM ({self.events("'instance_lost', 'instance_deleted'")}) GROUP BY w, i
) AS x ON x.w = l.w AND x.i = l.i
"""
        claims = f"""
CREATE TABLE {s}.claims ENGINE = Memory AS
SELECT o.w AS w, o.ta AS ta, o.vcpu AS vcpu, if(r.c = '', {NEVER}, r.tb) AS tb
FROM (
    SELECT JSONExtractString(payload, 'workload_id') AS w,
           JSONExtractString(payload, 'claim_id') AS c,
           min(t) AS ta, argMin(JSONExtractInt(payload, 'requested_vcpu'), t) AS vcpu
    FROM ({self.events("'capacity_claim_opened'")}) GROUP BY w, c
) AS o
LEFT JOIN (
    SELECT JSONExtractString(payload, 'workload_id') AS w,
           JSONExtractString(payload, 'claim_id') AS c, min(t) AS tb
    FROM ({self.events("'capacity_released'")}) GROUP BY w, c
) AS r ON r.w = o.w AND r.c = o.c
"""
        # At each cut (a claim opening or released, an instance launched before this one
        # starting or ending) the vCPU useful: what the open claims ask for less what the
        # instances launched before take, at most the interval's vCPU; then cut at midnights.
        pieces = f"""
CREATE TABLE {s}.pieces ENGINE = Memory AS
SELECT event_id, w, model, s, e, vcpu, used_h, pool, seg.1 AS day, seg.2 AS a, seg.3 AS b,
       seg.4 AS useful
FROM (
    SELECT u.event_id AS event_id, u.w AS w, u.model AS model, u.s AS s, u.e AS e,
           u.vcpu AS vcpu, u.used_h AS used_h, u.pool AS pool,
           arrayFilter(x -> (x.1, x.2) < (me.t0, u.i) AND x.3 > u.s AND x.1 < u.e, wi.insts)
               AS before,
           arrayFilter(c -> c.1 < u.e AND c.2 > u.s, wc.cls) AS open,
           arraySort(arrayDistinct(arrayConcat([u.s, u.e], arrayFilter(x -> x > u.s AND x < u.e,
               arrayConcat(arrayMap(x -> x.1, before), arrayMap(x -> x.3, before),
                           arrayMap(c -> c.1, open), arrayMap(c -> c.2, open)))))) AS cuts,
           if(me.i = '', [(u.s, u.e, toInt64(0))],
              arrayMap(n -> (cuts[n], cuts[n + 1], least(u.vcpu, greatest(toInt64(0),
                  arraySum(arrayMap(c -> if(c.1 <= cuts[n] AND cuts[n] < c.2, c.3, 0), open))
                  - arraySum(arrayMap(x -> if(x.1 <= cuts[n] AND cuts[n] < x.3, x.4, 0),
                                      before))))),
                  range(1, length(cuts)))) AS useful_pieces
    FROM (
        SELECT * FROM ({self.usage_rows()})
        WHERE e > s AND pool IN (SELECT pool FROM {s}.cards)
    ) AS u
    LEFT JOIN (SELECT w, i, t0 FROM {s}.instances) AS me ON me.w = u.w AND me.i = u.i
    LEFT JOIN (SELECT w, groupArray((t0, i, t1, vcpu)) AS insts FROM {s}.instances GROUP BY w)
        AS wi ON wi.w = u.w
    LEFT JOIN (SELECT w, groupArray((ta, tb, vcpu)) AS cls FROM {s}.claims GROUP BY w)
        AS wc ON wc.w = u.w
)
ARRAY JOIN arrayFlatten(arrayMap(g -> arrayMap(
           day -> (day, greatest(g.1, toInt64(day) * {DAY_US}),
                   least(g.2, (toInt64(day) + 1) * {DAY_US}), g.3),
           range(toUInt64(intDiv(g.1, {DAY_US})), toUInt64(intDiv(g.2 - 1, {DAY_US})) + 1)),
       useful_pieces)) AS seg
"""
        return [self.cards_statement(s), instances, claims, pieces]

    def lines_sql(self, s: str) -> str:
        """Every line, summed per workload, day and cause."""
        milli_h = 1000 * HOUR_US
        # Per piece: the integrals of the price (dp) and the guaranteed price (dg) over it,
        # from the card in force at each end.
        per_piece = f"""
SELECT pc.event_id AS event_id, pc.w AS w, pc.day AS day, pc.model AS model,
       toInt128(pc.useful) AS useful, toInt128(greatest(pc.vcpu, 1)) AS vcpu,
       toInt128(pc.b - pc.a) AS d,
       cb.cp + toInt128(pc.b - cb.vf) * cb.price - ca.cp - toInt128(pc.a - ca.vf) * ca.price AS dp,
       cb.cg + toInt128(pc.b - cb.vf) * cb.g - ca.cg - toInt128(pc.a - ca.vf) * ca.g AS dg,
       toInt128(toInt64(roundBankers(pc.used_h * {Q_H}))) AS used_q,
       {rhe(f"toInt128(pc.vcpu) * (pc.e - pc.s) * {Q_H}", str(HOUR_US))} AS capacity_q,
       greatest(capacity_q - used_q, 0) AS idle_q,
       toInt128({Q_H}) * (pc.e - pc.s) AS share
FROM {s}.pieces AS pc
ASOF INNER JOIN {s}.cards AS ca ON ca.pool = pc.pool AND pc.a >= ca.vf
ASOF INNER JOIN {s}.cards AS cb ON cb.pool = pc.pool AND pc.b >= cb.vf
"""
        footprint = (
            f"sum(vcpu * ({AGENT_MILLI} * dp * share + used_q * d * {CONTROL_PLANE} * {milli_h}))"
        )
        usage = f"""
SELECT line.3 AS w, toInt64(day) AS day, line.1 AS cause, line.2 AS amount
FROM (
    SELECT w AS ww, day, model, any(share * vcpu) AS den,
           {rhe("sum(used_q * useful * dg)", "den")} AS cf,
           {rhe("sum(used_q * useful * dp)", "den")} AS spend,
           {rhe("sum(used_q * (vcpu - useful) * dp)", "den")} AS surplus,
           {rhe("sum(idle_q * vcpu * dp)", "den")} AS headroom,
           {rhe(footprint, f"den * {milli_h}")} AS footprint,
           if(model = 'committed', {rhe("sum(-capacity_q * vcpu * dp)", "den")}, 0) AS idle
    FROM ({per_piece})
    GROUP BY event_id, w, day, model
)
ARRAY JOIN [('counterfactual', cf, ww), ({SPEND}, spend, ww), ('surplus', surplus, ww),
            ('headroom', headroom, ww), ('footprint', footprint, ww),
            ('idle_floor', idle, '{PLATFORM}')] AS line
"""
        per_s = str(Q_S * 3600)
        waste = f"""
SELECT w, day, line.1 AS cause, line.2 AS amount
FROM (
    SELECT x.w AS w, intDiv(x.t, {DAY_US}) AS day, c.price AS price, c.g AS g, c.model AS model,
           toInt128(toInt64(roundBankers(x.wasted_s * {Q_S}))) AS wq
    FROM (
        SELECT t, JSONExtractString(payload, 'workload_id') AS w,
               JSONExtractString(payload, 'pool_id') AS pool,
               JSONExtractFloat(payload, 'wasted_vcpu_s') AS wasted_s
        FROM ({self.events("'work_wasted'")})
    ) AS x
    ASOF INNER JOIN {s}.cards AS c ON c.pool = x.pool AND x.t >= c.vf
)
ARRAY JOIN [('counterfactual', {rhe("-wq * g", per_s)}),
            ('wasted_work', {rhe("wq * price", per_s)}),
            ({SPEND}, {rhe("-wq * price", per_s)})] AS line
"""
        per_month, kept = str(1_000_000_000 * 30), CKPT_DAYS * CKPT_MICROS
        checkpoints = f"""
SELECT w, intDiv(t, {DAY_US}) AS day, 'checkpoint_storage' AS cause,
       {rhe(f"toInt128(written_bytes) * {kept}", per_month)} AS amount
FROM ({self.checkpoint_rows()})
"""
        reserved = (
            f"toInt128(vcpu) * price"
            f" * (least(e, (day + 1) * {DAY_US}, until) - greatest(s, day * {DAY_US}))"
        )
        reservations = f"""
SELECT '{PLATFORM}' AS w, day, 'idle_floor' AS cause,
       {rhe(reserved, str(HOUR_US))} AS amount
FROM (
    SELECT JSONExtractInt(payload, 'reserved_vcpu') AS vcpu,
           JSONExtractInt(payload, 'price_per_vcpu_h_eur_micros') AS price,
           JSONExtractInt(payload, 'start_at') AS s, JSONExtractInt(payload, 'end_at') AS e,
           t, ({self.latest_sql()}) AS latest, latest - latest % {HOUR_US} AS until
    FROM ({self.events("'reservation_committed'")})
    WHERE t - s <= {LATE_US} AND least(e, until) > s
)
ARRAY JOIN arrayMap(x -> toInt64(x), range(toUInt64(intDiv(s, {DAY_US})),
                                           toUInt64(intDiv(least(e, until) - 1, {DAY_US})) + 1))
    AS day
"""
        return f"""
SELECT w, day, cause, toInt64(sum(amount)) AS a
FROM ({usage} UNION ALL {waste} UNION ALL {checkpoints} UNION ALL {reservations})
GROUP BY w, day, cause HAVING a != 0
"""
