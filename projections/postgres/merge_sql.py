"""A state table's merge as one SQL statement, so that a batch's rows merge into the stored
ones inside PostgreSQL (no round trip of the stored rows through Python).

``INSERT INTO t SELECT ... FROM stage ORDER BY key ON CONFLICT (key) DO UPDATE SET ...``
where each column takes, per group, the side with the better version: the same rule as
`StateTable.merge` (which still merges the rows of one batch in Python, before they are
staged). Per group of version columns ``v``, the staged row (``EXCLUDED``) wins when the stored
row's group is unset, or when its own group is set and its version is later (``keep="latest"``)
or earlier (``keep="earliest"``) than the stored one, compared as a row; a tie keeps the stored
row, as `merge` keeps its first argument. Shared columns keep the stored value unless it is
null. Derived columns are computed from the merged values (each column in the derivation's
SQL template replaced by its merged expression: a SET expression sees only the old row and
``EXCLUDED``). ``ON CONFLICT DO UPDATE`` locks each row it updates, in the order of the
``SELECT`` (the key's), so two writers neither lose a merge nor deadlock.
"""

from __future__ import annotations

import re

from projections.postgres.tables import StateTable

_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def _q(name: str) -> str:
    """A quoted identifier (table and column names are the schema's own, checked anyway)."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a plain identifier: {name!r}")
    return f'"{name}"'


def _row(side: str, columns: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"{side}.{_q(c)}" for c in columns) + ")"


def merged_columns(table: StateTable) -> dict[str, str]:
    """Each non-key column's merged value as an SQL expression over ``t`` (the stored row) and
    ``EXCLUDED`` (the staged one)."""
    if table.derive is not None and not table.derive_sql:
        raise ValueError(f"{table.name}: its derived columns have no SQL")
    merged: dict[str, str] = {}
    for column in table.shared:
        merged[column] = f"COALESCE(t.{_q(column)}, EXCLUDED.{_q(column)})"
    for group in table.groups:
        stored_set = " AND ".join(f"t.{_q(v)} IS NOT NULL" for v in group.version)
        staged_set = " AND ".join(f"EXCLUDED.{_q(v)} IS NOT NULL" for v in group.version)
        better = ">" if group.keep == "latest" else "<"
        staged_wins = (
            f"(NOT ({stored_set}) OR (({staged_set}) AND "
            f"{_row('EXCLUDED', group.version)} {better} {_row('t', group.version)}))"
        )
        for column in (*group.version, *group.columns):
            merged[column] = (
                f"CASE WHEN {staged_wins} THEN EXCLUDED.{_q(column)} ELSE t.{_q(column)} END"
            )
    derived = {
        column: template.format_map({c: f"({e})" for c, e in merged.items()})
        for column, template in table.derive_sql
    }
    merged.update(derived)
    missing = set(table.columns) - {table.key} - set(merged)
    if missing:
        raise ValueError(f"{table.name}: no merge rule for {sorted(missing)}")
    return merged


def upsert_statement(table: StateTable, staging: str) -> str:
    """Insert the staged rows of `table`, merging each into the stored row of its key."""
    columns = ", ".join(map(_q, table.columns))
    sets = ",\n    ".join(f"{_q(c)} = {e}" for c, e in merged_columns(table).items())
    return (
        f"INSERT INTO {_q(table.name)} AS t ({columns})\n"
        f"SELECT {columns} FROM {_q(staging)} ORDER BY {_q(table.key)}\n"
        f"ON CONFLICT ({_q(table.key)}) DO UPDATE SET\n    {sets}"
    )
