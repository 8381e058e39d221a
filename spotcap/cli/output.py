"""How the command line prints: tables and sentences for people, JSON for machines, progress
on stderr. Money and ids are never cut or wrapped: a table wider than the terminal (80 columns
in a pipe or a CI log) is printed as one block per row instead (`show`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

console = Console()
err_console = Console(stderr=True)


def emit_json(data: Any, *, indent: int | None = 2, sort_keys: bool = True) -> None:
    """`data` as JSON on stdout, the one machine-readable form (money as decimal strings)."""
    click.echo(json.dumps(data, indent=indent, sort_keys=sort_keys))


def say(text: str, *, markup: bool = True, err: bool = False) -> None:
    """One line for people; a long path or id is never broken (people copy them)."""
    (err_console if err else console).print(text, markup=markup, highlight=False, soft_wrap=True)


def table(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    right: Iterable[str] = (),
    caption: str | None = None,
    show_header: bool = True,
) -> Table:
    """A table of text cells; the columns named in `right` are right-aligned (numbers)."""
    aligned = set(right)
    out = Table(title=title, caption=caption, show_header=show_header)
    for column in columns:
        out.add_column(column, justify="right" if column in aligned else "left")
    for row in rows:
        out.add_row(*row)
    return out


def show(shown: Table, *, err: bool = False) -> None:
    """Print `shown` whole: no cell is cut or wrapped. Where the table is wider than the
    terminal, each row is a block of ``column: value`` lines under the row's first cell."""
    out = err_console if err else console
    for column in shown.columns:
        column.no_wrap, column.overflow = True, "ignore"
    natural = Measurement.get(out, out.options.update_width(10**6), shown).maximum
    if natural <= out.width:
        out.print(shown)
        return
    if shown.title:
        out.print(shown.title, style="bold", highlight=False, soft_wrap=True)
    names = [Text.from_markup(str(c.header)).plain for c in shown.columns]
    width = max(len(n) for n in names[1:]) if len(names) > 1 else 0
    cells = [list(c.cells) for c in shown.columns]
    for row in zip(*cells, strict=True):
        first = _plain(row[0])
        out.print(f"[bold]{escape(first)}[/]" if first else "-", highlight=False, soft_wrap=True)
        for name, cell in zip(names[1:], row[1:], strict=True):
            value = _plain(cell)
            if value:
                out.print(f"  {name:<{width}}  {value}", markup=False, highlight=False,
                          soft_wrap=True)  # fmt: skip
    if shown.caption:
        out.print(shown.caption, style="dim", highlight=False, soft_wrap=True)


def _plain(cell: object) -> str:
    return cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain


def progress(label: str, *, quiet: bool, counted: str = "records") -> Progress:
    """A transient progress bar on stderr: `label`, done of total `counted`, time, time left."""
    return bars(
        quiet,
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(counted),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )


def spinner(label: str, *, quiet: bool) -> Progress:
    """A transient spinner on stderr for work whose length is unknown; the task's description
    follows `label`."""
    return bars(
        quiet, SpinnerColumn(), TextColumn(f"{label}{{task.description}}"), TimeElapsedColumn()
    )


def bars(quiet: bool, *columns: ProgressColumn | str) -> Progress:
    """Transient progress bars on stderr of these columns (none shown when `quiet`)."""
    return Progress(*columns, console=err_console, transient=True, disable=quiet)


__all__ = [
    "bars",
    "console",
    "emit_json",
    "err_console",
    "progress",
    "say",
    "show",
    "spinner",
    "table",
]
