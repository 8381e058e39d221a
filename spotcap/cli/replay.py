"""`spotcap replay`: the history priced under another accounting rule (what-if), per workload,
and ``--diff`` against the recorded ledger (docs/accounting.md).

Two engines give the same amounts to the micro-euro: ``clickhouse`` (the default, the faster:
SQL generated from the rule, over the ledger's tables or the archive's Parquet files) and
``python`` (a fold over the merged history: the log, Kafka or the archive).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import click

from projections.ledger.rule import CAUSES
from projections.ledger.store import LedgerError
from projections.money import eur_text
from projections.stores import StoreError
from replay.archive.storage import ArchiveError
from replay.ledgers import DiffRow, day_number, diff, recorded_amounts
from replay.report import replay_report
from replay.rule_file import RuleError, load_rule
from replay.run import ENGINES, Replayed, replay_archive, replay_log
from spotcap.cli.options import archive_option
from spotcap.cli.output import console, emit_json, progress, say, table
from spotcap.cli.replay_decisions import decisions
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.wiring import make_codec, open_archive, open_log, stores
from streams.log import LogError

SHORT = {
    "counterfactual": "counterfactual",
    "reclaimable_spend": "reclaimable",
    "floor_spend": "floor",
    "fallback_spend": "fallback",
    "surplus": "surplus",
    "wasted_work": "wasted",
    "headroom": "headroom",
    "checkpoint_storage": "checkpoints",
    "footprint": "footprint",
    "idle_floor": "idle floor",
    "net_saving": "net saving",
}


def _day(value: datetime | None) -> int | None:
    return None if value is None else day_number(value.date())


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
        log = open_log(settings)
        try:
            return replay_log(log, make_codec(settings), settings.region, rule, stores(settings),
                              engine=engine, first_day=first_day, last_day=last_day,
                              on_progress=show)
        finally:
            log.close()


# -- output ---------------------------------------------------------------------------------


def _span(report: dict[str, Any]) -> str:
    return f"{report['from'] or 'the start'} to {report['to'] or 'the end'}"


def _print_ledger(result: Replayed, report: dict[str, Any], limit: int) -> None:
    lines = [*CAUSES, "net_saving"]
    rows = [(w["workload_id"], *(eur_text(w["micros"][c]) for c in lines))
            for w in report["workloads"][:limit]]
    if len(report["workloads"]) > limit:
        rows.append((f"... {len(report['workloads']) - limit:,} more (--limit, --json)",
                     *([""] * len(lines))))
    rows.append(("[bold]total[/]", *(f"[bold]{eur_text(report['total']['micros'][c])}[/]"
                                     for c in lines)))
    title = f"rule {result.rule.name}: the ledger per workload, {_span(report)} (EUR)"
    caption = (f"{result.events:,} events in {result.seconds:,.1f} s by the {result.engine} "
               f"engine from the {report['source']}")
    shown = table(title, ["workload", *(SHORT[c] for c in lines)], rows,
                  right=[SHORT[c] for c in lines], caption=caption)
    shown.columns[0].no_wrap = True
    console.print(shown)


def _print_diff(result: Replayed, rows: list[DiffRow], report: dict[str, Any], limit: int) -> None:
    d = report["diff"]
    engine = f"{result.events:,} events in {result.seconds:,.1f} s by the {result.engine} engine"
    if d["identical"]:
        say(f"no difference: rule {result.rule.name} reproduces the recorded ledger exactly "
            f"({d['workloads_compared']:,} workloads, every cost line, {_span(report)}; "
            f"{engine})", markup=False)
        return
    money = ("recorded", "what-if", "delta")
    totals = [(SHORT[cause], eur_text(t["recorded_micros"]), eur_text(t["what_if_micros"]),
               _delta(t["delta_micros"]))
              for cause, t in ((c, d["totals"][c]) for c in [*CAUSES, "net_saving"])]
    title = f"rule {result.rule.name} against the recorded ledger, {_span(report)} (EUR)"
    console.print(table(title, ("line", *money), totals, right=money))
    changed = [r for r in rows if r.delta_micros and r.cause != "net_saving"]
    title = f"{len(changed):,} workload lines differ" + (
        f" (the first {limit}; --json for all)" if len(changed) > limit else "")
    lines = [
        (r.workload_id, SHORT[r.cause], eur_text(r.recorded_micros), eur_text(r.what_if_micros),
         _delta(r.delta_micros))
        for r in changed[:limit]
    ]
    console.print(table(title, ("workload", "line", *money), lines, right=money))
    saving = d["totals"]["net_saving"]
    say(f"net saving {eur_text(saving['recorded_micros'])} recorded, "
        f"{eur_text(saving['what_if_micros'])} under {result.rule.name} "
        f"({_delta(saving['delta_micros'])}); {engine}", markup=False)


def _delta(micros: int) -> str:
    return ("+" if micros > 0 else "") + eur_text(micros)
