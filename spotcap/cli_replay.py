"""`spotcap replay`: the history priced under another accounting rule (what-if), per workload,
and ``--diff`` against the recorded ledger (docs/accounting.md).

Two engines give the same amounts to the micro-euro: ``clickhouse`` (the default, the faster:
SQL generated from the rule, over the ledger's tables or the archive's Parquet files) and
``python`` (a fold over the merged history: the log, Kafka or the archive).
"""

from __future__ import annotations

import json
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from projections.ledger.rule import CAUSES, COST_CAUSES
from projections.ledger.store import ChdbStore, LedgerError
from projections.ledger.writer import LEDGER_TOPICS
from projections.money import eur_string, eur_text
from replay.archive import layout
from replay.archive.read import archive_events_files, archive_history
from replay.archive.storage import ArchiveError
from replay.ledgers import (
    DiffRow,
    by_workload,
    day_date,
    day_number,
    diff,
    net_saving,
    recorded_amounts,
)
from replay.rule_file import RuleError, load_rule
from replay.run import Replayed, replay_clickhouse, replay_python
from replay.sql import LEDGER_RELATIONS, ParquetMonth, parquet_relations
from spotcap.cli_archive import archive_option, open_archive
from spotcap.cli_replay_decisions import decisions
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.projecting import catch_up, open_writer
from spotcap.stores import StoreError, open_ledger
from spotcap.wiring import make_codec, open_log
from streams.log import LogError
from streams.merged import MergedHistory

console = Console()
err = Console(stderr=True)
SHORT = {
    "counterfactual": "counterfactual",
    "reclaimable_spend": "reclaimable",
    "floor_spend": "floor",
    "fallback_spend": "fallback",
    "wasted_work": "wasted",
    "headroom": "headroom",
    "checkpoint_storage": "checkpoints",
    "footprint": "footprint",
    "net_saving": "net saving",
}


def _day(value: datetime | None) -> int | None:
    return None if value is None else day_number(value.date())


@click.group("replay", invoke_without_command=True)
@click.option(
    "--rules",
    "rules_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The accounting rule (YAML), e.g. replay/rules/recorded.yaml.",
)
@click.option(
    "--from",
    "first",
    type=click.DateTime(["%Y-%m-%d"]),
    default=None,
    help="First UTC day of the ledger (YYYY-MM-DD; default: the history's first).",
)
@click.option(
    "--to",
    "last",
    type=click.DateTime(["%Y-%m-%d"]),
    default=None,
    help="Last UTC day, inclusive (default: the history's last).",
)
@click.option(
    "--source",
    type=click.Choice(["log", "kafka", "archive"]),
    default="log",
    show_default=True,
    help="The history: the configured log (embedded or --kafka), Kafka from offset 0 "
    "(needs --kafka), or the archive (--archive).",
)
@archive_option
@click.option(
    "--engine",
    type=click.Choice(["clickhouse", "python"]),
    default="clickhouse",
    show_default=True,
    help="clickhouse: SQL generated from the rule (the faster); python: a fold over "
    "the merged history. Both give the same amounts to the micro-euro.",
)
@click.option(
    "--diff",
    "show_diff",
    is_flag=True,
    help="Compare with the recorded ledger per workload and cost line.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=40,
    show_default=True,
    help="Rows of the diff (or workloads) to print; --json gives all.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the ledger (and diff) as JSON.")
@click.pass_context
def replay(
    ctx: click.Context,
    *,
    rules_file: Path | None,
    first: datetime | None,
    last: datetime | None,
    source: str,
    location: str | None,
    engine: str,
    show_diff: bool,
    limit: int,
    as_json: bool,
) -> None:
    """Price the history under an accounting rule: the per-workload ledger, or with --diff
    what changes against the recorded ledger (recorded, what-if, delta).

    replay/rules/ holds the recorded rule and worked what-if rules (docs/accounting.md).
    """
    if ctx.invoked_subcommand is not None:
        return
    settings: Settings = ctx.obj
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
    first_day, last_day = _day(first), _day(last)
    if first_day is not None and last_day is not None and first_day > last_day:
        fail("--from is after --to", usage=True)
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
            recorded_amounts(open_ledger(settings), first_day, last_day) if show_diff else None
        )
    except (StoreError, LedgerError, LogError, ArchiveError) as error:
        fail(str(error))
    report = _report(result, source, first_day, last_day, recorded)
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
    elif recorded is not None:
        _print_diff(result, diff(recorded, result.amounts), report, limit)
    else:
        _print_ledger(result, report, limit)


replay.add_command(decisions)


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _bring_ledger_up(settings: Settings, quiet: bool) -> None:
    """Bring the ledger up to date with the log (the recorded ledger and the SQL engine's
    tables are the ledger's), with a progress bar."""
    log = open_log(settings)
    progress = _bar("bringing the ledger up to date", quiet)
    try:
        with progress:
            task = progress.add_task("ledger", total=None)
            catch_up(
                settings,
                log,
                open_writer(settings, "ledger"),
                on_progress=lambda p: progress.update(
                    task, completed=p.records_read, total=p.records_total
                ),
            )
    finally:
        log.close()


def _bar(label: str, quiet: bool) -> Progress:
    return Progress(
        TextColumn(f"[bold]{label}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("records"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=quiet,
    )


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
    if source != "archive":
        _bring_ledger_up(settings, quiet)
    if source == "archive":
        storage = open_archive(settings, location)
        # A usage interval is archived in the month it ended in, which may be after the
        # range's last day: the months up to a week after it are read.
        last_month = (
            None if last_day is None else layout.month_of_us((last_day + 8) * 86_400_000_000 - 1)
        )
        first_month = (
            None
            if first_day is None
            else layout.month_of_us(max(first_day - 7, 0) * 86_400_000_000)
        )
        with tempfile.TemporaryDirectory(prefix="spotcap-replay-") as tmp:
            files = archive_events_files(storage, settings.region, Path(tmp), last_month)
            if engine == "python":
                spinner = _spinner(f"replaying {rule.name} over the archive", quiet)
                with spinner:
                    spinner.add_task("replay", total=None)
                    archived = archive_history([(m.month, m.events) for m in files], first_month)
                    return replay_python([rule], archived, first_day, last_day)[0]
            store = open_ledger(settings)
            if not isinstance(store, ChdbStore):
                raise ArchiveError(
                    "the ClickHouse engine reads an archive through the embedded ledger (chdb); "
                    "with a ClickHouse server, replay the archive with --engine python"
                )
            relations = parquet_relations(
                [
                    ParquetMonth(
                        str(m.events),
                        _text(m.rate_cards),
                        _text(m.usage),
                        _text(m.checkpoints),
                        _text(m.priced),
                    )
                    for m in files
                ]
            )
            return _sql(store, relations, rule, first_day=first_day, last_day=last_day, quiet=quiet)
    if engine == "clickhouse":
        return _sql(
            open_ledger(settings),
            LEDGER_RELATIONS,
            rule,
            first_day=first_day,
            last_day=last_day,
            quiet=quiet,
        )
    log = open_log(settings)
    try:
        history = MergedHistory(
            log,
            make_codec(settings),
            settings.region,
            LEDGER_TOPICS,
            poll_records=2000,
            buffer_per_partition=4000,
        )
        progress = _bar(f"replaying {rule.name}", quiet)
        with progress:
            task = progress.add_task("replay", total=history.progress.records_total)

            def events() -> Any:
                for n, decoded in enumerate(history, 1):
                    if n % 5000 == 0:
                        progress.update(task, completed=history.progress.records_read)
                    yield decoded.envelope

            return replay_python([rule], events(), first_day, last_day)[0]
    finally:
        log.close()


def _spinner(label: str, quiet: bool) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn(f"[bold]{label}[/] {{task.description}}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=quiet,
    )


def _sql(
    store: Any,
    relations: Any,
    rule: Any,
    *,
    first_day: int | None,
    last_day: int | None,
    quiet: bool,
) -> Replayed:
    spinner = _spinner(f"replaying {rule.name} in ClickHouse:", quiet)
    with spinner:
        task = spinner.add_task("", total=None)
        return replay_clickhouse(
            store,
            relations,
            rule,
            first_day=first_day,
            last_day=last_day,
            on_step=lambda s: spinner.update(task, description=s),
        )


# -- output ---------------------------------------------------------------------------------


def _micros(line: dict[str, int]) -> dict[str, int]:
    return {**line, "cost": sum(line[c] for c in COST_CAUSES), "net_saving": net_saving(line)}


def _report(
    result: Replayed,
    source: str,
    first_day: int | None,
    last_day: int | None,
    recorded: dict[Any, int] | None,
) -> dict[str, Any]:
    workloads = by_workload(result.amounts)
    total = dict.fromkeys(CAUSES, 0)
    for line in workloads.values():
        for cause, micros in line.items():
            total[cause] += micros
    report: dict[str, Any] = {
        "rule": result.rule.name,
        "rule_file": result.rule.source,
        "engine": result.engine,
        "source": source,
        "from": day_date(first_day).isoformat() if first_day is not None else None,
        "to": day_date(last_day).isoformat() if last_day is not None else None,
        "events": result.events,
        "seconds": round(result.seconds, 3),
        "events_per_s": round(result.events_per_s),
        "unpriced_events": result.unpriced,
        "currency": "EUR",
        "workloads": [
            {
                "workload_id": w,
                "micros": _micros(line),
                "eur": {k: eur_string(v) for k, v in _micros(line).items()},
            }
            for w, line in workloads.items()
        ],
        "total": {
            "micros": _micros(total),
            "eur": {k: eur_string(v) for k, v in _micros(total).items()},
        },
    }
    if recorded is not None:
        rows = diff(recorded, result.amounts)
        changed = [r for r in rows if r.delta_micros]
        totals: dict[str, dict[str, int]] = {}
        for r in rows:
            t = totals.setdefault(r.cause, {"recorded_micros": 0, "what_if_micros": 0})
            t["recorded_micros"] += r.recorded_micros
            t["what_if_micros"] += r.what_if_micros
        for t in totals.values():
            t["delta_micros"] = t["what_if_micros"] - t["recorded_micros"]
        report["diff"] = {
            "identical": not changed,
            "workloads_compared": len({r.workload_id for r in rows}),
            "rows": [
                {
                    "workload_id": r.workload_id,
                    "line": r.cause,
                    "recorded_micros": r.recorded_micros,
                    "what_if_micros": r.what_if_micros,
                    "delta_micros": r.delta_micros,
                }
                for r in changed
            ],
            "totals": totals,
        }
    return report


def _span(report: dict[str, Any]) -> str:
    return f"{report['from'] or 'the start'} to {report['to'] or 'the end'}"


def _print_ledger(result: Replayed, report: dict[str, Any], limit: int) -> None:
    table = Table(
        title=f"rule {result.rule.name}: the ledger per workload, {_span(report)} (EUR)",
        caption=f"{result.events:,} events in {result.seconds:,.1f} s by the {result.engine} "
        f"engine from the {report['source']}",
    )
    table.add_column("workload", no_wrap=True)
    columns = [*CAUSES, "net_saving"]
    for c in columns:
        table.add_column(SHORT[c], justify="right")
    for w in report["workloads"][:limit]:
        table.add_row(w["workload_id"], *(eur_text(w["micros"][c]) for c in columns))
    more = len(report["workloads"]) - limit
    if more > 0:
        table.add_row(f"... {more:,} more (--limit, --json)", *([""] * len(columns)))
    table.add_row(
        "[bold]total[/]", *(f"[bold]{eur_text(report['total']['micros'][c])}[/]" for c in columns)
    )
    console.print(table)


def _print_diff(result: Replayed, rows: list[DiffRow], report: dict[str, Any], limit: int) -> None:
    d = report["diff"]
    if d["identical"]:
        console.print(
            f"no difference: rule {result.rule.name} reproduces the recorded ledger exactly "
            f"({d['workloads_compared']:,} workloads, every cost line, {_span(report)}; "
            f"{result.events:,} events in {result.seconds:,.1f} s by the {result.engine} engine)",
            highlight=False,
            soft_wrap=True,
        )
        return
    totals = Table(
        title=f"rule {result.rule.name} against the recorded ledger, {_span(report)} (EUR)"
    )
    for column in ("line", "recorded", "what-if", "delta"):
        totals.add_column(column, justify="left" if column == "line" else "right")
    for cause in [*CAUSES, "net_saving"]:
        t = d["totals"][cause]
        totals.add_row(
            SHORT[cause],
            eur_text(t["recorded_micros"]),
            eur_text(t["what_if_micros"]),
            _delta(t["delta_micros"]),
        )
    console.print(totals)
    changed = [r for r in rows if r.delta_micros and r.cause != "net_saving"]
    table = Table(
        title=f"{len(changed):,} workload lines differ"
        + (f" (the first {limit}; --json for all)" if len(changed) > limit else "")
    )
    for column in ("workload", "line", "recorded", "what-if", "delta"):
        table.add_column(column, justify="left" if column in ("workload", "line") else "right")
    for r in changed[:limit]:
        table.add_row(
            r.workload_id,
            SHORT[r.cause],
            eur_text(r.recorded_micros),
            eur_text(r.what_if_micros),
            _delta(r.delta_micros),
        )
    console.print(table)
    saving = d["totals"]["net_saving"]
    console.print(
        f"net saving {eur_text(saving['recorded_micros'])} recorded, "
        f"{eur_text(saving['what_if_micros'])} under {result.rule.name} "
        f"({_delta(saving['delta_micros'])}); {result.events:,} events in "
        f"{result.seconds:,.1f} s by the {result.engine} engine",
        highlight=False,
        soft_wrap=True,
    )


def _delta(micros: int) -> str:
    return ("+" if micros > 0 else "") + eur_text(micros)
