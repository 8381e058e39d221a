"""The fleet-state tables as the writer sees them, and how a state row merges facts.

Two kinds of table:

- an *append* table gets one row per event (or per part of an event), keyed by the event id;
  a row already there is left alone (``ON CONFLICT DO NOTHING``);
- a *state* table has one row per entity (an instance, a pool, ...). Its columns fall into
  groups, each set by one kind of event and ordered by its own version (event time, then event
  id); merging two rows keeps, per group, the better version. So a row is a function of the
  set of events applied, not of their order: the same in a rebuild as incrementally, and the
  same whichever partition delivered first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Row = dict[str, Any]


class _Unknown(dict[str, Any]):
    """A row that reads None for a column it lacks (``row[column]`` as ``row.get(column)``)."""

    def __missing__(self, key: str) -> None:
        return None


@dataclass(frozen=True, slots=True)
class AppendTable:
    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...] = ("event_id",)


@dataclass(frozen=True, slots=True)
class Group:
    """Columns set together by one kind of event. `version` columns order two candidates
    (compared as a tuple; a group whose version is unset is absent); `keep` says which wins."""

    version: tuple[str, ...]
    columns: tuple[str, ...]
    keep: Literal["earliest", "latest"] = "latest"


@dataclass(frozen=True, slots=True)
class StateTable:
    name: str
    key: str
    groups: tuple[Group, ...]
    # Columns kept from whichever side has them (facts every event agrees on).
    shared: tuple[str, ...] = ()
    # Columns computed from the merged groups.
    derived: tuple[str, ...] = ()
    derive: Callable[[Row], Row] | None = field(default=None, compare=False)
    # `derive` in SQL, per column it sets: a template whose ``{column}`` placeholders are
    # replaced by the merged values (`merge_sql`; tests check both give the same rows).
    derive_sql: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    columns: tuple[str, ...] = field(init=False, default=(), compare=False)
    # Per group: its version columns, every column it sets, and whether the latest wins
    # (precomputed: merging is the fleet writer's hottest Python path).
    _plan: tuple[tuple[tuple[str, ...], tuple[str, ...], bool], ...] = field(
        init=False, default=(), compare=False, repr=False
    )
    # Each column's position in `columns`.
    _index: dict[str, int] = field(init=False, default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        cols: list[str] = [self.key, *self.shared]
        for group in self.groups:
            cols.extend(c for c in (*group.version, *group.columns) if c not in cols)
        cols.extend(c for c in self.derived if c not in cols)
        object.__setattr__(self, "columns", tuple(cols))
        plan = tuple((g.version, (*g.version, *g.columns), g.keep == "latest") for g in self.groups)
        object.__setattr__(self, "_plan", plan)
        object.__setattr__(self, "_index", {c: i for i, c in enumerate(cols)})

    def merge(
        self, a: Mapping[str, Any] | None, b: Mapping[str, Any], *, finish: bool = True
    ) -> Row:
        """The row holding the facts of both `a` and `b` (commutative, idempotent); with
        `finish` False, a partial row to merge further (cheaper inside a batch)."""
        if a is None:
            merged: Row = dict(b)
        else:
            merged = {self.key: b[self.key]}
            for column in self.shared:
                value = a.get(column)
                merged[column] = value if value is not None else b.get(column)
            # Per group, the better version of the two; a group unset on one side is the
            # other's, unset on both stays out.
            a_get, b_get = a.get, b.get
            for version, columns, latest in self._plan:
                # `_version`, inlined: this loop runs per group of every merged row.
                vb = tuple(map(b_get, version))
                va = tuple(map(a_get, version))
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
                get = winner.get
                for column in columns:
                    merged[column] = get(column)
        return self.finish(merged) if finish else merged

    def finish_row(self, row: Row) -> tuple[Any, ...]:
        """`finish`, as a tuple in the order of `columns` (what the writer copies)."""
        values = list(map(row.get, self.columns))
        if self.derive is not None:
            # `derive` sees every column, None where unknown (as `finish` gives it), without
            # building that full row.
            for column, value in self.derive(_Unknown(row)).items():
                values[self._index[column]] = value
        return tuple(values)

    def finish(self, row: Row) -> Row:
        """Every column present (None where unknown), derived columns computed."""
        full = dict(zip(self.columns, map(row.get, self.columns), strict=True))
        if self.derive is not None:
            full.update(self.derive(full))
        return full
