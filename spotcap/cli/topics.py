"""`spotcap topics`: the region's topics on Kafka or in the embedded log, and whether the last
run writing the region finished (`streams.runs`)."""

from __future__ import annotations

from contextlib import closing

import click
from rich.markup import escape

from spotcap.cli.output import emit_json, say, show, table
from spotcap.config import Settings
from spotcap.fail import fail


@click.group("topics")
def topics() -> None:
    """Create and inspect the region's topics (on Kafka or in the embedded log)."""


@topics.command("apply")
@click.option("--json", "as_json", is_flag=True, help="Print the changes as JSON.")
@click.pass_obj
def topics_apply(settings: Settings, as_json: bool) -> None:
    """Create missing topics and bring existing ones to their configuration; idempotent."""
    from spotcap.wiring import describe_log, open_log
    from streams.log import LogError
    from streams.topics import applied_rows, region_topics

    with closing(open_log(settings)) as log:
        try:
            changes = log.apply_topics(region_topics(settings.region))
        except LogError as error:
            fail(str(error))
    if as_json:
        emit_json([{"topic": c.name, "action": c.action, "detail": c.detail} for c in changes])
        return
    show(
        table(
            f"topics of region {settings.region} ({describe_log(settings)})",
            ("topic", "partitions", "retention", "cleanup", "action", "detail"),
            applied_rows(settings.region, changes),
        )
    )


@topics.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the topics as JSON.")
@click.pass_obj
def topics_list(settings: Settings, as_json: bool) -> None:
    """Show the region's topics: partitions, end offsets (the next offset each partition
    writes; their sum is the records written) and whether the last run writing the region
    finished. Damage inside the files does not show here: `spotcap log verify` finds it."""
    from spotcap.cli.options import need_home
    from spotcap.wiring import describe_log, open_log, runs_dir
    from streams.log import LogError
    from streams.runs import last_run

    need_home(settings, log=True)
    from streams.topics import end_offset_rows, end_offsets_json, region_end_offsets

    run = last_run(runs_dir(settings), settings.region)
    with closing(open_log(settings)) as log:
        try:
            ends_of = region_end_offsets(log, settings.region)
        except LogError as error:
            fail(str(error))
    if as_json:
        emit_json(end_offsets_json(ends_of, run))
        return
    columns = ("topic", "partitions", "end offsets (sum)", "end offset per partition")
    title = f"topics of region {settings.region} ({describe_log(settings)})"
    show(table(title, columns, end_offset_rows(ends_of), right=columns[1:3]))
    if run is None:
        say(f"no run has written region {settings.region} from this home yet")
    elif run.state == "killed":
        say(f"[bold red]unfinished run[/]: {escape(run.describe())}")
    elif run.state == "failed":
        say(f"[yellow]failed run[/]: {escape(run.describe())}")
    else:
        say(run.describe(), markup=False)
