"""`spotcap log`: read the event log back (`cat`, `tail`) and check the embedded log's files
(`verify`, `repair`)."""

from __future__ import annotations

import json
import time
from contextlib import closing
from typing import Any

import click
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from spotcap.cli.options import need_home
from spotcap.cli.output import emit_json, err_console, say
from spotcap.config import Settings
from spotcap.fail import fail
from spotcap.home import hold_home
from streams.browse import (
    LogStalledError,
    Undecodable,
    Wanted,
    browse,
    event_json,
    event_line,
    since_ms,
)
from streams.log import EventLog, LogError
from streams.partition import quiet_damage_warnings
from streams.topics import physical_name

# With nothing queued, `cat` waits this long for Kafka to assign partitions and deliver.
_KAFKA_IDLE_S = 60.0
_EMBEDDED_IDLE_S = 10.0


@click.group("log")
def log_group() -> None:
    """Read events back from the log, and check the embedded log's files for damage."""


# -- verify and repair -------------------------------------------------------------------------


def _embedded(settings: Settings, command: str) -> Any:
    from streams.embedded import EmbeddedLog

    if settings.kafka_bootstrap:
        fail(
            f"`spotcap log {command}` checks the embedded log's files; Kafka checks its own "
            "segments when a broker starts",
            "leave out --kafka (and unset SPOTCAP_KAFKA_BOOTSTRAP) to check the embedded log",
        )
    if not settings.log_dir.is_dir():
        fail(f"there is no embedded log at {settings.log_dir}", "check --home")
    hold_home(settings, exclusive=command == "repair")  # a repair rewrites segments
    return EmbeddedLog(settings.log_dir)


def _topics(settings: Settings, log: EventLog, names: tuple[str, ...]) -> list[str] | None:
    if not names:
        return None
    topics = [physical_name(settings.region, name) for name in names]
    for topic in topics:
        try:
            log.partitions_for(topic)
        except LogError as error:
            fail(str(error))
    return topics


_TOPIC_OPTION = click.option(
    "--topic",
    "topic_names",
    multiple=True,
    metavar="TOPIC",
    help="Only this topic (logical name like `lifecycle`, or physical); repeatable. "
    "Default: every topic of every region.",
)


@log_group.command("verify")
@_TOPIC_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.pass_obj
def verify(settings: Settings, topic_names: tuple[str, ...], as_json: bool) -> None:
    """Read every block of every segment and check every record; report damage precisely.

    Changes nothing. Each damaged part is named by file, byte range, the offsets it should
    have held and what is wrong. Exits 1 when there is damage (fix it with `spotcap log
    repair`), 0 when there is none.
    """
    from streams.embedded_check import total_bytes
    from streams.embedded_check import verify as check

    log = _embedded(settings, "verify")
    topics = _topics(settings, log, topic_names)
    started = time.perf_counter()
    progress = Progress(
        TextColumn("[bold]checking[/] {task.description}"), BarColumn(), DownloadColumn(),
        TimeRemainingColumn(), console=err_console, transient=True, disable=as_json,
    )  # fmt: skip
    with progress, quiet_damage_warnings():
        task = progress.add_task("segments", total=total_bytes(log, topics))
        checked = check(log, topics, lambda n: progress.advance(task, n))
    seconds = time.perf_counter() - started
    found = len(checked.damage)
    parts = "part" if found == 1 else "parts"
    repair = "readers go on past damage; `spotcap log repair` moves the damaged parts aside"
    if as_json:
        report = {"log": str(settings.log_dir), **checked.as_json()}
        if found:
            fail(f"{found:,} damaged {parts}", repair, json_report=report)
        emit_json(report)
        return
    summary = checked.summary(settings.log_dir, seconds)
    if not checked.damage:
        say(f"[green]ok[/]: {escape(summary)}: no damage")
        return
    say(f"[bold red]{found:,} damaged {parts}[/] of the embedded log:")
    for d in checked.damage:
        say(d.lines(settings.log_dir), markup=False)
    say(summary, markup=False)
    fail(f"the embedded log has {found:,} damaged {parts}", repair)


@log_group.command("repair")
@_TOPIC_OPTION
@click.option("--dry-run", is_flag=True, help="Say what would be moved aside; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@click.pass_obj
def repair(settings: Settings, topic_names: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Move the damaged parts of the embedded log aside, and say what was moved where.

    Each damaged segment is rewritten without its damaged parts: the records around them
    keep their offsets, and a block with some bad records keeps its good ones. What is taken
    out goes to <home>/log/_quarantine/repair-<time>/, with a README line for each part saying
    what it was and why it was moved. No offset that was ever written is used again. Needs
    the writer lock: stop whatever is writing the log first.
    """
    from streams.embedded_check import repair as fix
    from streams.embedded_check import repair_readme

    log = _embedded(settings, "repair")
    topics = _topics(settings, log, topic_names)
    try:
        with quiet_damage_warnings():
            done = fix(log, topics, dry_run=dry_run)
    except LogError as error:
        fail(str(error))
    if as_json:
        emit_json({"dry_run": dry_run, "actions": [r.as_json() for r in done]})
        return
    if not done:
        say("[green]nothing to repair[/]: no damage found")
        return
    verb = "would move" if dry_run else "moved"
    say(f"{verb} {len(done):,} {'part' if len(done) == 1 else 'parts'} of the embedded log:")
    for r in done:
        say(r.describe(settings.log_dir), markup=False)
    readme = repair_readme(done, settings.log_dir)
    if dry_run:
        say("nothing was changed (--dry-run)")
    elif readme is not None:
        say(f"what was moved and why: {readme}", markup=False)


# -- cat and tail ------------------------------------------------------------------------------


def _since_ms(text: str | None) -> int | None:
    """`--since` (`streams.browse.since_ms`), or a usage error saying what it takes."""
    try:
        return None if text is None else since_ms(text)
    except ValueError as error:
        fail(str(error), "give a UTC time (ISO 8601) or how far back to start", usage=True)


def _read_options(command: Any) -> Any:
    for option in reversed(
        [
            click.argument("topic"),
            click.option(
                "--from",
                "from_offset",
                type=click.IntRange(min=0),
                default=None,
                metavar="OFFSET",
                help="Start at this offset in every partition (default: the first).",
            ),
            click.option(
                "--since",
                default=None,
                metavar="TIME",
                help="Only events that occurred at or after TIME (event time): "
                "2026-12-01T08:00:00Z, 2026-12-01 (UTC), or 2h / 30m / 7d ago.",
            ),
            click.option("--key", default=None, help="Only events with this key."),
            click.option(
                "--type", "event_type", default=None, help="Only events of this event type."
            ),
            click.option("--json", "as_json", is_flag=True, help="One JSON object per line."),
        ]
    ):
        command = option(command)
    return command


@log_group.command("cat")
@_read_options
@click.pass_obj
def cat(settings: Settings, /, **options: Any) -> None:
    """Print a topic's events from the start (or --from/--since) to the end it has now.

    TOPIC is a logical name (`lifecycle`, prefixed with the region) or a physical one
    (`eu-west.lifecycle`). Works on Kafka and on the embedded log.
    """
    _print_events(settings, follow=False, **options)


@log_group.command("tail")
@_read_options
@click.pass_obj
def tail(settings: Settings, /, **options: Any) -> None:
    """Print a topic's events and follow it, printing new events as they come; Ctrl-C stops.

    Starts at the beginning (or --from/--since). TOPIC as for `spotcap log cat`.
    """
    _print_events(settings, follow=True, **options)


def _print_events(
    settings: Settings,
    *,
    topic: str,
    from_offset: int | None,
    since: str | None,
    key: str | None,
    event_type: str | None,
    as_json: bool,
    follow: bool,
) -> None:
    from schemas.catalogue import event_types

    wanted = Wanted(from_offset or 0, _since_ms(since), key, event_type)
    from spotcap.wiring import make_codec, open_log

    if wanted.event_type is not None and wanted.event_type not in {t.name for t in event_types()}:
        fail(
            f"there is no event type {wanted.event_type!r}",
            "`spotcap events` lists them (e.g. notice_received, instance_lost)",
        )
    need_home(settings, log=True)
    hold_home(settings)
    topic = physical_name(settings.region, topic)
    region = topic.partition(".")[0] if "." in topic else settings.region
    idle_s = _KAFKA_IDLE_S if settings.kafka_bootstrap else _EMBEDDED_IDLE_S
    printed = 0
    with closing(open_log(settings)) as log:
        try:
            with quiet_damage_warnings():  # damage is printed as undecodable records
                for item in browse(
                    log, make_codec(settings), topic, region, wanted, follow=follow, idle_s=idle_s
                ):
                    if isinstance(item, Undecodable):
                        _print_undecodable(item, as_json)
                    else:
                        show = event_json if as_json else event_line
                        click.echo(show(item.origin, item.envelope))
                        printed += 1
        except LogStalledError as error:
            fail(str(error), "check that the log is reachable, then run the command again")
        except LogError as error:
            fail(str(error), f"the topics of region {settings.region}: `spotcap topics list`")
        except KeyboardInterrupt:
            printed = -1
    if not as_json and not follow and printed >= 0:
        noun = "event" if printed == 1 else "events"
        err_console.print(f"[dim]{printed:,} {noun} from {topic}[/]", highlight=False)


def _print_undecodable(item: Undecodable, as_json: bool) -> None:
    if as_json:  # on stderr, as for people: stdout holds only the events
        click.echo(json.dumps({"undecodable": item.where, "reason": item.reason}), err=True)
    else:
        say(f"[yellow]undecodable[/] {escape(item.where)}: {escape(item.reason)}", err=True)
