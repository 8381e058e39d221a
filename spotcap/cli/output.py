"""How the command line prints: tables and sentences for people, JSON for machines, progress
on stderr. Money and ids are never cut: tables fold long cells instead of truncating them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import click
from rich.console import Console
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


def progress(label: str, *, quiet: bool, counted: str = "records") -> Progress:
    """A transient progress bar on stderr: `label`, done of total `counted`, time, time left."""
    return _bar(
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
    return _bar(
        quiet, SpinnerColumn(), TextColumn(f"{label}{{task.description}}"), TimeElapsedColumn()
    )


def _bar(quiet: bool, *columns: ProgressColumn | str) -> Progress:
    return Progress(*columns, console=err_console, transient=True, disable=quiet)


__all__ = ["console", "emit_json", "err_console", "progress", "say", "spinner", "table"]
