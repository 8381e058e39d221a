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

    def present(self, row: Mapping[str, Any]) -> bool:
        return None not in [row.get(c) for c in self.version]

    def key(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(row[c] for c in self.version)


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
    columns: tuple[str, ...] = field(init=False, default=(), compare=False)

    def __post_init__(self) -> None:
        cols: list[str] = [self.key, *self.shared]
        for group in self.groups:
            cols.extend(c for c in (*group.version, *group.columns) if c not in cols)
        cols.extend(c for c in self.derived if c not in cols)
        object.__setattr__(self, "columns", tuple(cols))

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
                merged[column] = a.get(column) if a.get(column) is not None else b.get(column)
            for group in self.groups:
                winner = _pick(group, a, b)
                if winner is not None:
                    for column in (*group.version, *group.columns):
                        merged[column] = winner.get(column)
        return self.finish(merged) if finish else merged

    def finish(self, row: Row) -> Row:
        """Every column present (None where unknown), derived columns computed."""
        full = {c: row.get(c) for c in self.columns}
        if self.derive is not None:
            full.update(self.derive(full))
        return full


def _pick(group: Group, a: Mapping[str, Any], b: Mapping[str, Any]) -> Mapping[str, Any] | None:
    has_a, has_b = group.present(a), group.present(b)
    if not has_b:
        return a if has_a else None
    if not has_a:
        return b
    ka, kb = group.key(a), group.key(b)
    if group.keep == "latest":
        return a if ka >= kb else b
    return a if ka <= kb else b
