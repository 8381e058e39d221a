"""`spotcap replay`: the history priced under another accounting rule (what-if), per workload,
and ``--diff`` against the recorded ledger (docs/accounting.md).

Two engines give the same amounts to the micro-euro: ``clickhouse`` (the default, the faster:
SQL generated from the rule, over the ledger's tables or the archive's Parquet files) and
``python`` (a fold over the merged history: the log, Kafka or the archive).
"""

from __future__ import annotations

from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from projections.ledger.store import LedgerError
from projections.stores import StoreError
from replay.archive.storage import ArchiveError
from replay.ledgers import DiffRow, day_span, diff, recorded_amounts
from replay.report import (
    LINES,
    SHORT,
    diff_lines,
    diff_lines_title,
    diff_sentences,
    diff_totals,
    engine_text,
    ledger_rows,
    replay_report,
    span,
)
from replay.rule_file import RuleError, load_rule
from replay.run import ENGINES, Replayed, replay_archive, replay_log
from spotcap.cli.options import archive_option, need_home
from spotcap.cli.output import emit_json, progress, say, show, table
from spotcap.cli.replay_decisions import decisions
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.home import hold_home
from spotcap.wiring import make_codec, open_archive, open_log, stores
from streams.log import LogError


# fmt: off
@click.group("replay", invoke_without_command=True)
@click.option("--rules", "rules_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="The accounting rule (YAML), e.g. replay/rules/recorded.yaml.")
@click.option("--from", "first", type=click.DateTime(["%Y-%m-%d"]), default=None,
              help="First UTC day of the ledger (YYYY-MM-DD; default: the history's first).")
@click.option("--to", "last", type=click.DateTime(["%Y-%m-%d"]), default=None,
              help="Last UTC day, inclusive (default: the history's last).")
@click.option("--source", type=click.Choice(["log", "kafka", "archive"]), default="log",
              show_default=True,
              help="The history: the configured log (embedded or --kafka), Kafka from offset 0 "
              "(needs --kafka), or the archive (--archive).")
@archive_option
@click.option("--engine", type=click.Choice(ENGINES), default="clickhouse", show_default=True,
              help="clickhouse: SQL generated from the rule (the faster); python: a fold over "
              "the merged history. Both give the same amounts to the micro-euro.")
@click.option("--diff", "show_diff", is_flag=True,
              help="Compare with the recorded ledger per workload and cost line.")
@click.option("--limit", type=click.IntRange(min=1), default=40, show_default=True,
              help="Rows of the diff (or workloads) to print; --json gives all.")
@click.option("--json", "as_json", is_flag=True, help="Print the ledger (and diff) as JSON.")
@click.pass_context
def replay(ctx: click.Context, *, rules_file: Path | None, first: datetime | None,
           last: datetime | None, source: str, location: str | None, engine: str, show_diff: bool,
           limit: int, as_json: bool) -> None:
    # fmt: on
    """Price the history under an accounting rule: the per-workload ledger, or with --diff
    what changes against the recorded ledger (recorded, what-if, delta).

    replay/rules/ holds the recorded rule and worked what-if rules (docs/accounting.md).
    """
    if ctx.invoked_subcommand is not None:
        return
    settings: Settings = need_home(ctx.obj, log=source != "archive", ledger=True)
    hold_home(settings)
    if rules_file is None:
        fail(
            "give the rule to replay with: --rules FILE",
            "e.g. --rules replay/rules/recorded.yaml",
            usage=True,
        )
    try:
        rule = load_rule(rules_file)
    except RuleError as error:
        fail(str(error), "docs/accounting.md describes the rule format")
    try:
        first_day, last_day = day_span(first, last)
    except ValueError as error:
        fail(str(error), usage=True)
    if source == "kafka" and not settings.kafka_bootstrap:
        fail(
            "--source kafka needs Kafka: give --kafka HOST:PORT (or SPOTCAP_KAFKA_BOOTSTRAP)",
            usage=True,
        )
    try:
        result = _run(
            settings,
            rule,
            engine=engine,
            source=source,
            location=location,
            first_day=first_day,
            last_day=last_day,
            quiet=as_json,
        )
        recorded = (
            recorded_amounts(stores(settings).open_ledger(), first_day, last_day)
            if show_diff
            else None
        )
    except (StoreError, LedgerError, LogError, ArchiveError) as error:
        fail(str(error))
    report = replay_report(result, source, first_day, last_day, recorded)
    if as_json:
        emit_json(report)
    elif recorded is not None:
        _print_diff(result, diff(recorded, result.amounts), report, limit)
    else:
        _print_ledger(result, report, limit)


replay.add_command(decisions)


def _run(
    settings: Settings,
    rule: Any,
    *,
    engine: str,
    source: str,
    location: str | None,
    first_day: int | None,
    last_day: int | None,
    quiet: bool,
) -> Replayed:
    """The replay of `rule` by `engine` over the history `source` names, with progress."""
    bar = progress("[bold]{task.description}[/]", quiet=quiet)
    with bar:
        task = bar.add_task(f"replaying {rule.name}", total=None)

        def show(what: str, done: int, total: int | None) -> None:
            bar.update(task, description=what, completed=done, total=total)

        if source == "archive":
            storage = open_archive(settings, location)
            return replay_archive(storage, settings.region, rule, stores(settings), engine=engine,
                                  first_day=first_day, last_day=last_day, on_progress=show)
        with closing(open_log(settings)) as log:
            return replay_log(log, make_codec(settings), settings.region, rule, stores(settings),
                              engine=engine, first_day=first_day, last_day=last_day,
                              on_progress=show)


# -- output ---------------------------------------------------------------------------------


def _print_ledger(result: Replayed, report: dict[str, Any], limit: int) -> None:
    rows, total = ledger_rows(report, limit)
    rows.append(tuple(f"[bold]{cell}[/]" for cell in total))
    title = f"rule {result.rule.name}: the ledger per workload, {span(report)} (EUR)"
    caption = f"{engine_text(result)} from the {report['source']}"
    headings = [SHORT[c] for c in LINES]
    shown = table(title, ["workload", *headings], rows, right=headings, caption=caption)
    shown.columns[0].no_wrap = True
    show(shown)


def _print_diff(result: Replayed, rows: list[DiffRow], report: dict[str, Any], limit: int) -> None:
    same, closing = diff_sentences(result, report)
    if report["diff"]["identical"]:
        say(same, markup=False)
        return
    money = ("recorded", "what-if", "delta")
    title = f"rule {result.rule.name} against the recorded ledger, {span(report)} (EUR)"
    show(table(title, ("line", *money), diff_totals(report), right=money))
    changed = diff_lines(rows)
    title = diff_lines_title(len(changed), limit)
    show(table(title, ("workload", "line", *money), changed[:limit], right=money))
    say(closing, markup=False)
