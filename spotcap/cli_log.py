"""`spotcap log`: read the event log back (`cat`, `tail`) and check the embedded log's files
(`verify`, `repair`)."""

from __future__ import annotations

import base64
import json
import logging
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from schemas.events import DeadLettered, Envelope
from spotcap.config import Settings
from spotcap.fail import fail
from streams.log import Consumer, EventLog, Headers, LogError, Record, TopicPartition
from streams.reader import Decoded, DecodingReader

console = Console()
err_console = Console(stderr=True)
# With nothing queued, `cat` waits this long for Kafka to assign partitions and deliver.
_KAFKA_IDLE_S = 30.0
_EMBEDDED_IDLE_S = 2.0


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
    return EmbeddedLog(settings.log_dir)


def _topics(settings: Settings, log: EventLog, names: tuple[str, ...]) -> list[str] | None:
    if not names:
        return None
    topics = [_physical(settings, name) for name in names]
    for topic in topics:
        try:
            log.partitions_for(topic)
        except LogError as error:
            fail(str(error))
    return topics


def _physical(settings: Settings, name: str) -> str:
    """A topic's physical name: a logical name (`lifecycle`) gets the region's prefix."""
    from streams.topics import LOGICAL_NAMES, topic_name

    return topic_name(settings.region, name) if name in LOGICAL_NAMES else name


@contextmanager
def _quiet_damage_warnings() -> Iterator[None]:
    """Damage is reported in the command's table; the reader's warnings would repeat it."""
    logger = logging.getLogger("spotcap.log.embedded")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


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
    progress = _progress(as_json, "checking")
    with progress, _quiet_damage_warnings():
        task = progress.add_task("segments", total=total_bytes(log, topics))
        checked = check(log, topics, lambda n: progress.advance(task, n))
    seconds = time.perf_counter() - started
    found = len(checked.damage)
    parts = "part" if found == 1 else "parts"
    repair = "readers go on past damage; `spotcap log repair` moves the damaged parts aside"
    if as_json:
        report = {
            "log": str(settings.log_dir),
            "segments": checked.segments,
            "blocks": checked.blocks,
            "records": checked.records,
            "bytes": checked.bytes,
            "writer_active": checked.writer_active,
            "damage": [d.as_json() for d in checked.damage],
        }
        if found:
            fail(f"{found:,} damaged {parts}", repair, json_report=report)
        click.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    summary = (
        f"checked {checked.segments:,} segments, {checked.blocks:,} blocks, "
        f"{checked.records:,} records ({checked.bytes / 2**20:,.1f} MiB) under "
        f"{settings.log_dir} in {seconds:,.1f} s"
    )
    if checked.writer_active:
        summary += "; another process is writing: the newest bytes of each partition not judged"
    if not checked.damage:
        console.print(
            f"[green]ok[/]: {escape(summary)}: no damage", highlight=False, soft_wrap=True
        )
        return
    console.print(f"[bold red]{found:,} damaged {parts}[/] of the embedded log:")
    for d in checked.damage:
        console.print(
            f"  [bold]{escape(f'{d.topic}[{d.partition}]')}[/] "
            f"{escape(str(d.path.relative_to(settings.log_dir)))}\n"
            f"      bytes {d.start:,}-{max(d.start, d.end - 1):,}, offsets {d.offsets} "
            f"({d.kind}): {escape(d.what)}",
            highlight=False,
            soft_wrap=True,
        )
    console.print(summary, markup=False, highlight=False, soft_wrap=True)
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

    log = _embedded(settings, "repair")
    topics = _topics(settings, log, topic_names)
    try:
        with _quiet_damage_warnings():
            done = fix(log, topics, dry_run=dry_run)
    except LogError as error:
        fail(str(error))
    if as_json:
        rows = [
            {
                "file": str(r.path),
                "start_byte": r.start,
                "end_byte": r.end,
                "offsets": r.offsets,
                "what": r.what,
                "moved_to": str(r.moved_to) if r.moved_to else None,
            }
            for r in done
        ]
        click.echo(json.dumps({"dry_run": dry_run, "actions": rows}, indent=2, sort_keys=True))
        return
    if not done:
        console.print("[green]nothing to repair[/]: no damage found", highlight=False)
        return
    verb = "would move" if dry_run else "moved"
    parts = "part" if len(done) == 1 else "parts"
    console.print(f"{verb} {len(done):,} {parts} of the embedded log:", highlight=False)
    for r in done:
        span = f"bytes {r.start:,}-{max(r.start, r.end - 1):,}" if r.end > r.start else "new"
        moved = f"\n      -> {r.moved_to.relative_to(settings.log_dir)}" if r.moved_to else ""
        console.print(
            f"  {r.path.relative_to(settings.log_dir)}: {span}, offsets {r.offsets}: "
            f"{r.what}{moved}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if dry_run:
        console.print("nothing was changed (--dry-run)")
    else:
        first = next((r.moved_to for r in done if r.moved_to), None)
        if first is not None:
            quarantine = settings.log_dir / "_quarantine"
            readme = quarantine / first.relative_to(quarantine).parts[0] / "README"
            console.print(
                f"what was moved and why: {readme}", markup=False, highlight=False, soft_wrap=True
            )


def _progress(disabled: bool, verb: str) -> Progress:
    return Progress(
        TextColumn(f"[bold]{verb}[/] {{task.description}}"),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        disable=disabled,
    )


# -- cat and tail ------------------------------------------------------------------------------


class _Undecodable:
    """Takes the dead letters of a reading command instead of writing them to the log:
    `cat` and `tail` only read, and print what they could not decode."""

    def __init__(self) -> None:
        self.letters: list[bytes] = []

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers = (),
        timestamp_ms: int | None = None,
    ) -> None:
        self.letters.append(value or b"")

    def flush(self, timeout_s: float = 30.0) -> list[Record]:
        return []

    def close(self) -> None:
        pass


def _since_ms(text: str | None) -> int | None:
    """`--since`: an ISO 8601 time (UTC when it names no zone) or a duration back from now."""
    if text is None:
        return None
    relative = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhd])", text.strip())
    if relative:
        seconds = float(relative[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[relative[2]]
        return int((datetime.now(UTC) - timedelta(seconds=seconds)).timestamp() * 1000)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        fail(
            f"--since {text!r} is neither a time like 2026-12-01T08:00:00Z nor a duration "
            "like 2h or 7d",
            "give a UTC time (ISO 8601) or how far back to start",
            usage=True,
        )
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


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
def cat(
    settings: Settings,
    *,
    topic: str,
    from_offset: int | None,
    since: str | None,
    key: str | None,
    event_type: str | None,
    as_json: bool,
) -> None:
    """Print a topic's events from the start (or --from/--since) to the end it has now.

    TOPIC is a logical name (`lifecycle`, prefixed with the region) or a physical one
    (`eu-west.lifecycle`). Works on Kafka and on the embedded log.
    """
    _print_events(
        settings,
        name=topic,
        from_offset=from_offset,
        since=since,
        key=key,
        event_type=event_type,
        as_json=as_json,
        follow=False,
    )


@log_group.command("tail")
@_read_options
@click.pass_obj
def tail(
    settings: Settings,
    *,
    topic: str,
    from_offset: int | None,
    since: str | None,
    key: str | None,
    event_type: str | None,
    as_json: bool,
) -> None:
    """Print a topic's events and follow it, printing new events as they come; Ctrl-C stops.

    Starts at the beginning (or --from/--since). TOPIC as for `spotcap log cat`.
    """
    _print_events(
        settings,
        name=topic,
        from_offset=from_offset,
        since=since,
        key=key,
        event_type=event_type,
        as_json=as_json,
        follow=True,
    )


@dataclass(frozen=True, slots=True)
class _Wanted:
    """Which events `cat` and `tail` print."""

    from_offset: int
    since_ms: int | None
    key: str | None
    event_type: str | None

    def __call__(self, decoded: Decoded) -> bool:
        envelope = decoded.envelope
        return (
            decoded.origin.offset >= self.from_offset
            and (self.since_ms is None or envelope.occurred_at // 1000 >= self.since_ms)
            and (self.key is None or envelope.key == self.key)
            and (self.event_type is None or envelope.event_type == self.event_type)
        )


def _print_events(
    settings: Settings,
    *,
    name: str,
    from_offset: int | None,
    since: str | None,
    key: str | None,
    event_type: str | None,
    as_json: bool,
    follow: bool,
) -> None:
    from schemas.catalogue import event_types
    from spotcap.wiring import make_codec, open_log
    from streams.schema_store import SchemaStore

    wanted = _Wanted(from_offset or 0, _since_ms(since), key, event_type)
    if event_type is not None and event_type not in {t.name for t in event_types()}:
        fail(
            f"there is no event type {event_type!r}",
            "`spotcap events` lists them (e.g. notice_received, instance_lost)",
        )
    topic = _physical(settings, name)
    try:
        log = open_log(settings)
        ends = log.end_offsets(topic)
        group = f"spotcap-log-{uuid.uuid4().hex[:12]}"  # a throwaway group, never committed
        start = _StartAt(from_offset) if from_offset else None
        consumer = log.consumer(group, [topic], listener=start)
    except LogError as error:
        fail(str(error), f"the topics of region {settings.region}: `spotcap topics list`")
    codec = make_codec(settings)
    undecodable = _Undecodable()
    region = topic.partition(".")[0] if "." in topic else settings.region
    reader = DecodingReader(
        consumer,
        codec,
        undecodable,
        region,
        "spotcap log",
        schema_store=SchemaStore(log, region, codec),
    )
    try:
        with _quiet_damage_warnings():  # damage is printed as undecodable records
            printed = _print_until(
                settings, reader, undecodable, wanted, ends, as_json, follow=follow
            )
    except KeyboardInterrupt:
        printed = -1
    finally:
        consumer.close()
        log.close()
    if not as_json and not follow and printed >= 0:
        noun = "event" if printed == 1 else "events"
        err_console.print(f"[dim]{printed:,} {noun} from {topic}[/]", highlight=False)


def _print_until(  # noqa: PLR0917 (the reading loop's parts)
    settings: Settings,
    reader: DecodingReader,
    undecodable: _Undecodable,
    wanted: _Wanted,
    ends: Mapping[int, int],
    as_json: bool,
    *,
    follow: bool,
) -> int:
    """Print wanted events until every partition reached its end offset (or, following, until
    Ctrl-C); returns how many were printed."""
    from spotcap.wiring import describe_log

    positions = dict.fromkeys(ends, wanted.from_offset)
    idle_s = _KAFKA_IDLE_S if settings.kafka_bootstrap else _EMBEDDED_IDLE_S
    printed = 0
    last_progress = time.monotonic()
    while follow or any(positions[p] < end for p, end in ends.items()):
        batch = reader.poll(max_records=1000, timeout_s=1.0)
        for (_, partition), position in batch.positions.items():
            positions[partition] = max(positions[partition], position)
            last_progress = time.monotonic()
        for decoded in filter(wanted, batch.events):
            origin = decoded.origin
            _print_event(origin.topic, origin.partition, origin.offset, decoded.envelope, as_json)
            printed += 1
        _print_undecodable(reader.codec, undecodable, as_json)
        if not follow and time.monotonic() - last_progress > idle_s:
            fail(
                f"{describe_log(settings)} delivered nothing for {idle_s:g} s before reaching "
                "the end offsets it had when the command started",
                "check that the log is reachable, then run the command again",
            )
    return printed


class _StartAt:
    """Starts every partition at one offset, as it is assigned (`--from`)."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def on_assign(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        for topic, partition in partitions:
            consumer.seek(topic, partition, self.offset)

    def on_revoke(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        pass


def _print_undecodable(codec: Any, undecodable: _Undecodable, as_json: bool) -> None:
    for letter in undecodable.letters:
        payload = codec.decode(letter).payload
        assert isinstance(payload, DeadLettered)
        where = f"{payload.origin_topic}[{payload.origin_partition}]@{payload.origin_offset}"
        if as_json:
            click.echo(json.dumps({"undecodable": where, "reason": payload.reason}))
        else:
            err_console.print(
                f"[yellow]undecodable[/] {escape(where)}: {escape(payload.reason)}",
                highlight=False,
                soft_wrap=True,
            )
    undecodable.letters.clear()


def _print_event(
    topic: str, partition: int, offset: int, envelope: Envelope, as_json: bool
) -> None:
    payload = envelope.payload.to_avro()
    if as_json:
        data = {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "event_id": envelope.event_id,
            "event_type": envelope.event_type,
            "occurred_at": envelope.occurred_at,
            "recorded_at": envelope.recorded_at,
            "region": envelope.region,
            "key": envelope.key,
            "causation_id": envelope.causation_id,
            "correlation_id": envelope.correlation_id,
            "producer": envelope.producer,
            "payload": payload,
        }
        click.echo(json.dumps(data, default=_json_default, sort_keys=True))
        return
    when = datetime.fromtimestamp(envelope.occurred_at / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S")
    fields = json.dumps(payload, default=_json_default, separators=(",", ":"))
    head = f"{partition:>3} {offset:>10,}  {when}  {envelope.event_type:<26} {envelope.key:<36}"
    click.echo(f"{head} {fields}"[:400])


def _json_default(value: object) -> object:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")
