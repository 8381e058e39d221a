"""The bare reference of `bench/replay.py`'s ClickHouse engine over an archive's month files:
the recorded rule's query of `bench/replay_sql_bare.py`, reading what the engine reads of each
month of the archive's format 4 (`spotcap archive export`) rather than the ledger's tables.

Per month folder: the typed rate_cards.parquet with the integrals of both prices up to each
card in force (from the pool's first card of the month: each month's are offset by the
integral up to its first card, the sum of what each earlier month of the pool adds, its last
integral and its last card's price up to the next month's first card), usage.parquet and
checkpoints.parquet, and priced_events.parquet for the other events priced from (read once
into a scratch table, as the engine does: a read of a Parquet file decodes its payload column
whatever the filter keeps); the count of events and the newest event time from events.parquet.
The months of each pool follow one another, as an export writes them (the engine checks it
and sorts the cards whole otherwise; here the amounts' check would find it). chdb alone: no
module of the project is imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.replay_sql_bare import EARLIEST, PlainReplay

# The archive's file names (`replay.archive.layout`) and the rate cards' derived columns.
EVENTS, PRICED = "events.parquet", "priced_events.parquet"
RATE_CARDS, USAGE, CHECKPOINTS = "rate_cards.parquet", "usage.parquet", "checkpoints.parquet"
IN_FORCE = "in_force"
PRICE_INTEGRAL, GUARANTEED_INTEGRAL = "price_integral_to_start", "guaranteed_integral_to_start"


def _file(path: Path) -> str:
    text = str(path).replace("\\", "\\\\").replace("'", "\\'")
    return f"file('{text}', Parquet)"


class ParquetReplay(PlainReplay):
    """The recorded rule over the month folders `months` (in order), by a chdb session on the
    data path `path` (the process's one: chdb admits one per process)."""

    def __init__(self, path: Path, months: Sequence[Path]) -> None:
        super().__init__(path, "")
        self.months = list(months)

    def union(self, name: str, columns: str) -> str:
        """`columns` of the file `name` of every month, `k` its month's number."""
        return " UNION ALL ".join(
            f"SELECT {k} AS k, {columns} FROM {_file(m / name)}" for k, m in enumerate(self.months)
        )

    def count_sql(self) -> str:
        # From the files' metadata: ClickHouse reads no column for a count.
        counts = " UNION ALL ".join(
            f"SELECT count() AS n FROM {_file(m / EVENTS)}" for m in self.months
        )
        return f"SELECT sum(n) AS n FROM ({counts})"

    def latest_sql(self) -> str:
        latest = self.union(EVENTS, "toUnixTimestamp64Micro(occurred_at) AS t")
        return f"SELECT max(t) FROM ({latest})"

    def events(self, types: str) -> str:
        return (
            f"SELECT event_id, t, payload FROM {self.scratch}.priced WHERE event_type IN ({types})"
        )

    def usage_rows(self) -> str:
        return self.union(
            USAGE,
            "event_id, workload_id AS w, instance_id AS i, pool_id AS pool,"
            " purchase_model AS model, start_at AS s, end_at AS e, vcpu, used_vcpu_h AS used_h",
        )

    def checkpoint_rows(self) -> str:
        return self.union(
            CHECKPOINTS,
            "workload_id AS w, toUnixTimestamp64Micro(occurred_at) AS t, written_bytes",
        )

    def statements(self, s: str) -> list[str]:
        priced = self.union(
            PRICED,
            "assumeNotNull(event_id) AS event_id, assumeNotNull(event_type) AS event_type,"
            " toUnixTimestamp64Micro(assumeNotNull(occurred_at)) AS t,"
            " assumeNotNull(payload) AS payload",
        )
        # Per pool and month, the first and the last card in force; per pool, the months in
        # order, each one's offset the running sum of what the months before add.
        offsets = f"""
CREATE TABLE {s}.months ENGINE = Memory AS
SELECT pool, m.1 AS k, m.2 AS first, m.3 AS fp, m.4 AS fg, m.5 AS fm, o.1 AS op, o.2 AS og,
       n AS nth
FROM (
    SELECT pool, arraySort(x -> x.1, groupArray((k, first, fp, fg, fm, last, lp, lg, lcp, lcg)))
               AS ms,
           arrayMap(j -> if(j = 1, toInt128(0),
                            ms[j - 1].9 + toInt128(ms[j].2 - ms[j - 1].6) * ms[j - 1].7),
                    arrayEnumerate(ms)) AS adds_p,
           arrayMap(j -> if(j = 1, toInt128(0),
                            ms[j - 1].10 + toInt128(ms[j].2 - ms[j - 1].6) * ms[j - 1].8),
                    arrayEnumerate(ms)) AS adds_g,
           arrayZip(arrayCumSum(adds_p), arrayCumSum(adds_g)) AS os
    FROM (
        SELECT k, pool, min(vf) AS first, argMin(price, vf) AS fp, argMin(g, vf) AS fg,
               argMin(model, vf) AS fm, max(vf) AS last, argMax(price, vf) AS lp,
               argMax(g, vf) AS lg, argMax(cp, vf) AS lcp, argMax(cg, vf) AS lcg
        FROM {s}.card_rows WHERE in_force GROUP BY k, pool
    )
    GROUP BY pool
)
ARRAY JOIN ms AS m, os AS o, arrayEnumerate(ms) AS n
"""
        card_rows = self.union(
            RATE_CARDS,
            f"pool_id AS pool, valid_from_at AS vf, price_per_vcpu_h_eur_micros AS price,"
            f" guaranteed_price_per_vcpu_h_eur_micros AS g, purchase_model AS model,"
            f" {IN_FORCE} AS in_force, toInt128({PRICE_INTEGRAL}) AS cp,"
            f" toInt128({GUARANTEED_INTEGRAL}) AS cg",
        )
        return [
            f"CREATE TABLE {s}.priced ENGINE = Memory AS {priced}",
            f"CREATE TABLE {s}.card_rows ENGINE = Memory AS {card_rows}",
            offsets,
            *super().statements(s),
        ]

    def cards_statement(self, s: str) -> str:
        # The file's cards in force, their integrals offset by their month's; and a card per
        # pool at EARLIEST with the pool's first card's prices, its integral the one that
        # prices the moments before the first at it.
        before = f"(toInt128({EARLIEST}) - first)"
        return f"""
CREATE TABLE {s}.cards ENGINE = Memory AS
SELECT c.pool AS pool, c.vf AS vf, c.price AS price, c.g AS g, c.model AS model,
       o.op + c.cp AS cp, o.og + c.cg AS cg
FROM {s}.card_rows AS c INNER JOIN {s}.months AS o ON o.k = c.k AND o.pool = c.pool
WHERE c.in_force
UNION ALL
SELECT pool, toInt64({EARLIEST}), fp, fg, fm, {before} * fp, {before} * fg
FROM {s}.months WHERE nth = 1
"""
